"""The column path (runs compared slice by slice, agreed collectives never built entry by entry)
gives exactly what the entry-by-entry path gives: the same analysis and the same database."""

from __future__ import annotations

import importlib.util
import pickle
from array import array
from dataclasses import astuple
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import entry, examples, make_dump, ops, scenario_dirs, write_dumps
from frtrace.reading import runs
from frtrace.analysis.align import GroupView, Track
from frtrace.builder import build_database
from frtrace.reading.discover import find_dump_files
from frtrace.reading.groups import resolve_groups
from frtrace.loader import load_dumps, normalize, read_dump
from frtrace.matcher import analyze
from frtrace.outputs.stats import compute_stats
from frtrace.types import EntryColumns, recode
from test_properties import dump_sets

_spec = importlib.util.spec_from_file_location("generate", Path(__file__).parents[1] / "benchmarks" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def _analysis_and_db(directory: Path):
    loaded = load_dumps(find_dump_files(str(directory), None), workers=1)
    table = resolve_groups(loaded.dumps, loaded.ranks_named, None)
    analysis = analyze(loaded.dumps, table, notes=loaded.notes)
    return analysis, build_database(analysis, loaded.dumps, table), compute_stats(analysis, loaded.dumps)


def _summary(analysis) -> tuple:
    checks = [(c.group.name, c.group.ranks, c.collective_seq_id, c.missing_ranks, c.mismatch, c.entries) for c in analysis.checks]
    findings = [astuple(f) for f in analysis.findings]  # groups compare by identity: as plain tuples
    return (analysis.verdict, analysis.headline, analysis.culprit_ranks, findings, analysis.warnings,
            analysis.culprit_entries, checks)


def _assert_same_both_ways(directory: Path, monkeypatch) -> tuple:
    fast, fast_db, fast_stats = _analysis_and_db(directory)
    with monkeypatch.context() as patch:
        patch.setattr(runs, "_first_seq", lambda *args: None)  # no run is a column track
        patch.setattr(GroupView, "alike", lambda self, seq: False)  # every unit checked entry by entry
        slow, slow_db, slow_stats = _analysis_and_db(directory)
    assert _summary(fast) == _summary(slow)
    assert fast_stats == slow_stats  # agreed collectives' stats read from columns, the others entry by entry
    for name in fast_db._fields:
        assert getattr(fast_db, name) == getattr(slow_db, name), name
    return fast, slow


def _generated(directory: Path, ranks=16, entries=120, tp=4, pp=1, fault="none", wrap=False, shape=()) -> Path:
    args = generate.arguments().parse_args([str(directory), "--ranks", str(ranks), "--entries", str(entries), "--tp", str(tp),
                                            "--pp", str(pp), "--fault", fault, *(["--wrap"] if wrap else []), *shape])
    directory.mkdir(exist_ok=True)
    for rank in range(ranks):
        generate.write_rank((rank, args))
    return directory


@pytest.mark.parametrize("scenario", scenario_dirs(), ids=[p.name for p in scenario_dirs()])
def test_fixtures_give_the_same_answer_by_column_and_entry_by_entry(scenario, monkeypatch):
    _assert_same_both_ways(scenario, monkeypatch)


@pytest.mark.parametrize("fault", ["none", "skip", "size", "dtype"])
@pytest.mark.parametrize("wrap", [False, True], ids=["even", "wrapped"])
@pytest.mark.parametrize("pp", [1, 2])
def test_generated_jobs_give_the_same_answer_both_ways(fault, wrap, pp, tmp_path, monkeypatch):
    fast, _ = _assert_same_both_ways(_generated(tmp_path, pp=pp, fault=fault, wrap=wrap), monkeypatch)
    middle = 16 // 2 + 1  # where generate.py injects its fault
    if fault == "none":
        assert fast.verdict == "clean", fast.headline
    else:
        assert fast.verdict == "desync" and fast.culprit_ranks == (middle,), fast.headline


SHAPES = {  # benchmarks/run.py --matrix's shapes of dump
    "timing": ["--timing"], "repeated-times": ["--timing", "--repeated-times"], "stacks-off": ["--stacks", "off"],
    "own-stacks": ["--stacks", "own"], "own-values": ["--stacks", "own", "--own-values"], "coalesced": ["--coalesced"],
    "json": ["--json"], "worst": ["--timing", "--stacks", "own", "--own-values", "--coalesced"],
}


@pytest.mark.parametrize("fault", ["none", "skip"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_of_dump_gives_the_same_answer_both_ways(shape, fault, tmp_path, monkeypatch):
    fast, _ = _assert_same_both_ways(_generated(tmp_path, pp=2, fault=fault, wrap=True, shape=SHAPES[shape]), monkeypatch)
    if fault == "none":
        assert fast.verdict == "clean", fast.headline
    else:
        assert fast.verdict == "desync" and fast.culprit_ranks == (16 // 2 + 1,), fast.headline


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_of_dump_reads_the_same_by_the_fast_and_careful_paths(shape, tmp_path, monkeypatch):
    from frtrace.reading import fastpath

    _generated(tmp_path, ranks=8, entries=60, tp=4, pp=2, wrap=True, shape=SHAPES[shape])
    taken = []
    fast_columns = fastpath.fast_columns
    monkeypatch.setattr(fastpath, "fast_columns", lambda *args: taken.append(fast_columns(*args)) or taken[-1])
    for path in sorted(tmp_path.iterdir()):
        fast = read_dump(str(path), 0)
        assert taken.pop() is not None, f"{path.name}: the fast path declined a {shape} dump"
        with monkeypatch.context() as patch:
            patch.setattr(fastpath, "fast_columns", lambda *args: None)
            careful = read_dump(str(path), 0)
        assert fast.entries == careful.entries and fast.stacks == careful.stacks
        assert list(fast.entries) == list(careful.entries)
        every_third = range(len(fast.entries) - 1, -1, -3)
        assert fast.entries.at(every_third) == [careful.entries[i] for i in every_third]
        if "--stacks" not in SHAPES[shape] and "--json" not in SHAPES[shape]:  # a stack per op
            assert [fast.stacks[i][0].name for i in fast.entries.stack_id] == [e.op.split(" ")[0] for e in fast.entries]


def test_stacks_shared_or_own_objects_read_alike(tmp_path):
    _generated(tmp_path / "shared", ranks=8, entries=40, tp=4)
    _generated(tmp_path / "own", ranks=8, entries=40, tp=4, shape=["--stacks", "own", "--own-values"])
    shared, own = (read_dump(str(tmp_path / kind / "nccl_trace_rank_3"), 3) for kind in ("shared", "own"))
    assert shared.entries == own.entries and shared.stacks == own.stacks
    assert [own.stacks[i][0].name for i in own.entries.stack_id] == [e.op.split(" ")[0] for e in own.entries]


def test_a_record_id_the_dump_lacks_reads_minus_one_in_an_agreed_run(tmp_path, monkeypatch):
    # the collectives table takes an agreed run's record ids from its lowest issuer's column; one
    # None in it makes the column a tuple, whose None must read -1 as row by row
    dumps = {r: make_dump([entry(seq=s) for s in range(1, 7)]) for r in range(4)}
    dumps[0]["entries"][2]["record_id"] = None
    fast, _ = _assert_same_both_ways(write_dumps(tmp_path, dumps), monkeypatch)
    _, db, _ = _analysis_and_db(tmp_path)
    assert fast.verdict == "clean"
    assert list(db.collectives.column("record_id")) == [0, 1, -1, 3, 4, 5]
    assert [c.record_id for c in db.collectives] == [0, 1, -1, 3, 4, 5]


def test_checks_held_as_runs_read_as_one_check_each():
    from frtrace.types import AgreedRun, Checks, CollectiveCheck, Group

    tp, dp = Group("1", "tp", (0, 1)), Group("2", "dp", (0, 2))
    single = CollectiveCheck(tp, 7, (1,), None, "view", agreed=True)
    odd = CollectiveCheck(dp, 3, (), "size_mismatch", "view")
    checks = Checks([AgreedRun(tp, 4, 6, "view"), single, AgreedRun(dp, 1, 2, "view"), odd])
    expanded = [*(CollectiveCheck(tp, s, (), None, "view", agreed=True) for s in (4, 5, 6)), single,
                *(CollectiveCheck(dp, s, (), None, "view", agreed=True) for s in (1, 2)), odd]
    assert list(checks) == expanded and len(checks) == 7
    assert [checks[i] for i in range(-7, 7)] == expanded + expanded
    assert checks[2:5] == expanded[2:5]
    assert checks.matched() == 5  # the runs' five; #7 lacks rank 1, dp #3 mismatched
    assert checks.at(tp, 4) == expanded[0] and checks.at(tp, 6) == expanded[2] and checks.at(tp, 7) is single and checks.at(dp, 3) is odd
    assert checks.at(dp, 4) is None and checks.at(Group("1", "tp", (0, 1)), 5) is None  # groups compare by identity
    with pytest.raises(IndexError):
        checks[7]
    assert checks == Checks(checks.parts) and checks != Checks(checks.parts[1:])


def test_more_than_256_kinds_compare_as_arrays(tmp_path, monkeypatch):
    # every collective has its own size: 300 kinds, past what one byte per code can hold
    dumps = {r: make_dump([entry(seq=s, sizes=((s,),)) for s in range(1, 301)]
                          + [entry(seq=301, sizes=((7 if r == 2 else 1,),))]) for r in range(4)}
    fast, _ = _assert_same_both_ways(write_dumps(tmp_path, dumps), monkeypatch)
    assert fast.verdict == "desync" and fast.culprit_ranks == (2,)
    assert [c.collective_seq_id for c in fast.checks if c.mismatch] == [301]


def test_more_than_256_kinds_in_all_with_fewer_in_each_rank_are_widened_from_bytes(tmp_path, monkeypatch):
    # two groups of three ranks, each group with its own 150 sizes: 300 kinds in all, 150 in a rank,
    # so a rank's codes are bytes and the set's are 4-byte ints, widened a byte at a time
    ranks_of = {"1": [0, 1, 2], "2": [3, 4, 5]}
    config = {name: {"name": name, "desc": "tp", "ranks": str(ranks)} for name, ranks in ranks_of.items()}
    dumps = {}
    for rank in range(6):
        pg = "1" if rank < 3 else "2"
        sizes = [1000 * int(pg) + s for s in range(1, 151)] + [7 if rank == 4 else 1]
        dumps[rank] = make_dump([entry(pg=pg, desc="tp", seq=s, sizes=((size,),)) for s, size in enumerate(sizes, 1)],
                                pg_config=config)
    fast, _ = _assert_same_both_ways(write_dumps(tmp_path, dumps), monkeypatch)
    assert fast.verdict == "desync" and fast.culprit_ranks == (4,)
    assert [(c.group.name, c.collective_seq_id) for c in fast.checks if c.mismatch] == [("2", 151)]
    _, db, _ = _analysis_and_db(tmp_path)
    calls = [(call.global_rank, call.group_id, call.sizes) for call in db.ncclcalls]
    assert calls == [(rank, "1" if rank < 3 else "2", [[size]]) for rank in range(6)
                     for size in [1000 * (1 + rank // 3) + s for s in range(1, 151)] + [7 if rank == 4 else 1]]


def test_codes_widened_from_bytes_read_as_the_map_gives_them():
    for mapping in ([5, 300, 2**32 - 1, 0, 70_000, 2**24 + 3], list(range(256)), [2**31 + i for i in range(256)]):
        local = bytes(range(len(mapping))) * 3
        assert recode(local, mapping) == array("I", [mapping[c] for c in local])
        assert recode(array("I", list(local)), mapping) == recode(local, mapping)  # codes held as ints
    assert recode(b"", [300]) == array("I")
    assert recode(array("I", [0, 299]), list(range(1000, 1300))) == array("I", [1000, 1299])  # past 256 local codes


@pytest.mark.parametrize("later", [entry(seq=2, op="send 0->1", backend="nccl", is_p2p=True, p2p_seq=1),
                                   entry(seq=2, op="coalesced", backend="nccl", sizes=())], ids=["p2p op", "terminator"])
@pytest.mark.parametrize("other_group", [False, True], ids=["one group", "two groups"])
def test_a_run_with_a_p2p_op_or_a_terminator_past_its_first_kind_is_no_column_track(later, other_group):
    # seq ids 1, 2 count up by one, but the second entry is not one whole collective: read one by one
    other = [entry(pg="1", desc="tp", seq=1)] if other_group else []
    held = [entry(seq=1, backend="nccl"), later]
    dump = normalize(make_dump(other + held), 0, "rank0", "pickle")
    assert runs.make_runs(dump.entries)["0"].first_seq is None
    plain = normalize(make_dump(other + [entry(seq=1, backend="nccl"), entry(seq=2, backend="nccl")]), 0, "rank0", "pickle")
    assert runs.make_runs(plain.entries)["0"].first_seq == 1


@settings(max_examples=examples(60))
@given(dumps=dump_sets())
def test_random_jobs_give_the_same_answer_both_ways(dumps, tmp_path_factory, monkeypatch):
    _assert_same_both_ways(write_dumps(tmp_path_factory.mktemp("set"), dumps), monkeypatch)


def test_entry_columns_read_back_the_entries_they_were_made_from():
    raw = make_dump([entry(seq=1), entry(seq=2, op="broadcast", state="completed"), entry(seq=3, dtype="Half")])
    dump = normalize(raw, 3, "rank3", "pickle")
    entries = list(dump.entries)
    again = EntryColumns.from_entries(3, entries)
    assert list(again) == entries and again == entries
    assert dump.entries[-1] == entries[2] and dump.entries[1:] == entries[1:]
    assert dump.entries.at([2, 0]) == [entries[2], entries[0]] and again.at([1]) == [entries[1]]
    assert list(reversed(dump.entries)) == entries[::-1]
    assert list(pickle.loads(pickle.dumps(dump.entries))) == entries
    assert [e.op for e in entries] == ["all_reduce", "broadcast", "all_reduce"] and entries[1].state == "completed"
    # durations a float array cannot hold are kept as a tuple: every way of reading gives None where none was recorded
    odd = EntryColumns.from_entries(3, [entries[0]._replace(duration_ms=10**400), entries[1]])
    assert isinstance(odd.duration_ms, tuple)
    assert list(odd) == [odd[0], odd[1]] == odd.at([0, 1]) and odd[1].duration_ms is None


@st.composite
def staggered_windows(draw):
    """Raw dumps of one program whose ranks hold different stretches of it: buffers that wrapped
    at different points and ranks that stopped at different ops, the completed ones first; one
    rank may use another size, dtype or state somewhere."""
    world = draw(st.integers(3, 5))
    program = draw(st.lists(st.sampled_from([("all_reduce", 4), ("all_reduce", 8), ("broadcast", 4)]), min_size=4, max_size=14))
    odd_rank, odd_seq = draw(st.integers(0, world - 1)), draw(st.integers(1, len(program)))
    odd = draw(st.sampled_from(["none", "size", "dtype", "state"]))
    dumps = {}
    for rank in range(world):
        first = draw(st.integers(1, len(program)))
        last = draw(st.integers(first, len(program)))
        done = draw(st.integers(first - 1, last))  # the last completed op
        entries = []
        for seq in range(first, last + 1):
            op, size = program[seq - 1]
            state = "completed" if seq <= done else "scheduled"
            dtype = "Float"
            if rank == odd_rank and seq == odd_seq:
                size, dtype = (size + 1 if odd == "size" else size), ("Half" if odd == "dtype" else dtype)
                state = "started" if odd == "state" else state
            entries.append(entry(seq=seq, op=op, sizes=((size,),), dtype=dtype, state=state, backend="nccl"))
        dumps[rank] = make_dump(entries, first_record=first - 1)
    return dumps


@given(dumps=staggered_windows())
@settings(max_examples=examples(60), deadline=None)
def test_ranks_holding_different_stretches_give_the_same_answer_both_ways(dumps, tmp_path_factory, monkeypatch):
    # the column path compares each rank's run with the longest one over the seq ids both hold,
    # and reads an agreed collective's row from the lowest rank holding it
    _assert_same_both_ways(write_dumps(tmp_path_factory.mktemp("set"), dumps), monkeypatch)


def test_a_unit_track_with_a_gap_is_not_taken_for_an_issuer(tmp_path, monkeypatch):
    # rank 0's world track holds a (lone) p2p op, so it is kept unit by unit, and has no #3 (seq ids
    # skipped: not what PyTorch writes, but a damaged or merged dump can); ranks 1-3 agree on #3,
    # and its database row must be read from rank 1, not from the lower rank that lacks it
    send = entry(seq=2, op="send 0->1", is_p2p=True, p2p_seq=1)
    dumps = {0: make_dump(ops(2) + [send] + ops(2, start=4)),
             1: make_dump(ops(5)),
             2: make_dump(ops(5)),
             3: make_dump(ops(5))}
    _assert_same_both_ways(write_dumps(tmp_path, dumps), monkeypatch)
    _, db, _ = _analysis_and_db(tmp_path)
    row = next(c for c in db.collectives if c.collective_seq_id == 3)
    assert row.collective_name == "gloo:all_reduce" and row.record_id == 2  # rank 1's third record


def _coalesced(seq: int, size: int, odd: int = 1, out_only: bool = False) -> list[dict]:
    """A coalesced group of two all_gathers of a `size`-rank group, as #seq; `odd` scales the
    second one's output (`out_only`) or both its sizes (a shape of its own, within the size rule)."""
    return [entry(seq=seq, op="all_gather", sizes=((4,),), out=((4 * size,),), state="completed"),
            entry(seq=seq, op="all_gather", sizes=((2 * (1 if out_only else odd),),), out=((2 * size * odd,),), state="completed"),
            entry(seq=seq, op="coalesced", sizes=(), state="completed")]


def test_ranks_alike_share_their_runs_cut_into_units_and_the_others_are_cut_alone(tmp_path):
    # 0 and 1 alike; 2 the same ops in another group (other global codes); 3 as 2, its seq ids one
    # on (a wrapped buffer); 4 as 0, after a world op (other places and seq ids); 5 and 6 the same
    # seq ids and kinds, a world op between their units (5) or within the second one (6); 7 and 8
    # alike but for the order of the two all_gathers of 8's second unit
    from frtrace.analysis.align import Codes, build_tracks

    configs = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7, 8]"},
               "1": {"name": "1", "desc": "dp", "ranks": "[0, 1, 4]"}, "2": {"name": "2", "desc": "dp", "ranks": "[2, 3]"},
               "3": {"name": "3", "desc": "dp", "ranks": "[5, 6]"}, "4": {"name": "4", "desc": "dp", "ranks": "[7, 8]"}}

    def units(group: str, seqs) -> list[dict]:
        return [{**e, "process_group": (group, "dp")} for s in seqs for e in _coalesced(s, {"1": 3}.get(group, 2))]

    world = entry(seq=2, state="completed")
    held = {0: units("1", (1, 2, 3)), 1: units("1", (1, 2, 3)), 2: units("2", (1, 2, 3)), 3: units("2", (2, 3, 4)),
            4: [entry(seq=1, state="completed")] + units("1", (1, 2, 3)),
            5: units("3", (1,)) + [world] + units("3", (2,)), 6: units("3", (1, 2))[:4] + [world] + units("3", (2,))[1:],
            7: units("4", (1, 2)), 8: units("4", (1,)) + [units("4", (2,))[i] for i in (1, 0, 2)]}
    loaded = load_dumps(find_dump_files(str(write_dumps(tmp_path, {r: make_dump(e, pg_config=configs) for r, e in held.items()}))))
    table = resolve_groups(loaded.dumps, loaded.ranks_named, None)
    codes = Codes(loaded.dumps)
    cut: dict = {}
    shared = {rank: build_tracks(dump, table, codes, cut)[0] for rank, dump in loaded.dumps.items()}
    for rank, dump in loaded.dumps.items():
        alone = build_tracks(dump, table, codes)[0]
        assert {g: (t.units, t.unit_kinds) for g, t in shared[rank].items()} == {g: (t.units, t.unit_kinds) for g, t in alone.items()}
    assert len(cut) == 8
    dp = next(group for group in shared[0] if group.name == "1")
    assert shared[0][dp].units is shared[1][dp].units and shared[0][dp].units is not shared[4][dp].units


@pytest.mark.parametrize("odd_rank", [None, 0, 2], ids=["alike", "lowest-differs", "one-differs"])
def test_coalesced_groups_every_rank_holds_alike_are_read_without_building_their_entries(odd_rank, tmp_path, monkeypatch):
    # ranks holding the same kinds in a coalesced group need no check entry by entry (GroupView.alike);
    # one rank's odd size must still be found, and its row read from the majority
    dumps = {r: make_dump(_coalesced(1, 4) + _coalesced(2, 4, odd=2 if r == odd_rank else 1) + _coalesced(3, 4))
             for r in range(4)}
    fast, _ = _assert_same_both_ways(write_dumps(tmp_path, dumps), monkeypatch)
    if odd_rank is None:
        assert fast.verdict == "clean", fast.headline
    else:
        assert fast.findings[0].kind == "size_mismatch" and fast.findings[0].ranks == (odd_rank,), fast.findings
    built = []
    unit = Track.unit
    monkeypatch.setattr(Track, "unit", lambda self, seq: built.append(seq) or unit(self, seq))
    loaded = load_dumps(find_dump_files(str(tmp_path), None), workers=1)
    table = resolve_groups(loaded.dumps, loaded.ranks_named, None)
    build_database(analyze(loaded.dumps, table), loaded.dumps, table)
    # #1 and #3: the lowest issuer's unit only, for the database's row (the slow way: every rank's,
    # for the check, and again for the row)
    assert (built.count(1), built.count(3)) == (1, 1)


def test_a_coalesced_group_every_rank_sizes_for_another_group_size_is_still_checked(tmp_path, monkeypatch):
    # every rank's second all_gather gathers from 8 ranks in a group of 4: alike, yet each breaks
    # the size rule by itself, so the check entry by entry must say so (the group's size is in doubt)
    dumps = {r: make_dump(_coalesced(1, 4) + _coalesced(2, 4, odd=2, out_only=True)) for r in range(4)}
    fast, _ = _assert_same_both_ways(write_dumps(tmp_path, dumps), monkeypatch)
    assert [(f.kind, f.collective_seq_id, f.ranks) for f in fast.findings] == [("size_mismatch", 2, ())]
    assert "the group likely has another size" in fast.findings[0].detail


@pytest.mark.parametrize("stacks", [3, 200, 300], ids=["one-byte", "two-byte", "past-255-tracebacks"])
def test_every_call_points_at_its_own_traceback(stacks, tmp_path):
    # rank 0: two call sites; rank 1: `stacks` of them; rank 2: no frames at all. The code columns
    # start at one byte per call (rank 0) and must stay right when rank 1 outgrows that
    def frames(line):
        return [{"name": "step", "filename": "train.py", "line": line}, {"name": "main", "filename": "train.py", "line": 1}]

    lines = {0: lambda s: 10 + s % 2, 1: lambda s: 1000 + s % stacks}
    dumps = {r: make_dump([entry(seq=s, frames=frames(lines[r](s))) for s in range(1, 401)]) for r in (0, 1)}
    dumps[2] = make_dump([entry(seq=s) for s in range(1, 401)])
    _, db, _ = _analysis_and_db(write_dumps(tmp_path, dumps))
    text_of = {t.id: t.frames for t in db.tracebacks}
    calls = list(db.ncclcalls)
    assert len(calls) == 1200 and len(db.tracebacks) == 2 + stacks
    for rank in (0, 1):
        mine = [c for c in calls if c.global_rank == rank]
        assert [f"train.py:{lines[rank](s)}" in text_of[c.traceback_id] for c, s in zip(mine, range(1, 401))] == [True] * 400
    assert {c.traceback_id for c in calls if c.global_rank == 2} == {-1}


def test_collective_ids_kept_as_seq_ids_plus_offsets_read_as_the_ids_they_stand_for():
    from array import array

    from frtrace.database import OffsetIds

    # rank A: kinds 0 and 1 (two groups, offsets 100 and 7); rank B: looked-up ids, -1 for none;
    # rank C: no calls; rank D: one-byte kind codes past a seq id of 2**40
    blocks = [(array("q", [1, 1, 2, 2, 3]), bytes([0, 1, 0, 1, 1]), [100, 7]),
              (array("q", [5, -1, 6]), None, None),
              (array("q"), b"", [3]),
              (array("q", [2**40]), bytes([0]), [-1])]
    expected = [101, 8, 102, 9, 10, 5, None, 6, 2**40 - 1]
    ids = OffsetIds(blocks)
    assert len(ids) == 9 and list(ids) == expected
    assert [ids[i] for i in range(9)] == expected and [ids[i] for i in range(-9, 0)] == expected
    assert ids[2:7] == expected[2:7] and ids[::-3] == expected[::-3]
    assert list(ids.values) == [-1 if v is None else v for v in expected]
    for outside in (9, -10):
        with pytest.raises(IndexError):
            ids[outside]
    assert list(pickle.loads(pickle.dumps(ids))) == expected


def test_a_column_kept_as_each_ranks_codes_and_values_reads_row_by_row():
    from frtrace.database import BlockCodes

    # rank A: one-byte kind codes; rank B: no calls; rank C: stack ids with -1 (no frames: the last
    # value); rank D: codes past 255 as ints
    blocks = [(bytes([1, 0, 1]), ["x", "y"]), (b"", ["z"]), (array("b", [0, -1, 0]), [7, None]),
              (array("I", [300, 0]), ["w", *["v"] * 300])]
    expected = ["y", "x", "y", 7, None, 7, "v", "w"]
    column = BlockCodes(blocks)
    assert len(column) == 8 and list(column) == expected
    assert [column[i] for i in range(8)] == expected and [column[i] for i in range(-8, 0)] == expected
    assert column[1:6] == expected[1:6] and column[::-3] == expected[::-3]
    for outside in (8, -9):
        with pytest.raises(IndexError):
            column[outside]
    assert list(pickle.loads(pickle.dumps(column))) == expected


def test_a_column_kept_as_runs_of_one_value_reads_row_by_row():
    from frtrace.database import Repeats

    # rank 4: three calls; rank 9: none (an empty run reads as nothing); rank 2: one; rank 7: two
    column = Repeats(array("q", [4, 9, 2, 7]), array("q", [3, 0, 1, 2]))
    expected = [4, 4, 4, 2, 7, 7]
    assert len(column) == 6 and list(column) == expected
    assert [column[i] for i in range(6)] == expected and [column[i] for i in range(-6, 0)] == expected
    assert column[1:5] == expected[1:5] and column[::-2] == expected[::-2]
    for outside in (6, -7):
        with pytest.raises(IndexError):
            column[outside]
    assert list(pickle.loads(pickle.dumps(column))) == expected
    assert len(Repeats(array("q"), array("q"))) == 0 and list(Repeats([], [])) == []


@pytest.mark.parametrize("seqs,cut", [((1, 1, 1, 2, 3, 3, 3), True), ((5, 5, 6, 6, 6), True),
                                      ((1, 1, 2, 1, 3), False), ((2, 2, 1, 1), True)],
                         ids=["coalesced-then-single", "from-5", "a-seq-comes-back", "going-down"])
def test_a_run_of_collectives_is_cut_into_the_units_the_entry_by_entry_reading_makes(seqs, cut, monkeypatch):
    # a run of collectives only (no p2p op) is cut where its seq id changes, by C-level passes;
    # where a seq id comes back after another's, the entry-by-entry reading makes the units
    from frtrace.analysis import align

    raw = [entry(seq=s, op="coalesced" if i == len(seqs) - 1 or seqs[i + 1] != s else "all_gather", state="completed")
           for i, s in enumerate(seqs)]
    dump = normalize(make_dump(raw), 0, "dump", "pickle")
    run = next(iter(runs.make_runs(dump.entries).values()))
    kind_map = [7 + code for code in range(len(dump.entries.kinds))]  # global codes other than the local ones
    group = resolve_groups({0: dump}, {}, None).groups[0]

    def track_of():
        track = align._unit_track(0, group, dump.entries, run, True, [], kind_map)
        return track.first_seq, track.last_seq, track.units, track.unit_kinds

    assert (align._consecutive_units(dump.entries, run, kind_map) is not None) == cut
    fast = track_of()
    monkeypatch.setattr(align, "_consecutive_units", lambda *args: None)
    assert fast == track_of()


@pytest.mark.parametrize("names,made", [(("send 0->1", "recv 0<-1", "send 0->1"), True), (("recv 0<-?",), True),
                                        (("send 0->1", "send 0->9"), False)],
                         ids=["sends-and-recvs", "from-any", "a-rank-outside"])
def test_a_run_of_p2p_ops_only_gives_the_ops_the_entry_by_entry_reading_gives(names, made, monkeypatch):
    # a run of p2p ops only (no collective, so no batch) is made into P2POps by C-level passes;
    # where a name names no rank of the group, the entry-by-entry reading makes them and says so
    from frtrace.analysis import align

    raw = [entry(op=name, is_p2p=True, p2p_seq=i + 1, seq=0, state=("completed", "started")[i % 2]) for i, name in enumerate(names)]
    dump = normalize(make_dump(raw, pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}), 0, "dump", "pickle")
    run = next(iter(runs.make_runs(dump.entries).values()))
    group = resolve_groups({0: dump}, {}, None).groups[0]

    def ops_of():
        notes = []
        track = align._unit_track(0, group, dump.entries, run, True, notes, [0] * len(dump.entries.kinds))
        return [tuple(op) for op in track.p2p], track.first_seq, notes

    assert (align._p2p_only(group, dump.entries, run, set(run.kinds)) is not None) == made
    fast = ops_of()
    monkeypatch.setattr(align, "_p2p_only", lambda *args: None)
    assert fast == ops_of()
    assert len(fast[0]) == len(names) - (not made)


@pytest.mark.parametrize("wrapped", [False, True], ids=["whole", "rank-3-wrapped"])
def test_each_call_of_a_coalesced_group_points_at_its_own_collective(wrapped, tmp_path):
    # a coalesced group's calls take their collective ids as seq id + the group's offset: each
    # call's row must be the row of the call's group and seq id, wherever the rank's track starts
    dumps = {r: make_dump([e for s in range(2 if wrapped and r == 3 else 1, 5) for e in _coalesced(s, 4)],
                          first_record=3 if wrapped and r == 3 else 0) for r in range(4)}
    _, db, _ = _analysis_and_db(write_dumps(tmp_path, dumps))
    rows = {c.id: c for c in db.collectives}
    calls = list(db.ncclcalls)
    seqs = [s for r in range(4) for s in range(2 if wrapped and r == 3 else 1, 5) for _ in range(3)]
    assert len(calls) == len(seqs)
    assert [(rows[c.collective_id].group_id, rows[c.collective_id].collective_seq_id) for c in calls] == [(c.group_id, s) for c, s in zip(calls, seqs)]


P2P_SETS = [p for p in scenario_dirs() if p.name.startswith(("synthetic_p2p", "synthetic_pipeline", "synthetic_coalesced_healthy"))]


def _batch_before_the_first_collective(directory: Path) -> Path:
    """Two ranks: three all_reduces in the world, then in a second group a p2p batch, its end (seq id
    0: no collective of that group yet) and two all_reduces (#1, #2)."""
    configs = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "pp", "ranks": "[0, 1]"}}
    dumps = {}
    for rank in (0, 1):
        p2p = "send 0->1" if rank == 0 else "recv 1<-0"
        dumps[rank] = make_dump(
            [entry(seq=s, backend="nccl", state="completed") for s in (1, 2, 3)]
            + [entry(pg="1", desc="pp", seq=0, op=p2p, backend="nccl", p2p_seq=1, is_p2p=True, state="completed"),
               entry(pg="1", desc="pp", seq=0, op="coalesced", sizes=(), backend="nccl", p2p_seq=1, state="completed")]
            + [entry(pg="1", desc="pp", seq=s, backend="nccl", state="completed") for s in (1, 2)], pg_config=configs)
    return write_dumps(directory, dumps)


@pytest.mark.parametrize("scenario", P2P_SETS + ["generated", "batch-first"],
                         ids=[p.name for p in P2P_SETS] + ["generated-pp2-wrapped", "batch-before-the-first-collective"])
def test_calls_of_ranks_holding_p2p_ops_read_the_collective_ids_a_look_up_call_by_call_gives(scenario, tmp_path, monkeypatch):
    # a rank's calls take seq id + their group's offset, and none for a p2p op, where the rank ends
    # no p2p batch (whose end looks like a collective and is none); else each is looked up
    import frtrace.builder

    directory = (_generated(tmp_path, pp=2, wrap=True) if scenario == "generated"
                 else _batch_before_the_first_collective(tmp_path) if scenario == "batch-first" else scenario)
    _, by_offsets, _ = _analysis_and_db(directory)
    with monkeypatch.context() as patch:
        patch.setattr(frtrace.builder, "_offsets_of_kinds", lambda *args: None)
        _, looked_up, _ = _analysis_and_db(directory)
    assert list(by_offsets.ncclcalls) == list(looked_up.ncclcalls)
    ids = by_offsets.ncclcalls.column("collective_id")
    assert [ids[i] for i in range(len(ids))] == list(looked_up.ncclcalls.column("collective_id"))
    assert {c.collective_id for c in by_offsets.ncclcalls} >= {None, 0}  # p2p calls and collectives both held
    if scenario == "batch-first":  # the batch's end has no collective: not the world's #3 (the id before pp's #1)
        assert [c.collective_id for c in by_offsets.ncclcalls][3:5] == [None, None]


def test_collective_ids_follow_seq_ids_only_where_a_group_has_no_gap():
    from frtrace.outputs.collectives_table import CollectiveColumns
    from frtrace.types import Group

    whole, gapped = Group("1", "tp", (0, 1)), Group("2", "tp", (2, 3))
    built = CollectiveColumns({}, {whole: "1", gapped: "2"}, None)
    # stretches as the table adds them: a run of agreed collectives, then one at a time; "2" lacks #13
    for group, first, last in [(whole, 1, 4), (whole, 5, 5), (gapped, 10, 12), (gapped, 14, 14)]:
        built._group(group, first, last, None, last - first + 1)
    assert built.offsets() == {whole: -1}  # ids 0-4 for seq ids 1-5; "2"'s #14 is id 8, not 9
    assert built.collective_of == {**{("1", s): s - 1 for s in range(1, 6)}, ("2", 10): 5, ("2", 11): 6, ("2", 12): 7,
                                   ("2", 14): 8}


def test_ids_take_4_bytes_where_they_fit_and_keep_their_values_where_not():
    from frtrace.types import int_column, time_column

    assert int_column([1, 2, 2**31 - 1, -2**31]).itemsize == 4
    for values in ([1, 2**31], [-2**31 - 1, 0], [2**63 - 1]):
        column = int_column(values)
        assert list(column) == values and column.itemsize == 8
    assert int_column([1, 2**64]) == (1, 2**64) and int_column([1, None]) == (1, None)
    assert list(time_column([None, 5, 1_795_000_000_110_300_000])) == [0, 5, 1_795_000_000_110_300_000]
