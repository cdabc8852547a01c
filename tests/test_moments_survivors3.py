"""The moments' rules on the inputs the mutation run's survivors named (docs/testing.md, "Result by
part (session 30)") and no test built: which member witnesses an op finished, and how its note
says so (the first of those whose reading shows the op, the lowest-numbered of the members furthest
ahead where only their steps show it); how far ahead a member must be before its steps are read;
late arrivals found in a group after groups that show none; the ops a gloo recorder did not log,
said of a gloo rank listed after an NCCL one.

All dumps here are SYNTHETIC (conftest's entries, gloo's layout unless said): each test says what
its dumps hold."""

from __future__ import annotations

import pytest
from conftest import entry, make_dump
from test_moments import _op, _run, _steps

# ---------------------------------------------------------------------------- which member witnesses
OLDER = ("rank 1's dump is older than its peers': it ends at #{last} of {group}, but rank {witness}'s shows #{joined} "
         "finished ({how}), which rank 1 must have joined; where rank 1 was at the end cannot be told, so it is named for "
         "nothing it lacks")
BY_STEPS = "its rank went through whole steps after it"
BY_RETIRED = "retired, and its rank issued ops past its timeout"


def test_a_gloo_witness_is_said_to_show_the_op_retired_in_those_words():
    """SYNTHETIC: ranks 0, 2 and 3 ran ops of a three-op step 0.15 s apart (#1 at 0 s, #40 at
    5.85 s) and rank 3 stopped before #40; rank 1's file is its dump from the start (#1-#4). gloo records no
    completion: an op retired and created more than its timeout (4 s) before the rank's newest op
    finished. On rank 0 (newest op at 5.85 s) the latest such op that waits for every member is
    #13, an all_reduce created at 1.8 s (#14-#15 are a broadcast and a reduce, whose roots finish
    alone; #16 was created at 2.25 s, within 4 s of 5.85 s). Rank 2 shows #13 too, and rank 3,
    whose newest op is #39 at 5.7 s, only #10: rank 0 is the first to show the highest op."""
    full = _steps(14, gap_s=0.15)[:40]
    result = _run({0: make_dump(full), 1: make_dump(full[:4]), 2: make_dump(full), 3: make_dump(full[:39])})
    assert result.stale == {1: OLDER.format(last=4, group="default_pg", witness=0, joined=13, how=BY_RETIRED)}
    assert (result.verdict, result.culprit_ranks) == ("desync", (3,))


def test_of_the_members_furthest_ahead_the_lowest_numbered_witnesses_the_op_its_steps_show_finished():
    """SYNTHETIC: ranks 0, 2 and 3 ran 14 steps of three ops (#1-#42) 1 ms apart; rank 1's dump
    ends at #30. Nothing was retired a timeout before the newest op, so only a member's own steps show
    an op finished: those before two whole steps (#37-#42), which a program waits for before
    going on; the latest that waits for every member is #34, an all_reduce (#35-#36 are a
    broadcast and a reduce, whose roots finish alone). Ranks 0, 2 and 3 are alike furthest
    ahead; the lowest-numbered, rank 0, is said."""
    full = _steps(14, gap_s=0.001)
    result = _run({0: make_dump(full), 1: make_dump(full[:30]), 2: make_dump(full), 3: make_dump(full)})
    assert result.stale == {1: OLDER.format(last=30, group="default_pg", witness=0, joined=34, how=BY_STEPS)}
    assert result.verdict == "clean"


# ---------------------------------------------------------------------------- how far ahead a member's steps are read
TP_DP = {"1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"}, "2": {"name": "2", "desc": "dp", "ranks": "[0, 2]"}}


def _tp_dp(behind: int, ahead: int) -> dict[int, dict]:
    """Rank 0 repeats a step of tp's all_reduce then dp's broadcast and reduce, 1 ms apart, for
    `behind` + `ahead` steps; rank 1 (tp only) holds tp's first `behind`; rank 2 (dp only) all of
    dp's. Nothing was retired a timeout before the newest op (gloo records no completion)."""
    r0, r1, r2 = [], [], []
    at = 0.0
    for step in range(1, behind + ahead + 1):
        tp = _op(step, at + 0.001, pg="1", desc="tp")
        bcast = _op(2 * step - 1, at + 0.002, op="broadcast", pg="2", desc="dp")
        reduce = _op(2 * step, at + 0.003, op="reduce", pg="2", desc="dp")
        at += 0.003
        r0 += [tp, bcast, reduce]
        r2 += [bcast, reduce]
        if step <= behind:
            r1.append(tp)
    return {r: make_dump(ops, pg_config=TP_DP) for r, ops in enumerate((r0, r1, r2))}


def test_a_member_three_ops_of_a_group_ahead_shows_by_its_steps_the_first_of_them_finished():
    """SYNTHETIC: rank 0 issued tp #6-#8 after rank 1's last (#5), one in each of its last three
    steps: the two whole steps after #6 (#7's and #8's) show #6 was waited for, so rank 1 joined
    it and its dump is older than rank 0's (the job is clean)."""
    result = _run(_tp_dp(5, 3))
    assert result.stale == {1: OLDER.format(last=5, group="tp", witness=0, joined=6, how=BY_STEPS)}
    assert (result.verdict, result.culprit_ranks) == ("clean", ())


def test_a_member_two_ops_of_a_group_ahead_shows_no_dump_older():
    """SYNTHETIC: as above, rank 0 two steps ahead (tp #6-#7): no whole two steps follow #6, and
    rank 1, which never issued #6, is the culprit."""
    result = _run(_tp_dp(5, 2))
    assert result.stale == {}
    assert result.culprit_ranks == (1,)


def test_a_group_s_op_before_a_member_s_repeated_steps_is_no_proof_it_finished():
    """SYNTHETIC: rank 0 issued tp's all_reduce #1 once and then five steps of dp's broadcast and
    reduce with rank 1, which never issued tp #1. Rank 1's dump is no older than rank 0's: it holds
    every dp op rank 0 does. tp #1 is no op of the step rank 0 repeats, so the steps after it
    do not show it waited for (one op ahead is too few to read the steps for): rank 1 is named."""
    tp = _op(1, 0.001, pg="1", desc="tp")
    dp = [_op(n, 0.001 + 0.001 * n, op=("broadcast", "reduce")[(n - 1) % 2], pg="2", desc="dp") for n in range(1, 11)]
    config = {"1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"}, "2": {"name": "2", "desc": "dp", "ranks": "[0, 1]"}}
    result = _run({0: make_dump([tp] + dp, pg_config=config), 1: make_dump(dp, pg_config=config)})
    assert result.stale == {}
    assert (result.verdict, result.culprit_ranks) == ("desync", (1,))
    assert result.headline == ("DESYNC: missing ranks in all_reduce of tp: rank 1 never issued it, though rank 0 did and "
                               "nobody is waiting in it")


# ---------------------------------------------------------------------------- late arrivals after other groups
LATE_CONFIG = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
               "1": {"name": "1", "desc": "pp", "ranks": "[0, 1]"},
               "2": {"name": "2", "desc": "pp", "ranks": "[2, 3]"},
               "3": {"name": "3", "desc": "tp", "ranks": "[0, 1, 2]"}}


@pytest.mark.parametrize("pp", ["in-time", "finished", "no-timeout"])
def test_a_late_arrival_is_found_in_a_group_after_groups_that_show_none(pp):
    """SYNTHETIC gloo dumps of ranks 0-2 (rank 3's recorder was off): two world steps 10 ms apart,
    then a pp all_reduce (#1 of ranks 0-1's pair at 0.9 s, and of ranks 2-3's at 0.5 s), then tp's
    all_reduce #1, created at 1.0 s on ranks 0 and 1 and at 8.0 s on rank 2: past rank 0's
    deadline (1.0 s, its timeout of 4 s, and a second for the clocks). Every group before tp shows
    no late member: the world's last op rank 2 finished (retired more than its timeout before its
    newest op), the second pair has one member with a dump that shows the end, and ranks 0-1
    issued their pair's op together: in time, finished (its timeout 50 ms, retired, and their newest op
    created 100 ms later), or without a timeout recorded."""
    pair = {"in-time": {}, "finished": {"timeout_ms": 50}, "no-timeout": {"timeout_ms": None}}[pp]
    head = _steps(2, gap_s=0.01)
    raw = {}
    for rank in range(3):
        own_pair = _op(1, 0.9, pg="1", desc="pp", **pair) if rank < 2 else _op(1, 0.5, pg="2", desc="pp")
        raw[rank] = make_dump(head + [own_pair, _op(1, 1.0 if rank < 2 else 8.0, pg="3", desc="tp")], pg_config=LATE_CONFIG)
    raw[3] = {"version": "2.10"}
    result = _run(raw)
    late = [(f.group.desc, f.collective_seq_id, f.ranks, f.detail) for f in result.findings if f.kind == "late_arrival"]
    assert late == [("tp", 1, (2,), ("rank 2 issued it 7.0 s after rank 0, past its timeout of 4 s: the others had given up "
                                     "on it by then"))]
    assert result.culprit_ranks == (2,)


# ---------------------------------------------------------------------------- ops the recorder did not log
def test_a_gloo_rank_listed_after_an_nccl_rank_has_its_unlogged_ops_said():
    """SYNTHETIC: a job of an NCCL rank (0) and a gloo rank (1), each with world #1-#6 (rank 0's
    completed). gloo's pg_status counts collectives, its buffer logs no monitored_barrier: rank
    1's count of 8 past #6 is ops its recorder did not log. Rank 0's NCCL count (9) is no such
    count (other recorders' may be op ids) and is not said; rank 1's is, though listed after."""
    nccl = make_dump([entry(seq=s, backend="nccl", state="completed") for s in range(1, 7)])
    nccl["pg_status"] = {"0": {"last_enqueued_collective": 9}}
    gloo = make_dump([entry(seq=s) for s in range(1, 7)])
    gloo["pg_status"] = {"0": {"last_enqueued_collective": 8}}
    warnings = _run({0: nccl, 1: gloo}).warnings
    assert [w for w in warnings if "pg_status counts" in w] == [
        ("rank 1: pg_status counts 8 collectives enqueued in default_pg, but its buffer ends at #6: ops the recorder did not "
         "log (gloo logs no send or recv, and no monitored_barrier)")]
