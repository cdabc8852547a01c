"""The wait graph's own rules (analysis/waitgraph.py), each asked on a graph given by hand, and the
stuck pair on dumps built for it (issue 52: the survivors of waitgraph.py's mutation run, session
33): who waits, directly or not, for the idle ranks; whether a rank's own first unfinished op comes
before another's; the culprits of a deadlock left among the other ranks once a cycle's are taken
out; why a rank has no dump; which end of a stuck pair is the send.

The dumps are SYNTHETIC NCCL dumps (conftest's entries; send/recv names in NCCL's layout): gloo
records no send or recv, so it cannot write them."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import entry
from test_matcher import nccl, p2p, run

from frtrace.analysis.waitgraph import Blocker, WaitGraph

A, B, C = (("coll", "g", seq) for seq in (1, 2, 3))


def graph(**state) -> WaitGraph:
    """A WaitGraph holding only `state` (its methods read what they need of it)."""
    made = WaitGraph.__new__(WaitGraph)
    made._awaiting = None
    for name, value in state.items():
        setattr(made, name, value)
    return made


def test_the_ranks_waiting_for_idle_ranks_are_found_through_the_ranks_that_wait_for_them():
    # rank 3 never issued A, which rank 5 waits in; rank 5 never issued B, which 7 and 8 wait in; 9 waits for 4
    waits = graph(waits_on={A: (3,), B: (5,), C: (4,)}, waiters={A: [5], B: [7, 8], C: [9]})
    assert waits._waiting_for([3]) == {5, 7, 8}
    assert waits._waiting_for([3, 4]) == {5, 7, 8, 9}
    assert waits._waiting_for([7]) == set()


def test_a_cycle_of_waits_is_walked_once():
    waits = graph(waits_on={A: (3,), B: (5,)}, waiters={A: [5], B: [3]})
    assert waits._waiting_for([3]) == {3, 5}


def _blocker(rank: int, index: int, seq: int = 1) -> Blocker:
    return Blocker(rank, SimpleNamespace(key="g", label="g"), seq, SimpleNamespace(index=index, op="all_reduce"))


class _View:
    """A group view whose units are given: (seq, rank) -> the rank's entries of that op."""

    def __init__(self, units: dict) -> None:
        self.units = units

    def unit(self, seq: int, rank: int):
        return self.units.get((seq, rank))


def test_a_rank_is_held_before_an_op_only_by_its_own_earlier_unfinished_op():
    # rank 2's first unfinished op is at index 0 of its buffer; rank 1 is blocked in seq 4, which rank 2
    # holds at index 3 (rank 2 is held before it) or does not hold at all (nothing holds rank 2 before it)
    other = _blocker(1, 9, seq=4)
    held = graph(blockers={2: _blocker(2, 0)}, views={"g": _View({(4, 2): [SimpleNamespace(index=3)]})})
    assert held._index_of(2, other) == 3 and held._held_before(2, other)
    unheld = graph(blockers={2: _blocker(2, 0)}, views={"g": _View({})})
    assert unheld._index_of(2, other) == -1 and not unheld._held_before(2, other)
    assert held._index_of(1, other) == 9  # its own op: where its own buffer holds it
    assert not graph(blockers={}, views={"g": _View({})})._held_before(2, other)  # no op of its own unfinished


def test_a_deadlock_left_among_the_other_ranks_once_a_cycles_culprits_are_out_is_decided_on_its_own():
    """A cycle of ranks 0-3 whose culprit is rank 0; without rank 0, ranks 2 and 3 still wait for
    each other: that cycle is decided too, by the strong rules only, and its program order is asked
    of the ranks outside both cycles."""
    asked = []

    def decide(ops, cycle_ranks, members, evidence, undecided, strong_only, voters_outside):
        asked.append((sorted(ops), cycle_ranks, strong_only, voters_outside, undecided))
        return [(0, A)] if len(asked) == 1 else [(2, B)]

    rest = [("rank", 2), ("op", B), ("rank", 3), ("op", C)]
    behind: list[str] = []
    cycles = graph(undecided_behind=behind)
    cycles._decide_cycle = decide
    # the whole cycle less rank 0 still holds the cycle of ranks 2-3; that one less rank 2, nothing
    cycles.components = lambda within: [rest] if ("rank", 1) in within and ("rank", 0) not in within else []
    members = {("rank", 0), ("rank", 1), ("op", A), *rest}
    mine: list[str] = []
    found = cycles._cycle_culprits([A, B, C], {0, 1, 2, 3}, members, [], mine, strong_only=False, voters_outside=frozenset({9}))
    assert found == [(0, A), (2, B)]
    assert asked[0] == ([A, B, C], {0, 1, 2, 3}, False, frozenset({9}), mine)
    assert asked[1] == ([B, C], {2, 3}, True, frozenset({0, 1, 2, 3, 9}), behind)
    assert asked[1][4] is behind


def test_a_cycle_decided_with_the_strong_rules_only_asks_them_only():
    asked = []
    cycles = graph(undecided_behind=[])
    cycles._decide_cycle = lambda *args: asked.append(args[5]) or []
    cycles.components = lambda within: []
    assert cycles._cycle_culprits([A, B], {0, 1}, set(), [], [], strong_only=True) == []
    assert asked == [True]


def test_why_a_rank_has_no_dump_follows_how_frtrace_live_fared_with_it():
    said = graph(unasked=frozenset({1, 2}), unanswered=frozenset({3, 4}))
    assert said.no_dump([1, 2]).startswith("left no address for frtrace live to ask")
    assert said.no_dump([3, 4]) == "did not answer when frtrace live asked (the process may be gone or its host unreachable)"
    assert said.no_dump([2, 3]) == "did not answer frtrace live or left no address to ask (a process may be gone)"
    assert said.no_dump([2, 5]) == said.no_dump([5]) == "left no readable dump"


PAIR = {"0": ("default_pg", (0, 1))}
TWO_DONE = [entry(seq=s, backend="nccl", state="completed") for s in (1, 2)]


def test_a_stuck_pair_names_the_sender_as_the_sender_when_the_lower_rank_receives():
    """Rank 1 sends to rank 0, which posted the recv: rank 1's send started, rank 0's recv
    scheduled, neither completed. The pair is looked at from rank 0's side, the receiver's."""
    result = run({0: nccl(TWO_DONE + [p2p("recv", 0, 1, 1, state="scheduled")], PAIR),
                  1: nccl(TWO_DONE + [p2p("send", 1, 0, 1, state="started")], PAIR)})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (0, 1))
    (stuck,) = [f for f in result.findings if f.kind == "not_completed"]
    assert stuck.detail.split(" [decided by ")[0] == (
        "rank 1's send 1->0 (p2p #1) and rank 0's recv 0<-1 (p2p #1) both posted, completed on neither "
        "(state scheduled, started)")

