"""align.py on columns that ranks share (wire.Unpacker keeps one object for equal columns): one
object is one content, never one range of seq ids; and a group's lowest holders, read where the
tracks' ranges start and end, are those of every seq id asked one by one. SYNTHETIC NCCL dumps
built from format.md, read as a run reads them (loader, wire)."""

from __future__ import annotations

import random

import pytest

from conftest import entry, ops, write_dumps
from test_matcher import nccl

from frtrace import matcher
from frtrace.analysis.align import Codes, GroupView, build_tracks
from frtrace.loader import load_dumps
from frtrace.reading.discover import find_dump_files
from frtrace.reading.groups import resolve_groups


def _loaded(tmp_path, raw: dict[int, dict]) -> dict:
    write_dumps(tmp_path, raw)
    return load_dumps(find_dump_files(str(tmp_path))).dumps


def _view(dumps: dict) -> GroupView:
    table, codes = resolve_groups(dumps, frozenset(dumps)), Codes(dumps)
    (group,) = table.groups
    return GroupView(group, {rank: build_tracks(dump, table, codes)[0][group] for rank, dump in dumps.items()}, dumps, codes)


def test_one_column_object_over_shifted_seq_ids_is_compared_place_by_place(tmp_path):
    """Ranks 0 and 1 each hold all_reduce, broadcast, all_reduce, broadcast: rank 0 as #1-#4,
    rank 1 (its buffer wrapped) as #2-#5. Their kind columns are equal bytes, so one object once
    read, yet at #2-#4 they hold other ops: rank 1 issued all_reduce as #2 where rank 0 issued
    broadcast. Those seq ids are not agreed, and the analysis finds the ops' types differ there (a
    column taken as equal because it is the same object missed the mismatch)."""
    world = {"0": ("default_pg", (0, 1))}
    pattern = ["all_reduce", "broadcast"] * 2
    raw = {rank: nccl([entry(seq=first + i, op=op, backend="nccl", state="completed") for i, op in enumerate(pattern)],
                      world, first_record=first - 1)
           for rank, first in ((0, 1), (1, 2))}
    dumps = _loaded(tmp_path, raw)
    assert dumps[0].entries.kind is dumps[1].entries.kind  # shared, as a real run shares it
    view = _view(dumps)
    assert [seq for seq in range(1, 6) if view.agreed(seq)] == [1]
    table = resolve_groups(dumps, frozenset(dumps))
    analysis = matcher.analyze(dumps, table)
    assert analysis.verdict != "clean"
    assert any(f.kind == "type_mismatch" and 2 <= f.collective_seq_id <= 4 for f in analysis.findings)


@pytest.mark.parametrize("seed", range(6))
def test_a_groups_owners_are_the_lowest_holder_of_each_seq_id(tmp_path, seed):
    """Ranks dumped at different moments hold ranges of their own of one all_reduce run; each
    part `owners` gives is the lowest rank holding every seq id of it, and a part ends where that
    rank changes (asked of every seq id one by one, over random ranges and questions)."""
    rng = random.Random(seed)
    ranks = range(rng.randint(2, 7))
    world = {"0": ("default_pg", tuple(ranks))}
    held = {}
    for rank in ranks:
        first = rng.randint(1, 30)
        held[rank] = (first, first + rng.randint(0, 30))
    raw = {rank: nccl(ops(last - first + 1, start=first, backend="nccl", state="completed"), world, first_record=first - 1)
           for rank, (first, last) in held.items()}
    view = _view(_loaded(tmp_path, raw))
    reference = view.reference
    for _ in range(20):
        first = rng.randint(reference.first_seq, reference.last_seq)
        last = rng.randint(first, reference.last_seq)
        lowest = [min(rank for rank, (a, b) in held.items() if a <= seq <= b) for seq in range(first, last + 1)]
        expected = []
        for seq, rank in zip(range(first, last + 1), lowest):
            if expected and expected[-1][0] == rank:
                expected[-1][2] = seq
            else:
                expected.append([rank, seq, seq])
        assert [[rank, a, b] for rank, _, a, b in view.owners(first, last)] == expected


@pytest.mark.parametrize("held", [
    {0: (1, 10), 1: (1, 10)},  # dumped together: one range
    {0: (5, 10), 1: (1, 4)},  # touching ranges: no gap
    {0: (1, 10), 1: (3, 5)},  # nested
    {0: (1, 10), 1: (3, 5), 2: (8, 12)},  # nested, then one past the end
    {0: (1, 4), 1: (7, 9)},  # a gap: #5 and #6 held by nobody
    {0: (1, 4), 1: (6, 9)},  # a gap of one: #5
    {0: (1, 4), 1: (2, 3), 2: (9, 9)},  # a gap after nested ones
])
def test_a_groups_seq_ids_are_those_some_member_holds(tmp_path, held):
    """`seqs` lists every seq id some member holds, in order, and none that nobody holds."""
    world = {"0": ("default_pg", tuple(held))}
    raw = {rank: nccl(ops(last - first + 1, start=first, backend="nccl", state="completed"), world, first_record=first - 1)
           for rank, (first, last) in held.items()}
    view = _view(_loaded(tmp_path, raw))
    assert list(view.seqs()) == sorted({seq for first, last in held.values() for seq in range(first, last + 1)})


def test_a_groups_seq_ids_count_those_only_a_coalesced_unit_holds(tmp_path):
    """Rank 0 holds all_reduce #1-#3 by column; rank 1 #1-#3 and then a coalesced group as #4,
    a track of units: #4 is a seq id of the group though no column track holds it."""
    world = {"0": ("default_pg", (0, 1))}
    done = {"backend": "nccl", "state": "completed"}
    coalesced = [entry(seq=4, **done), entry(seq=4, **done), entry(seq=4, op="coalesced", sizes=(), **done)]
    view = _view(_loaded(tmp_path, {0: nccl(ops(3, **done), world), 1: nccl(ops(3, **done) + coalesced, world)}))
    assert view.tracks[0].units is None and view.tracks[1].units is not None
    assert list(view.seqs()) == [1, 2, 3, 4]


def test_ranks_sharing_one_run_whose_codes_mean_other_ops_or_states_keep_their_own(tmp_path):
    """Each dump numbers its kinds and states in the order first held, so ranks 0, 1 and 2 hold
    the same codes (kinds 0, 1, 0, states 0, 0, 1), read into one run object, which mean other
    states on rank 1 (its first two ops scheduled, not completed) and other ops on rank 2
    (broadcast first, not all_reduce). Each rank's track reads as its own entries (a run's
    recoding kept once for ranks of other state maps, or of other kind maps, gave rank 1 or rank 2
    rank 0's)."""
    world = {"0": ("default_pg", (0, 1, 2))}
    held = {0: (("all_reduce", "completed"), ("broadcast", "completed"), ("all_reduce", "scheduled")),
            1: (("all_reduce", "scheduled"), ("broadcast", "scheduled"), ("all_reduce", "completed")),
            2: (("broadcast", "completed"), ("all_reduce", "completed"), ("broadcast", "scheduled"))}
    raw = {rank: nccl([entry(seq=i + 1, op=op, backend="nccl", state=state) for i, (op, state) in enumerate(ops_held)], world)
           for rank, ops_held in held.items()}
    dumps = _loaded(tmp_path, raw)
    runs = [run for dump in dumps.values() for run in dump.entries.runs.values()]
    assert len(runs) == 3 and runs[0] is runs[1] is runs[2]  # one object, as a real run shares it
    table, codes = resolve_groups(dumps, frozenset(dumps)), Codes(dumps)
    (group,) = table.groups
    for rank, dump in dumps.items():
        track = build_tracks(dump, table, codes)[0][group]
        assert [(codes.kinds[k].op, codes.states[s]) for k, s in zip(track.kinds, track.states)] == list(held[rank])
