"""Survivors of the wait graph's slice 4 of 5 (session 41), asked on a graph given by hand
(test_waitgraph_rules.graph: a WaitGraph holding only the state the rule reads, the rules it
calls stood in by what they would answer), as test_waitgraph_slices.py does: a deadlock's
majority blaming several ranks that are behind it, said in their number; ranks held below
PyTorch in two different ops, both said; and, on SYNTHETIC NCCL dumps (gloo records no send or
recv), two links stuck below PyTorch, each a finding; p2p.py's look at a link's oldest ops
(_done_in_batch) ends where the link holds one side only."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from conftest import ops
from test_matcher import nccl, p2p, run
from test_waitgraph_rules import graph
from test_waitgraph_slices import X, Y, _op


def test_ranks_blamed_by_a_deadlocks_majority_that_are_behind_it_are_said_in_their_number():
    """Ranks 3 and 4, whom the majority (ranks 0-2, in Y) waits for, are blocked in X, which those
    ranks issued before Y: both are behind them, not astray; someone else left the program too."""
    made = graph(
        waits_on={X: (0,), Y: (3, 4)},
        waiters={X: [3, 4], Y: [0, 1, 2]},
        op_of={0: Y, 1: Y, 2: Y, 3: X, 4: X},
        blocker_of_op={X: _op("all_reduce #1 of tp"), Y: _op("all_reduce #2 of world")},
        views={"tp": SimpleNamespace(group="tp"), "world": SimpleNamespace(group="world")},
    )
    made._deviators_by_history = lambda ranks: ({}, [])
    made._deviators_by_order = lambda ranks, not_voting: ({}, set())
    made._left_by_history = lambda ranks: None
    made._comparable = lambda group: True
    made._program_op = lambda key: key
    made._votes = lambda a, b, voters, issued_both=False: [1]
    members = {("rank", 0), ("rank", 3), ("rank", 4), ("op", X), ("op", Y)}
    undecided = []
    assert made._decide_cycle([X, Y], {0, 3, 4}, members, [], undecided, False, frozenset()) == []
    assert undecided == ["ranks 3-4 wait in all_reduce #1 of tp for rank 0; ranks 0-2 wait in all_reduce #2 of world "
                         "for ranks 3-4: most wait in all_reduce #2 of world, but ranks 3-4, missing from it, are blocked "
                         "in an op that those ranks issued before it: more than one rank left the program"]


def test_ranks_held_below_pytorch_in_two_ops_have_both_said():
    """Ranks 2 and 3 never issued X because each is held in an op every member issued, each its
    own (a barrier of the world, one of dp): both ops are said."""
    ops = {2: _op("barrier #7 of world"), 3: _op("barrier #9 of dp")}
    held = graph(waits_on={X: (2, 3)}, waiters={X: [0, 1]}, dumps=dict.fromkeys(range(4)),
                 blocker_of_op={X: _op("all_reduce #1 of tp")}, views={"tp": SimpleNamespace(issuers=lambda seq: {0, 1})})
    held._held = ops.get
    evidence = []
    assert held._idle_culprits(X, [2, 3], evidence, []) == [(2, X), (3, X)]
    assert evidence == ["wait-for graph: ranks 0-1 wait in all_reduce #1 of tp for ranks 2-3, who are held in barrier #7 "
                        "of world; barrier #9 of dp, which every member issued"]


def test_two_links_stuck_below_pytorch_are_each_a_finding():
    """Ranks 0 and 2 each send to their pair (1, 3), which each posted the recv; all four record
    completion and none completed: two links hang, each said (SYNTHETIC NCCL dumps)."""
    world = {"0": ("default_pg", range(4))}
    peer = {0: 1, 1: 0, 2: 3, 3: 2}
    result = run({rank: nccl(ops(1, backend="nccl", state="completed")
                             + [p2p("send" if rank in (0, 2) else "recv", rank, peer[rank], 1, state="started")], world)
                  for rank in range(4)})
    assert result.verdict == "stuck" and result.culprit_ranks == (0, 1, 2, 3)
    assert [(f.kind, f.ranks) for f in result.findings] == [("not_completed", (0, 1)), ("not_completed", (2, 3))]


@pytest.mark.parametrize("sends, recvs", [(1, 0), (0, 1), (2, 1)], ids=["send-alone", "recv-alone", "more-sends"])
def test_a_links_oldest_ops_are_looked_at_only_while_it_holds_both(sends, recvs):
    """_done_in_batch takes a link's oldest batched op out only while both a send and a recv are
    left: a link holding one side (a send posted alone, started) is returned as it is, at once (a
    loop asked of the other side's empty list never ended: a time-out to the mutation run)."""
    from frtrace.analysis.p2p import _done_in_batch

    out = [SimpleNamespace(state="started", batched=False) for _ in range(sends)]
    into = [SimpleNamespace(state="started", batched=False) for _ in range(recvs)]
    found = []
    look = threading.Thread(target=lambda: found.append(_done_in_batch(out, into)), daemon=True)
    look.start()
    look.join(2)
    assert found == [(out, into)]
