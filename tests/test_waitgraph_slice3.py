"""Survivors of the wait graph's slice 3 of 5 (sessions 40-41; some of slices 4 and 5's too): what
stuck_findings says of several ranks at once; the own-history rule's words for a deadlock of three
ranks; a rank astray, awaited in an op program order cannot ask before one it can, left unordered
only where its own step does not tell, and never astray on tied votes or an op it is only possibly
missing from (on a graph given by hand, as test_waitgraph_slices.py does). The jobs are
SYNTHETIC NCCL dumps (gloo records no op states, nor sends and recvs), built from format.md."""

from __future__ import annotations

import pytest

from conftest import entry, ops
from test_matcher import nccl, p2p, run
from test_waitgraph_rules import graph
from test_waitgraph_slices import SEND, X, Y, _op

WORLD4 = {"0": ("default_pg", range(4))}
RECORDER_OFF = {"version": "2.10"}  # what a rank writes with TORCH_FR_BUFFER_SIZE=0 (format.md)


def _then(state: str) -> dict:
    """One all_reduce of the world completed, then the second left in `state`."""
    return nccl(ops(1, backend="nccl", state="completed") + [entry(seq=2, backend="nccl", state=state)], WORLD4)


def test_ranks_whose_gpus_never_reached_the_op_are_said_in_their_number():
    result = run({rank: _then(state) for rank, state in enumerate(["started", "started", "scheduled", "scheduled"])})
    assert result.verdict == "stuck" and result.culprit_ranks == (2, 3)
    assert [f.detail.split(" [decided by ")[0] for f in result.findings] == [
        "issued by all 4 members; ranks 2-3 never started it (scheduled) where ranks 0-1 did: their GPU never reached it"]


def test_members_whose_recorders_were_off_are_said_in_their_number():
    result = run({0: _then("started"), 1: _then("started"), 2: dict(RECORDER_OFF), 3: dict(RECORDER_OFF)})
    assert [f.detail for f in result.findings] == [
        "issued by 2 of 4 members (ranks 2-3's dumps do not show it), not completed on ranks 0-1 (state started)"]
    one = run({0: _then("started"), 1: _then("started"), 2: _then("started"), 3: dict(RECORDER_OFF)})
    assert [f.detail for f in one.findings] == [
        "issued by 3 of 4 members (rank 3's dump does not show it), not completed on ranks 0-2 (state started)"]


W3 = {"0": ("default_pg", (0, 1, 2))}


def _chain_steps(steps: int, also_skipped: int):
    """Each step rank 0 sends to rank 1, rank 1 sends on to rank 2, then all three all_reduce
    (NCCL). After `steps` steps rank 1 leaves out its recv and its send (as it did at step
    `also_skipped` too) and waits in the all_reduce, while rank 0 waits in its send and rank 2 in
    its recv: a deadlock of three ranks, two of which keep their step."""
    dumps = {}
    for rank in range(3):
        mine = []
        for step in range(1, steps + 2):
            last = step == steps + 1
            state = "scheduled" if last else "completed"
            if rank == 0:
                mine.append(p2p("send", 0, 1, step, state=state))
            elif rank == 2:
                mine.append(p2p("recv", 2, 1, step, state=state))
            elif not (last or step == also_skipped):
                mine += [p2p("recv", 1, 0, 2 * step - 1, state=state), p2p("send", 1, 2, 2 * step, state=state)]
            if rank == 1 or not last:
                mine.append(entry(seq=step, backend="nccl", state=state))
        dumps[rank] = nccl(mine, W3)
    return run(dumps)


@pytest.mark.parametrize("also_skipped", [6, 2], ids=["skipped-last-step", "skipped-early"])
def test_the_ranks_of_a_deadlock_that_keep_their_step_are_said_in_their_number(also_skipped):
    """Rank 1's own history is irregular (it left out its p2p ops twice): the two other ranks of
    the deadlock follow their step up to the op they are blocked in, so rank 1 left its program."""
    result = _chain_steps(6, also_skipped)
    assert result.verdict == "desync" and result.culprit_ranks == (1,), result.headline
    assert result.evidence == ("own history: ranks 0,2 follow the step their buffer repeats up to the op they are blocked "
                               "in; of the deadlock's ranks only rank 1 does not show it, so it left its program",)


def _awaited_twice(keeps_step, votes: list[int], weak: frozenset = frozenset()):
    """Rank 5, blocked in Y (world #2), is awaited in a send (which program order cannot ask) and
    then in X (tp #1); the ranks that issued X and Y vote `votes` on X coming first, rank 5
    nothing; `keeps_step(rank)`: whether that rank's buffer keeps its step; `weak`: the ops whose
    awaited ranks are only possibly missing (a buffer wrapped past them)."""
    dumps = {0: None, 1: None, 2: None, 5: None}
    made = graph(op_of={5: Y}, weak=set(weak), _everyones_votes={}, dumps=dumps, waits_on={SEND: (5,), X: (5,)},
                 blocker_of_op={X: _op("all_reduce #1 of tp")}, blockers={5: _op("all_reduce #2 of world")},
                 _unordered=set())
    made._deviators_by_history = lambda ranks: ({}, [])
    made._votes = lambda a, b, voters, issued_both=False: votes if voters is dumps else []
    made._keeps_step = lambda rank, keys: keeps_step(rank)
    return made


def test_an_op_program_order_cannot_ask_is_passed_by_for_the_next_one_awaiting_the_rank():
    """A send awaiting rank 5 is passed by (program order orders collectives only): tp #1, which
    the other ranks issued before world #2, still names rank 5 as astray."""
    made, evidence = _awaited_twice(lambda rank: True, [1, 1, -1]), []
    assert made._astray(5, evidence) == [(5, X)]
    assert evidence == ["program order: the other ranks issued all_reduce #1 of tp before all_reduce #2 of world, which "
                        "rank 5 is blocked in"]


@pytest.mark.parametrize("keeps_step", [True, False])
def test_a_rank_awaited_in_an_op_nobody_orders_is_unordered_only_where_its_own_step_does_not_tell(keeps_step):
    """No rank issued both ops (no votes): rank 5 is left among the ranks whose order nothing tells
    unless its own buffer keeps its step; its own step, not another rank's, is asked."""
    made = _awaited_twice(lambda rank: keeps_step and rank == 5, [])
    assert made._astray(5, []) == []
    assert made._unordered == (set() if keeps_step else {5})


@pytest.mark.parametrize("votes, weak", [([1, -1], frozenset()), ([1, 1, -1], frozenset({X}))],
                         ids=["votes-tied", "awaited-only-possibly"])
def test_a_rank_is_not_astray_where_the_votes_tie_or_it_is_only_possibly_missing_from_the_op(votes, weak):
    """Slice 5's `_astray` 49 and 14: as many ranks put tp #1 after world #2 as before it, or rank
    5 is awaited in tp #1 only because a buffer wrapped past it: nothing names rank 5 astray."""
    made, evidence = _awaited_twice(lambda rank: True, votes, weak), []
    assert made._astray(5, evidence) == [] and evidence == []
