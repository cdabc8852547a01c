"""The moments' rules on the inputs the mutation run's survivors named and no test built: a group
whose seq ids were lined up anew (a torchcomms recorder's wrapped buffers), read from its members'
tracks (a member holding none of it, the finished op read furthest back, a rooted op, no states);
groups that could not be lined up, that only one member shows or that show nothing, before the
one that shows a dump older; members without a dump or with the recorder off; late arrivals
measured from the first issuer, in a group of two, at the deadline, rounded, without a timeout
or finished; the ops the recorder did not log, in order."""

from __future__ import annotations

import copy

import pytest

from conftest import entry, make_dump
from frtrace.analysis.align import Codes, build_tracks
from frtrace.analysis.moments import moments_by_name, stale_ranks
from frtrace.loader import normalize
from frtrace.matcher import analyze
from frtrace.reading.anchor import anchor_relative_seqs
from frtrace.reading.groups import resolve_groups
from test_moments import SECOND, _op, _run, _steps

WORLD_TP_SOLO = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
                 "1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"},
                 "2": {"name": "2", "desc": "solo", "ranks": "[2]"}}


def _loaded(raw: dict[int, dict]):
    dumps = {r: normalize(copy.deepcopy(d), r, f"nccl_trace_rank_{r}", "pickle") for r, d in raw.items()}
    return dumps, resolve_groups(dumps, frozenset(raw))


def _torchcomms(count: int, oldest: int, world_op: str = "all_reduce") -> dict:
    """A torchcomms recorder's wrapped buffer of ranks 0-1: ops 1..count of the process, each
    completed, a world op (odd) and a tp all_reduce (even) in turn, numbered by one counter; the
    buffer keeps those from `oldest` on."""
    ops = [entry(seq=n, pg="0", desc="default_pg", op=world_op if n == count - 1 else "all_reduce", backend="nccl",
                 state="completed") if n % 2 else entry(seq=n, pg="1", desc="tp", backend="nccl", state="completed")
           for n in range(oldest, count + 1)]
    return make_dump(ops, pg_config=WORLD_TP_SOLO, first_record=oldest - 1)


# ---------------------------------------------------------------------------- groups lined up anew
@pytest.mark.parametrize("last_world_op, joined", [("all_reduce", 8), ("broadcast", 7)])
def test_a_rank_holding_no_op_of_a_lined_up_group_is_older_than_the_op_its_peers_completed(last_world_op, joined):
    """Ranks 0 and 1 ran 20 ops (world #1 is the process's op 5, the oldest any buffer holds;
    world #8 its op 19) and their buffers wrapped, rank 1's at op 5, rank 0's at op 7: the
    worker numbers rank 0's world ops from its oldest, #1-#7, and the lining up makes them #2-#8.
    Rank 2's whole buffer holds one op of its own group and none of the world: its dump is older
    than world #8, which every member joined; where the last world op is a broadcast (its root
    finishes alone), #7."""
    raw = {0: _torchcomms(20, 7, last_world_op), 1: _torchcomms(20, 5, last_world_op),
           2: make_dump([entry(seq=1, pg="2", desc="solo", backend="nccl", state="completed")], pg_config=WORLD_TP_SOLO)}
    dumps, table = _loaded(raw)
    anchoring = anchor_relative_seqs(dumps, table)
    assert {g.desc for g in anchoring.renumbered} == {"default_pg", "tp"} and not anchoring.unaligned
    result = analyze(dumps, table, anchoring=anchoring)
    assert result.stale == {2: f"rank 2's dump is older than its peers': it holds no op of default_pg, but rank 0's shows "
                               f"#{joined} finished (completed), which rank 2 must have joined; where rank 2 was at the end "
                               "cannot be told, so it is named for nothing it lacks"}


def _nccl(states: str, op_at: dict[int, str] | None = None) -> dict:
    """A world-group NCCL dump: #1, #2, ... with the states given, one letter each (c: completed,
    s: started)."""
    full = {"c": "completed", "s": "started"}
    return make_dump([entry(seq=n, op=(op_at or {}).get(n, "all_reduce"), backend="nccl", state=full[s])
                      for n, s in enumerate(states, 1)])


def _stale_in_lined_up_world(raw: dict[int, dict], with_states: bool = True) -> dict:
    """stale_ranks on dumps whose world group is read as lined up anew (numbered by the tracks)."""
    dumps, table = _loaded(raw)
    codes = Codes(dumps)
    tracks = {r: build_tracks(d, table, codes)[0] for r, d in dumps.items()}
    (world,) = table.groups
    found = stale_ranks(dumps, tracks, table, moments_by_name(dumps), renumbered=frozenset({world}),
                        codes=codes if with_states else None)
    return {rank: (s.last, s.joined, s.witness, s.how) for rank, s in found.items()}


def test_in_a_lined_up_group_the_op_right_after_a_member_s_last_finished_shows_it_older():
    """Rank 1 ends at #3; rank 0 completed #4 and holds #5-#7 in flight."""
    assert _stale_in_lined_up_world({0: _nccl("ccccsss"), 1: _nccl("ccc")}) == {1: (3, 4, 0, "completed")}


@pytest.mark.parametrize("in_flight, older", [(64, {1: (2, 3, 0, "completed")}), (65, {})])
def test_a_lined_up_group_is_read_for_a_finished_op_among_its_64_latest(in_flight, older):
    """Rank 0 completed #1-#3 and holds `in_flight` ops after them; rank 1 ends at #2."""
    assert _stale_in_lined_up_world({0: _nccl("ccc" + "s" * in_flight), 1: _nccl("cc")}) == older


def test_a_lined_up_group_whose_latest_finished_op_is_rooted_is_read_at_the_op_before():
    """Rank 0's #5, a broadcast its root finishes alone, shows nothing of rank 1; #4 does."""
    assert _stale_in_lined_up_world({0: _nccl("ccccc", {5: "broadcast"}), 1: _nccl("cc")}) == {1: (2, 4, 0, "completed")}


def test_a_lined_up_group_no_member_finished_an_op_of_shows_no_dump_older():
    """Rank 0 holds world #1 in flight; rank 1's whole buffer holds an op of its own group only."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "solo", "ranks": "[1]"}}
    raw = {0: make_dump([entry(seq=1, backend="nccl", state="started")], pg_config=config),
           1: make_dump([entry(seq=1, pg="1", desc="solo", backend="nccl", state="completed")], pg_config=config)}
    dumps, table = _loaded(raw)
    codes = Codes(dumps)
    tracks = {r: build_tracks(d, table, codes)[0] for r, d in dumps.items()}
    world = next(g for g in table.groups if g.desc == "default_pg")
    assert stale_ranks(dumps, tracks, table, moments_by_name(dumps), renumbered=frozenset({world}), codes=codes) == {}


def test_a_lined_up_group_without_the_tracks_states_shows_no_dump_older():
    assert _stale_in_lined_up_world({0: _nccl("ccccc"), 1: _nccl("cc")}, with_states=False) == {}


# ---------------------------------------------------------------------------- which groups are read
WORLD_TP = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}, "1": {"name": "1", "desc": "tp", "ranks": "[0, 1, 2]"}}


def _ops(pg: str, count: int, state: str = "completed") -> list[dict]:
    desc = WORLD_TP[pg]["desc"]
    return [entry(seq=n, pg=pg, desc=desc, backend="nccl", state=state) for n in range(1, count + 1)]


def _stale(raw: dict[int, dict], unaligned: tuple[str, ...] = ()) -> dict:
    """stale_ranks as the analysis calls it, `unaligned` naming groups by desc."""
    dumps, table = _loaded(raw)
    codes = Codes(dumps)
    tracks = {r: build_tracks(d, table, codes)[0] for r, d in dumps.items() if not d.recorder_off}
    tracks.update({r: {} for r, d in dumps.items() if d.recorder_off})
    found = stale_ranks(dumps, tracks, table, moments_by_name(dumps),
                        unaligned=frozenset(g for g in table.groups if g.desc in unaligned), codes=codes)
    return {rank: (s.group.desc, s.last, s.joined, s.witness, s.how) for rank, s in found.items()}


# ranks 0 and 1 alike in the world group; rank 2's dump ends at tp #2, where rank 0 completed tp #5
ALIKE_THEN_BEHIND = {r: make_dump(_ops("0", 5) + _ops("1", 5 if r < 2 else 2), pg_config=WORLD_TP) for r in range(3)}


@pytest.mark.parametrize("unaligned", [(), ("default_pg",)], ids=["all-lined-up", "world-unaligned"])
def test_a_group_after_one_that_shows_nothing_still_shows_a_dump_older(unaligned):
    assert _stale(ALIKE_THEN_BEHIND, unaligned) == {2: ("tp", 2, 5, 0, "completed")}


def test_a_group_whose_members_could_not_be_lined_up_shows_no_dump_older():
    assert _stale(ALIKE_THEN_BEHIND, ("tp",)) == {}


def test_a_group_after_one_that_only_one_member_shows_still_shows_a_dump_older():
    """Rank 2's buffer wrapped past the world group: only rank 0 shows a moment in it (rank 1's
    recorder was off)."""
    raw = {0: make_dump(_ops("0", 5) + _ops("1", 5), pg_config=WORLD_TP), 1: {"version": "2.10"},
           2: make_dump(_ops("1", 2), pg_config=WORLD_TP, first_record=40)}
    assert _stale(raw) == {2: ("tp", 2, 5, 0, "completed")}


@pytest.mark.parametrize("rank_0", [{"version": "2.10"}, None], ids=["recorder-off", "no-dump"])
def test_a_member_whose_recorder_was_off_or_without_a_dump_leaves_the_others_read(rank_0):
    raw = {1: make_dump(_ops("0", 5), pg_config=WORLD_TP), 2: make_dump(_ops("0", 2), pg_config=WORLD_TP)}
    assert _stale(raw if rank_0 is None else {0: rank_0, **raw}) == {2: ("default_pg", 2, 5, 1, "completed")}


# ---------------------------------------------------------------------------- late arrivals
def _late(created_s: dict[int, float], timeout_ms=4000, off=(), **raw_of) -> list:
    """gloo dumps of the world ranks in `created_s`, each with two steps and then the last
    all_reduce created at its time (seconds), and recorder-off ranks `off`: the late_arrival
    findings' (ranks, detail)."""
    head = _steps(2, gap_s=0.01)
    raw = {r: make_dump(head + [_op(len(head) + 1, at, timeout_ms=timeout_ms)]) for r, at in created_s.items()}
    raw.update({r: {"version": "2.10"} for r in off})
    raw.update(raw_of)
    return [(f.ranks, f.detail) for f in _run(raw).findings if f.kind == "late_arrival"]


def test_the_late_member_is_measured_from_the_member_that_issued_the_op_first_whatever_its_rank():
    ((ranks, detail),) = _late({0: 8.0, 1: 1.0, 2: 1.5})
    assert ranks == (0,) and detail.startswith("rank 0 issued it 7.0 s after rank 1, past its timeout of 4 s: the others "
                                               "had given up on it by then")


def test_a_late_arrival_is_found_in_a_group_of_two():
    assert [ranks for ranks, _ in _late({0: 1.0, 1: 8.0})] == [(1,)]


def test_a_member_whose_recorder_was_off_leaves_a_late_arrival_found():
    assert [ranks for ranks, _ in _late({0: 1.0, 1: 1.0, 2: 8.0}, off=(3,))] == [(2,)]


@pytest.mark.parametrize("past_ns, late", [(0, []), (1, [(2,)])], ids=["at-the-deadline", "a-nanosecond-past"])
def test_a_member_is_late_only_past_the_deadline(past_ns, late):
    """The deadline: rank 0's creation time, its timeout (4 s) and a second for the clocks."""
    head = _steps(2, gap_s=0.01)
    raw = {r: make_dump(head + [_op(len(head) + 1, 1.0)]) for r in range(3)}
    first = raw[0]["entries"][-1]["time_created_ns"]
    raw[2]["entries"][-1]["time_created_ns"] = first + 5 * SECOND + past_ns
    assert [f.ranks for f in _run(raw).findings if f.kind == "late_arrival"] == late


def test_the_gap_is_said_to_a_tenth_of_a_second_rounded():
    """5.050000001 s after: 5.1 s."""
    head = _steps(2, gap_s=0.01)
    raw = {r: make_dump(head + [_op(len(head) + 1, 1.0)]) for r in range(3)}
    raw[2]["entries"][-1]["time_created_ns"] = raw[0]["entries"][-1]["time_created_ns"] + 5_050_000_001
    (late,) = [f for f in _run(raw).findings if f.kind == "late_arrival"]
    assert late.detail.startswith("rank 2 issued it 5.1 s after rank 0")


def test_without_a_timeout_on_the_last_op_no_member_is_late():
    assert _late({0: 1.0, 1: 1.0, 2: 8.0}, timeout_ms=None) == []


def test_a_member_that_finished_the_last_op_shows_no_late_arrival():
    """NCCL's layout: rank 0 completed the last all_reduce, so every member issued it in time."""
    def dump(at_s, state):
        last = entry(seq=4, backend="nccl", state=state, timeout_ms=4000, time_created_ns=int(at_s * SECOND))
        return make_dump([entry(seq=s, backend="nccl", state="completed", time_created_ns=s * 1000) for s in (1, 2, 3)] + [last])
    assert [f for f in _run({0: dump(1.0, "completed"), 1: dump(1.0, "started"), 2: dump(8.0, "started")}).findings
            if f.kind == "late_arrival"] == []


# ---------------------------------------------------------------------------- ops the recorder never logs
def test_unlogged_ops_are_said_by_group_then_where_the_buffer_ends_once_for_the_ranks_alike():
    """gloo: ranks 0-1 end world at #6 where pg_status counts 9; rank 2 ends it at #7 (counts 8);
    rank 0 ends tp at #2 (counts 3). Said by group, then by the buffer's end."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}, "1": {"name": "1", "desc": "tp", "ranks": "[0, 1, 2]"}}

    def dump(world: int, status: dict) -> dict:
        raw = make_dump([entry(seq=s) for s in range(1, world + 1)]
                        + [entry(seq=s, pg="1", desc="tp") for s in (1, 2)], pg_config=config)
        raw["pg_status"] = {pg: {"last_enqueued_collective": count} for pg, count in status.items()}
        return raw
    warnings = _run({0: dump(6, {"0": 9, "1": 3}), 1: dump(6, {"0": 9}), 2: dump(7, {"0": 8})}).warnings
    assert [w for w in warnings if "pg_status counts" in w] == [
        "ranks 0-1: pg_status counts 9 collectives enqueued in default_pg, but their buffer ends at #6: ops the recorder did not "
        "log (gloo logs no send or recv, and no monitored_barrier)",
        "rank 2: pg_status counts 8 collectives enqueued in default_pg, but its buffer ends at #7: ops the recorder did not log "
        "(gloo logs no send or recv, and no monitored_barrier)",
        "rank 0: pg_status counts 3 collectives enqueued in tp, but its buffer ends at #2: ops the recorder did not log "
        "(gloo logs no send or recv, and no monitored_barrier)"]
