"""The wait graph's rules that the mutation run's slices of its part (session 38, `tests/mutation.py
--part waitgraph --slice K/5`: waitgraph.py, p2p.py, steps.py, order.py) showed no test deciding,
most asked on a graph given by hand (test_waitgraph_rules.graph: a WaitGraph holding only the
state the rule reads, the rules it calls stood in by what they would answer):

- a deadlock's majority op, where the ranks it blames are blocked in an op the majority issued
  before it (behind, not astray): undecided, more than one rank left the program;
- a deadlock decided by the strong rules only, where none decides: said so;
- a cycle holding a send or recv: the other ranks' program order is not asked (it orders
  collectives only);
- a rank in no cycle, blocked in one op and awaited in another: the other ranks' order votes
  blame it only where more of them say the awaited op comes first than say otherwise;
- ranks waiting in a send for a rank that waits for nobody, ranks waiting for ranks held below
  PyTorch, and ranks whose buffers wrapped past an op most members issued: said in their number;
- a tie that the ranks' own histories and the sibling groups decide opposite ways: undecided;
- ranks that may have left the program beside a culprit (nothing tells their order): said in
  their number;
- the entries not completed: found once for a state column ranks share (the analysis's cost per
  dump stays flat), which only a test of that cache can tell; every rank's asked with one cache;
- a cycle of waits walked to its end; the components of a part of the graph; a rank that records
  no completion leaves the others' stuck ops said;
- a rank held in a started collective only where no member went past it; a lone send and a
  batched recv on one link are no stuck pair;
- an op left in two states, and a send and recv of two tensors that differ (p2p.py): each said
  whole.

These two, and the one cache asked through an analysis, run on SYNTHETIC NCCL dumps (conftest's
entries): gloo's entries stay "scheduled", and it records no send or recv."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from test_waitgraph_rules import A, B, graph

from frtrace.analysis.waitgraph import Blocker, _undone

X, Y = ("coll", "tp", 1), ("coll", "world", 2)
SEND = ("p2p", "world", 3, 0, 1, 3)


def _op(label: str) -> SimpleNamespace:
    return SimpleNamespace(describe=lambda: label)


def _cycle(votes: list[int], ops=(X, Y), **rules):
    """Ranks 0, 1 and 2 wait in Y (world #2) for rank 3, which waits in X (tp #1) for rank 0: a
    cycle of ranks 0 and 3 whose strong rules decide nothing (unless `rules` say otherwise), and
    whose ranks' order votes on X before Y are `votes`."""
    asked: list[tuple] = []
    made = graph(
        waits_on={X: (0,), Y: (3,), SEND: (0,)},
        waiters={X: [3], Y: [0, 1, 2], SEND: [3]},
        op_of={0: Y, 1: Y, 2: Y, 3: ops[0]},
        blocker_of_op={X: _op("all_reduce #1 of tp"), Y: _op("all_reduce #2 of world"), SEND: _op("send (p2p #1) of world")},
        views={"tp": SimpleNamespace(group="tp"), "world": SimpleNamespace(group="world")},
    )
    made._deviators_by_history = lambda ranks: ({}, [])
    made._deviators_by_order = lambda ranks, not_voting: asked.append(("order", ranks)) or ({}, set())
    made._left_by_history = lambda ranks: None
    made._comparable = lambda group: True
    made._program_op = lambda key: key
    made._votes = lambda a, b, voters, issued_both=False: asked.append(("votes", a, b, tuple(voters))) or votes
    for name, rule in rules.items():
        setattr(made, name, rule)
    members = {("rank", 0), ("rank", 3), ("op", ops[0]), ("op", Y)}
    return made, members, asked


def test_ranks_blamed_by_a_deadlocks_majority_that_are_behind_it_leave_it_undecided():
    """Rank 3, whom the majority (ranks 0-2, in Y) waits for, is blocked in X, which those ranks
    issued before Y: rank 3 is behind them, not astray, so someone else left the program too."""
    cycle, members, asked = _cycle(votes=[1])
    evidence, undecided = [], []
    assert cycle._decide_cycle([X, Y], {0, 3}, members, evidence, undecided, False, frozenset()) == []
    assert ("votes", X, Y, (0, 1, 2)) in asked
    assert undecided == ["rank 3 waits in all_reduce #1 of tp for rank 0; ranks 0-2 wait in all_reduce #2 of world for "
                         "rank 3: most wait in all_reduce #2 of world, but rank 3, missing from it, is blocked in an op "
                         "that those ranks issued before it: more than one rank left the program"]
    assert evidence == []


def test_ranks_blamed_by_a_deadlocks_majority_that_are_not_behind_it_are_its_culprits():
    cycle, members, _ = _cycle(votes=[-1])
    evidence, undecided = [], []
    assert cycle._decide_cycle([X, Y], {0, 3}, members, evidence, undecided, False, frozenset()) == [(3, Y)]
    assert evidence == ["majority: ranks 0-2 wait in all_reduce #2 of world, more than in any other op of the cycle"]
    assert undecided == []


def test_a_deadlock_the_strong_rules_cannot_decide_is_said_undecided_in_words():
    cycle, members, _ = _cycle(votes=[-1])
    undecided = []
    assert cycle._decide_cycle([X, Y], {0, 3}, members, [], undecided, True, frozenset()) == []
    assert undecided == ["rank 3 waits in all_reduce #1 of tp for rank 0; ranks 0-2 wait in all_reduce #2 of world for "
                         "rank 3: a deadlock of its own, and neither their own histories nor any other rank shows which "
                         "order is right"]


def test_a_cycle_holding_a_send_is_not_ordered_by_the_other_ranks_program_order():
    """Rank 3 waits in a send to rank 0: the ranks outside the cycle order collectives only, so
    their order is not asked (were it asked, it would name rank 0); nor is the majority."""
    cycle, members, asked = _cycle(votes=[-1], ops=(SEND, Y),
                                   _deviators_by_order=lambda ranks, not_voting: ({0: Y}, set()))
    undecided = []
    assert cycle._decide_cycle([SEND, Y], {0, 3}, members, [], undecided, False, frozenset()) == []
    assert undecided == ["rank 3 waits in send (p2p #1) of world for rank 0; ranks 0-2 wait in all_reduce #2 of world "
                         "for rank 3: they issued ops in different orders and neither their own histories nor any other "
                         "rank shows which order is right"]
    assert not [a for a in asked if a[0] == "votes"]


def _astray(votes: list[int]):
    """Rank 5, blocked in Y, is awaited in X; every rank that issued both votes `votes` on X
    coming before Y, rank 5 itself nothing."""
    dumps = {0: None, 1: None, 2: None, 5: None}
    made = graph(op_of={5: Y}, weak=set(), _everyones_votes={}, dumps=dumps,
                 waits_on={X: (5,)}, blocker_of_op={X: _op("all_reduce #1 of tp")},
                 blockers={5: _op("all_reduce #2 of world")})
    made._deviators_by_history = lambda ranks: ({}, [])
    made._votes = lambda a, b, voters, issued_both=False: votes if voters is dumps else []
    made._keeps_step = lambda rank, keys: True
    return made


def test_a_rank_awaited_in_an_op_is_astray_only_where_most_votes_put_that_op_first():
    evidence = []
    assert _astray([1, 1, -1])._astray(5, evidence) == [(5, X)]
    assert evidence == ["program order: the other ranks issued all_reduce #1 of tp before all_reduce #2 of world, which "
                        "rank 5 is blocked in"]
    evidence = []
    assert _astray([1, -1, -1])._astray(5, evidence) == []  # a vote for X first, outvoted
    assert evidence == []


def test_ranks_waiting_in_a_send_for_an_idle_rank_are_said_in_the_plural():
    idle = graph(waits_on={SEND: (3,)}, waiters={SEND: [0, 1]}, dumps={0: None, 1: None, 3: None},
                 blocker_of_op={SEND: _op("send (p2p #1) of world")})
    evidence = []
    assert idle._idle_culprits(SEND, [3], evidence, []) == [(3, SEND)]
    assert evidence == ["wait-for graph: ranks 0-1 wait in send (p2p #1) of world for rank 3, who waits for nobody"]


@pytest.mark.parametrize("waiters, awaited, said", [
    ([0, 1], (2, 3), "ranks 0-1 wait in all_reduce #1 of tp for ranks 2-3, who are held"),
    ([0], (2, 3), "rank 0 waits in all_reduce #1 of tp for ranks 2-3, who are held"),
    ([0], (2,), "rank 0 waits in all_reduce #1 of tp for rank 2, who is held"),
])
def test_ranks_waiting_for_ranks_held_below_pytorch_are_said_in_their_number(waiters, awaited, said):
    """The awaited ranks never issued X because they are held in an op every member issued: no
    sign that the ranks that did ran ahead."""
    held = graph(waits_on={X: awaited}, waiters={X: waiters}, dumps=dict.fromkeys(range(4)),
                 blocker_of_op={X: _op("all_reduce #1 of tp")}, views={"tp": SimpleNamespace(issuers=lambda seq: set(waiters))})
    held._held = lambda rank: _op("barrier #7 of world")
    evidence = []
    assert held._idle_culprits(X, list(awaited), evidence, []) == [(r, X) for r in awaited]
    assert evidence == [f"wait-for graph: {said} in barrier #7 of world, which every member issued"]


@pytest.mark.parametrize("awaited, said", [((3, 4), "ranks 3-4 show no sign of it and wait"),
                                            ((4,), "rank 4 shows no sign of it and waits")])
def test_ranks_whose_buffers_wrapped_past_an_op_most_members_issued_show_no_sign_of_it(awaited, said):
    """Most members issued X; the awaited ranks' buffers start after it (a weak wait): they are
    said to show no sign of it, not to have never issued it."""
    view = SimpleNamespace(issuers=lambda seq: {0, 1, 2}, unseen=(), size=5)
    wrapped = graph(waits_on={X: awaited}, waiters={X: [0, 1, 2]}, dumps=dict.fromkeys(range(5)), weak={X},
                    blocker_of_op={X: _op("all_reduce #1 of tp")}, views={"tp": view})
    wrapped._held = lambda rank: None
    evidence = []
    assert wrapped._idle_culprits(X, list(awaited), evidence, []) == [(r, X) for r in awaited]
    assert evidence == [f"majority: 3 of 5 members issued all_reduce #1 of tp; {said} for nobody"]


def test_a_tie_whose_own_histories_and_sibling_groups_disagree_is_undecided_in_words():
    """Ranks 0 and 1 issued X, ranks 2 and 3 never did and wait for nobody: as many ran ahead as
    stayed behind. Their own histories say 2 and 3 stayed behind, the sibling groups that no
    other group reached X: the rules disagree, so nothing is decided."""
    view = SimpleNamespace(issuers=lambda seq: {0, 1}, unseen=(), size=4, group=SimpleNamespace(label="tp 0"))
    tie = graph(waits_on={X: (2, 3)}, waiters={X: [0, 1]}, dumps=dict.fromkeys(range(4)), weak=set(),
                blocker_of_op={X: _op("all_reduce #1 of tp")}, views={"tp": view}, ran_ahead={})
    tie._held = lambda rank: None
    tie._waiting_for = lambda ranks: {0, 1}
    tie._sibling_reached = lambda view, seq, held: False
    tie._stayed_behind = lambda key, issuers, awaited: "own history: ranks 2-3 stayed behind"
    evidence, undecided = [], []
    assert tie._idle_culprits(X, [2, 3], evidence, undecided) == []
    assert undecided == ["ranks 0-1 issued all_reduce #1 of tp, ranks 2-3 never did and wait for nobody: as many members "
                         "ran ahead as stayed behind, and their own histories and the sibling groups disagree on which "
                         "is right"]
    assert evidence == [] and tie.ran_ahead == {}


class _Columns:
    """A dump's entry columns as _undone reads them: its states, and a state code per entry."""

    def __init__(self, state: bytes) -> None:
        self.states, self.state = ("scheduled", "completed"), state

    def __len__(self) -> int:
        return len(self.state)


def test_the_entries_not_completed_are_found_once_for_a_state_column_ranks_share():
    shared, other = _Columns(b"\x01\x00\x01\x00"), _Columns(b"\x00\x01\x01\x01")
    found = {}
    first = _undone(shared, found)
    assert first == (1, 3)
    assert _undone(shared, found) is first  # the same column, another rank's dump: taken as found
    assert _undone(other, found) == (0,)
    assert _undone(shared, None) == (1, 3) and _undone(shared, None) is not first  # nothing kept


@pytest.mark.parametrize("unordered, said", [({4, 5}, "ranks 4-5, blocked in one op while others wait for them"),
                                              ({4}, "rank 4, blocked in one op while others wait for it")])
def test_ranks_that_may_have_left_the_program_beside_a_culprit_are_said_in_their_number(unordered, said):
    """Rank 0 waits in X for rank 3, who waits for nobody and is the culprit; the ranks whose
    order nothing tells (blocked in one op, awaited in another) are said beside it, undecided."""
    beside = graph(waits_on={X: (3,)}, waiters={X: [0]}, op_of={0: X}, _unordered=unordered, undecided_behind=[])
    beside._idle_culprits = lambda key, idle, evidence, undecided: [(r, key) for r in idle]
    assert beside.culprits() == ([(3, X)], [], [])
    assert beside.undecided_behind == [f"whether {said} in another, skipped that other op cannot be told (no other rank "
                                       "shows their order)"]


def test_every_ranks_blocker_is_found_through_one_cache_of_the_entries_not_completed(monkeypatch):
    """Rank 3 never issued all_reduce #3, which the others started: the analysis asks _undone
    for every rank's entries not completed with one cache, which then holds each state column
    (read in this process, no two ranks' are one object here; read by workers, alike ones are)."""
    from conftest import entry
    from test_matcher import nccl, run

    from frtrace.analysis import waitgraph

    caches = []
    real = waitgraph._undone

    def undone(columns, found):
        caches.append(found)
        return real(columns, found)

    monkeypatch.setattr(waitgraph, "_undone", undone)
    world = {"0": ("default_pg", (0, 1, 2, 3))}
    done = [entry(seq=s, backend="nccl", state="completed") for s in (1, 2)]
    stuck = done + [entry(seq=3, backend="nccl", state="started")]
    result = run({0: nccl(stuck, world), 1: nccl(stuck, world), 2: nccl(stuck, world), 3: nccl(done, world)})
    assert result.culprit_ranks == (3,)
    assert len(caches) == 4 and caches[0] is not None and all(found is caches[0] for found in caches)
    assert len(caches[0]) == 4


def test_an_op_left_in_two_states_says_both():
    """Every member issued all_reduce #2; rank 3 completed it, ranks 0 and 1 started it and rank 2
    only scheduled it: not completed on ranks 0-2, in both states."""
    from conftest import entry
    from test_matcher import nccl, run

    world = {"0": ("default_pg", (0, 1, 2, 3))}
    states = {0: "started", 1: "started", 2: "scheduled", 3: "completed"}
    result = run({rank: nccl([entry(seq=1, backend="nccl", state="completed"), entry(seq=2, backend="nccl", state=state)], world)
                  for rank, state in states.items()})
    (stuck,) = [f for f in result.findings if f.kind == "not_completed"]
    assert stuck.detail.split(" [decided by ")[0] == ("issued by all 4 members, not completed on ranks 0-2 "
                                                      "(state scheduled, started)")


def test_a_send_and_recv_of_two_tensors_that_differ_say_each_sides_dtypes():
    """p2p.py, of the same part: rank 0 sends two tensors to rank 1, which posted a recv of two
    of which the second is larger; each side's dtypes are listed."""
    from conftest import entry
    from test_matcher import nccl, p2p, run

    pair = {"0": ("default_pg", (0, 1))}
    done = [entry(seq=s, backend="nccl", state="completed") for s in (1, 2)]
    result = run({0: nccl(done + [p2p("send", 0, 1, 1, state="started", sizes=((4,), (2,)))], pair),
                  1: nccl(done + [p2p("recv", 1, 0, 1, state="started", sizes=((4,), (3,)))], pair)})
    assert [f.detail for f in result.findings if f.kind == "size_mismatch"] == [
        "rank 0 sends [[4], [2]] Float,Float but rank 1 receives [[4], [3]] Float,Float; a pair cannot tell which side "
        "is wrong"]


def test_a_rank_is_held_in_a_started_collective_only_where_no_member_went_past_it():
    started = Blocker(2, SimpleNamespace(key="g", label="g"), 5, SimpleNamespace(state="started", op="all_reduce"))
    for known_last, held in (({0: 5, 1: 5, 2: 5}, True), ({0: 6, 1: 5, 2: 5}, False)):
        waits = graph(joined_by_all={2: started}, views={"g": SimpleNamespace(known_last=known_last)})
        assert (waits._held(2) is started) == held


def test_a_lone_send_and_a_batched_recv_on_one_link_are_no_stuck_pair():
    """A batched op may have been done where its partner was not: a send posted alone and a recv
    posted in a batch, each its rank's first op not completed, are not said to hang together."""
    group = SimpleNamespace(key="g", label="g")
    entry_of = SimpleNamespace(op="send", p2p_seq_id=1)
    send = Blocker(0, group, None, entry_of, SimpleNamespace(kind="send", peer=1, batched=False, state="started"))
    recv = Blocker(1, group, None, entry_of, SimpleNamespace(kind="recv", peer=0, batched=True, state="scheduled"))
    pair = graph(joined_by_all={0: send, 1: recv}, tracking={0: True, 1: True})
    assert pair._stuck_pair(0, send) is None
    both_lone = Blocker(1, group, None, entry_of, SimpleNamespace(kind="recv", peer=0, batched=False, state="scheduled"))
    assert graph(joined_by_all={0: send, 1: both_lone}, tracking={0: True, 1: True})._stuck_pair(0, send) is not None


def test_a_cycle_of_waits_is_walked_to_its_end():
    """Ranks 3 and 5 wait for each other: the walk from rank 3 ends, each rank taken once (a walk
    that took none ran forever, which the mutation run could only count as a time-out)."""
    waits = graph(waits_on={A: (3,), B: (5,)}, waiters={A: [5], B: [3]})
    found = []
    walk = threading.Thread(target=lambda: found.append(waits._waiting_for([3])), daemon=True)
    walk.start()
    walk.join(2)
    assert found == [{3, 5}]


def test_the_components_of_a_part_of_the_graph_are_its_own_cycles():
    """Ranks 3 and 5 wait for each other (through A and B), rank 7 for rank 3 (through C): within
    the part holding the cycle, the cycle is one component."""
    C = ("coll", "g", 3)
    waits = graph(waits_on={A: (3,), B: (5,), C: (3,)}, op_of={5: A, 3: B, 7: C})
    cycle = {("op", A), ("rank", 3), ("op", B), ("rank", 5)}
    assert [set(component) for component in waits.components(cycle)] == [cycle]


def test_a_rank_that_records_no_completion_leaves_the_other_ranks_stuck_ops_said():
    group = SimpleNamespace(key="g", label="g")
    lone = Blocker(0, group, None, SimpleNamespace(op="send", p2p_seq_id=1), SimpleNamespace(peer=1))
    other = Blocker(1, group, None, SimpleNamespace(op="recv", p2p_seq_id=1), SimpleNamespace(peer=2))
    stuck = graph(joined_by_all={0: lone, 1: other}, tracking={0: False, 1: True})
    stuck._stuck_pair = lambda rank, blocker: f"rank {rank}'s pair"
    stuck._partner_done = lambda rank, blocker: None
    assert stuck.stuck_findings() == ["rank 1's pair"]
