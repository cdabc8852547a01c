"""A dump shown older by its furthest peer's own steps (moments._Witnesses: `_cut`, `_after_steps`),
on the inputs the mutation run's survivors named and no test built: the op two whole steps before
the buffer's end read as the cut itself, the finished op right after a member's last, every op
between them read, rooted ops passed over, a step of two kinds of op, a last op that leaves the
step, and a member that holds no op of the group, where nothing before the cut shows it older.

gloo dumps whose ops come a millisecond apart: no op was retired a timeout before the newest, so
the workers' reading shows nothing finished and only the steps can."""

from __future__ import annotations

from conftest import make_dump
from test_moments import STEP, _op, _run
from test_moments_survivors import _stale

WORLD_SOLO = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "solo", "ranks": "[1]"}}
THROUGH_STEPS = "its rank went through whole steps after it"


def _world(ops: list[str]) -> list[dict]:
    """World ops #1, #2, ... of the kinds given, a millisecond apart."""
    return [_op(seq, seq * 0.001, op) for seq, op in enumerate(ops, 1)]


def _in_steps(count: int) -> list[str]:
    """The first `count` ops of a program whose step is all_reduce, broadcast, reduce."""
    return [STEP[i % len(STEP)] for i in range(count)]


def _older(rank_0: list[str], rank_1_last: int) -> dict:
    """Rank 0 issued `rank_0`; rank 1's dump ends at world #`rank_1_last` of the same program."""
    raw = {0: make_dump(_world(rank_0), pg_config=WORLD_SOLO),
           1: make_dump(_world(_in_steps(3 * 14))[:rank_1_last], pg_config=WORLD_SOLO)}
    return _stale(raw)


# ---------------------------------------------------------------------------- which op the steps show finished
def test_the_op_two_whole_steps_before_the_buffer_s_end_is_itself_shown_finished():
    """Rank 0 ends at #31 (all_reduce): its last two whole steps are #26-#31, so #25, an
    all_reduce, is the op they follow: rank 1, at #21, is older than #25."""
    assert _older(_in_steps(31), 21) == {1: ("default_pg", 21, 25, 0, THROUGH_STEPS)}


def test_the_highest_op_before_the_two_steps_that_waits_for_every_member_is_the_one_shown():
    """Rank 0 ends at #30: #24 (a reduce) and #23 (a broadcast) are rooted, their roots finish
    alone; #22, an all_reduce, is the op shown finished, right after rank 1's last."""
    assert _older(_in_steps(30), 21) == {1: ("default_pg", 21, 22, 0, THROUGH_STEPS)}


def test_every_op_down_to_the_member_s_last_is_read_for_the_one_shown_finished():
    """Rank 0 ends at #32: the steps follow #26 (a broadcast); #25 is the highest all_reduce
    before them, seven ops below rank 0's last."""
    assert _older(_in_steps(32), 21) == {1: ("default_pg", 21, 25, 0, THROUGH_STEPS)}


def test_a_step_of_two_kinds_of_op_shows_the_op_before_two_of_them_finished():
    """Rank 0 repeats all_reduce, all_gather ten times: #16 is followed by #17-#20."""
    assert _older(["all_reduce", "all_gather"] * 10, 10) == {1: ("default_pg", 10, 16, 0, THROUGH_STEPS)}


def test_a_last_op_that_leaves_the_step_shows_no_step_and_no_dump_older():
    """Rank 0 ends its 30 ops in steps with an all_gather no step holds: its buffer does not
    follow its step to the end, so it shows nothing finished."""
    assert _older(_in_steps(30) + ["all_gather"], 21) == {}


# ---------------------------------------------------------------------------- a member holding no op of the group
def _holding_none(rank_0: list[str]) -> dict:
    """Rank 0 issued `rank_0` in the world; rank 1's whole buffer holds one op of its own group
    (it never wrapped: it shows where rank 1 was)."""
    raw = {0: make_dump(_world(rank_0), pg_config=WORLD_SOLO),
           1: make_dump([_op(1, 0.001, pg="1", desc="solo")], pg_config=WORLD_SOLO)}
    return _stale(raw)


def test_a_member_holding_no_op_is_older_than_the_op_its_peer_s_steps_show_finished_and_is_named_for_nothing():
    """The case the next two turn around: rank 0 ends at #12 in steps; #4, the all_reduce before
    its last two whole steps (#7-#12), is shown finished. The job is clean: rank 1's dump was
    taken earlier."""
    raw = {0: make_dump(_world(_in_steps(12)), pg_config=WORLD_SOLO),
           1: make_dump([_op(1, 0.001, pg="1", desc="solo")], pg_config=WORLD_SOLO)}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks) == ("clean", ())
    assert result.stale == {1: "rank 1's dump is older than its peers': it holds no op of default_pg, but rank 0's shows #4 "
                               f"finished ({THROUGH_STEPS}), which rank 1 must have joined; where rank 1 was at the end "
                               "cannot be told, so it is named for nothing it lacks"}
    assert _holding_none(_in_steps(12)) == {1: ("default_pg", 0, 4, 0, THROUGH_STEPS)}


def test_a_member_holding_no_op_is_not_older_where_the_peer_repeats_one_op():
    """Rank 0's all_reduces one after another are no steps (DDP's buckets): nothing is shown
    finished."""
    assert _holding_none(["all_reduce"] * 10) == {}


def test_a_member_holding_no_op_is_not_older_where_every_op_before_the_steps_is_rooted():
    """Rank 0 repeats broadcast, reduce: each op's root finishes it alone, so none shows rank 1
    joined."""
    assert _holding_none(["broadcast", "reduce"] * 6) == {}
