"""Columns that ranks hold alike stay one object from the worker to the database (issue 51): the
main process receives each once (reading/wire.py), recodes it once (analysis.align.Codes, whose
kind codes leave the group's name out) and the database's pickle writes it once."""

from __future__ import annotations

import io

from conftest import make_dump, ops, write_dumps
from frtrace.analysis.align import Codes, build_tracks
from frtrace.builder import build_database, write_database
from frtrace.loader import load_dumps
from frtrace.matcher import analyze
from frtrace.reading.discover import find_dump_files
from frtrace.reading.groups import resolve_groups

TP = 2


def _job(tmp_path, world: int, odd: dict[int, str] | None = None, steps: int = 1):
    """`world` ranks in tp groups of TP (group names 1, 2, ...), each running 6 tp all_reduces and
    4 world ones `steps` times; `odd`: rank -> the op it runs in its tp group instead."""
    configs = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
    for base in range(0, world, TP):
        name = str(1 + base // TP)
        configs[name] = {"name": name, "desc": "tp", "ranks": str(list(range(base, base + TP)))}
    dumps = {}
    for rank in range(world):
        op = (odd or {}).get(rank, "all_reduce")
        dumps[rank] = make_dump(ops(6 * steps, pg=str(1 + rank // TP), desc="tp", op=op) + ops(4 * steps), pg_config=configs)
    return load_dumps(find_dump_files(str(write_dumps(tmp_path, dumps))), workers=0)


def test_groups_of_one_program_share_their_kind_codes_and_each_shared_run_is_recoded_once(tmp_path):
    loaded = _job(tmp_path, 8)
    dumps = loaded.dumps
    codes = Codes(dumps)
    assert len({d.entries.kinds for d in dumps.values()}) == 4  # each tp group's names its own kinds
    assert len(codes.kinds) == 2  # a tp all_reduce and a world one, whatever the tp group's name
    table = resolve_groups(dumps, loaded.ranks_named, None)
    tracks = {rank: build_tracks(dump, table, codes)[0] for rank, dump in dumps.items()}
    tp_kinds = [next(t.kinds for g, t in tracks[rank].items() if g.desc == "tp") for rank in dumps]
    assert len({id(kinds) for kinds in tp_kinds}) == 1  # one column, one map: recoded once for eight ranks
    assert codes.kinds[tp_kinds[0][0]].op == "all_reduce"


def test_an_op_of_its_own_in_one_group_still_gets_a_code_of_its_own_and_is_found(tmp_path):
    loaded = _job(tmp_path, 8, odd={5: "all_gather"})
    codes = Codes(loaded.dumps)
    assert sorted(kind.op for kind in codes.kinds) == ["all_gather", "all_reduce", "all_reduce"]
    analysis = analyze(loaded.dumps, resolve_groups(loaded.dumps, loaded.ranks_named, None))
    found = [f for f in analysis.findings if f.group.desc == "tp"]
    assert found and all(f.group.ranks == (4, 5) for f in found), analysis.findings
    assert 5 in found[0].ranks or 4 in found[0].ranks


def _pickled_size(tmp_path, world: int) -> int:
    loaded = _job(tmp_path / str(world), world, steps=20)
    table = resolve_groups(loaded.dumps, loaded.ranks_named, None)
    handle = io.BytesIO()
    write_database(build_database(analyze(loaded.dumps, table), loaded.dumps, table), handle)
    return len(handle.getvalue())


def test_the_database_pickles_a_column_ranks_share_once(tmp_path):
    small, large = _pickled_size(tmp_path, 8), _pickled_size(tmp_path, 40)
    loaded = _job(tmp_path / "one", 2, steps=20)
    entries = loaded.dumps[0].entries
    columns = sum(len(bytes(c)) for c in (entries.kind, entries.record_id, entries.collective_seq_id,
                                          entries.p2p_seq_id, entries.stack_id))
    per_rank = (large - small) / 32
    assert columns > 2000 and per_rank < columns, (per_rank, columns)  # each rank's columns are not written again


def test_ranks_whose_kinds_name_other_groups_share_their_calls_ops_and_sizes(tmp_path):
    """Each tp group's ranks hold kinds of their own (a kind names its group), so no two groups'
    kinds are one tuple; what the calls table reads of them (op, sizes) is still one list for all,
    which the pickle writes once."""
    loaded = _job(tmp_path, 8)
    dumps = loaded.dumps
    table = resolve_groups(dumps, loaded.ranks_named, None)
    db = build_database(analyze(dumps, table), dumps, table)
    calls = db.ncclcalls
    ops, sizes, groups = (calls.column(name).blocks for name in ("collective_type", "sizes", "group_id"))
    assert len({id(d.entries.kinds) for d in dumps.values()}) == 4
    assert len({id(values) for _, values in ops}) == 1 and len({id(values) for _, values in sizes}) == 1
    assert len({tuple(values) for _, values in groups}) == 4  # the tp group read for each rank is its own
    assert [call.collective_type for call in calls][:7] == ["gloo:all_reduce"] * 7  # make_dump's backend
    assert {call.group_id for call in calls if call.global_rank == 5} == {"0", "3"}


def test_a_dump_with_more_kinds_of_its_own_than_a_byte_holds_and_few_codes_in_the_job(tmp_path):
    """300 groups running one op: each dump's own kind codes need more than a byte, the job's
    (the groups' names left out) fit in one; the tracks are recoded to bytes all the same
    (found by tests/fuzz_dumps.py: an array has no translate)."""
    groups = 300
    configs = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    configs.update({str(g): {"name": str(g), "desc": "sub", "ranks": "[0, 1]"} for g in range(1, groups + 1)})
    held = [entry for g in range(1, groups + 1) for entry in ops(1, pg=str(g), desc="sub")] + ops(2)
    dumps = {rank: make_dump(held if rank == 0 else held[:-1], pg_config=configs) for rank in (0, 1)}
    loaded = load_dumps(find_dump_files(str(write_dumps(tmp_path, dumps))), workers=0)
    assert not isinstance(loaded.dumps[0].entries.kind, bytes)  # 301 kinds of its own
    codes = Codes(loaded.dumps)
    assert len(codes.kinds) == 2
    analysis = analyze(loaded.dumps, resolve_groups(loaded.dumps, loaded.ranks_named, None))
    assert [(f.group.name, f.ranks) for f in analysis.findings[:1]] == [("0", (1,))], analysis.findings
