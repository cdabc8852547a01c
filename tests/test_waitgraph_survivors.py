"""The wait-for graph's rules on the inputs the mutation run's survivors named and no test built
(docs/testing.md, "Survivors, by function"): program-order votes from ranks that reached one op
only, wrapped past a group or are in a sibling group, and ties (order.py); missing ranks said of
one waiter, of four and five awaited ranks, after a send or a reported gap, of an op without a
name (waitgraph.py); sends and recvs one side of which posted nothing, recorded completion or
wrapped, a receive from any rank, a peer without a dump (p2p.py); the graph's components."""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import entry, make_dump, ops
from test_matcher import nccl, p2p, run

from frtrace.analysis.waitgraph import WaitGraph


def programs_dumps(groups: dict[str, tuple], programs: dict[int, str], wrapped=()) -> dict[int, dict]:
    """Gloo dumps written from each rank's program, one character a collective: the name of its
    group (each group's ops numbered #1, #2, ... in the order the rank issued them). The ranks in
    `wrapped` have a buffer that wrapped (it holds only the ops given)."""
    dumps = {}
    for rank, program in programs.items():
        seqs: Counter = Counter()
        raw = []
        for pg in program:
            seqs[pg] += 1
            raw.append(entry(pg=pg, desc=groups[pg][0], seq=seqs[pg]))
        dumps[rank] = nccl(raw, groups, first_record=100 if rank in wrapped else 0)
    return dumps


def _job(groups: dict[str, tuple], programs: dict[int, str], wrapped=()):
    """programs_dumps, analysed."""
    return run(programs_dumps(groups, programs, wrapped))


NO_COLLECTIVE = ("where: rank 1 is in no collective: its last op, all_reduce #1 of default_pg, was joined by every member "
                 "(or in a send or recv, which gloo does not record)")


# ---------------------------------------------------------------------------- program order (order.py)
@pytest.mark.parametrize("most_wait_in", ["a", "b"])
@pytest.mark.parametrize("votes", ["none", "split"])
def test_a_culprit_missing_from_two_ops_no_other_rank_orders_is_named_by_the_op_most_wait_in(most_wait_in, votes):
    """Rank 1 issued neither a's #1 nor b's #1, and no buffer shows which comes first: no rank but
    rank 1 is a member of both groups (votes "none"), or ranks 2 and 3, members of both, issued
    them in opposite orders (their ops are posted without waiting: one vote each way, "split"). A
    tie names no first op, and the culprit is said where most ranks wait (rank 5 joins that
    group), whichever of the two ops that is."""
    both = (2, 3) if votes == "split" else ()
    a, b = ((0, 1, 3, 5), (1, 2, 4)) if most_wait_in == "a" else ((0, 1, 3), (1, 2, 4, 5))
    a, b = tuple(sorted({*a, *both})), tuple(sorted({*b, *both}))
    groups = {"0": ("default_pg", range(6)), "1": ("a", a), "2": ("b", b)}
    programs = {0: "01", 1: "0", 2: "02", 3: "01", 4: "02", 5: "01" if 5 in a else "02"}
    if votes == "split":
        programs.update({2: "012", 3: "021"})
    result = _job(groups, programs)
    members = len(a if most_wait_in == "a" else b)
    assert result.culprit_ranks == (1,)
    assert result.headline == (f"DESYNC: rank 1 never joined all_reduce #1 of {most_wait_in} (3 ranks wait in it); "
                               "rank 1 is in no collective")
    assert result.evidence == ((f"majority: {members - 1} of {members} members issued all_reduce #1 of {most_wait_in}; "
                                "rank 1 never did and waits for nobody"), NO_COLLECTIVE)


def test_the_first_of_three_ops_a_culprit_never_joined_is_the_one_another_rank_issued_before_both_others():
    """Rank 1 issued none of a's, b's and c's #1; rank 2, a member of all three, issued them in
    that order (one vote for each pair). Most ranks wait in c's, yet a's is the first op rank 1
    never joined, and the headline names it."""
    groups = {"0": ("default_pg", range(6)), "1": ("a", (0, 1, 2)), "2": ("b", (1, 2, 5)), "3": ("c", (1, 2, 3, 4))}
    result = _job(groups, {0: "01", 1: "0", 2: "0123", 3: "03", 4: "03", 5: "02"})
    assert result.culprit_ranks == (1,)
    assert result.headline == "DESYNC: rank 1 never joined all_reduce #1 of a (1 rank waits in it); rank 1 is in no collective"
    assert result.evidence == ("majority: 3 of 4 members issued all_reduce #1 of c; rank 1 never did and waits for nobody",
                               "program order: the first op rank 1 never joined is all_reduce #1 of a, before all_reduce #1 of c",
                               NO_COLLECTIVE)


def test_members_of_a_sibling_group_that_issued_one_op_and_have_not_reached_the_other_show_the_order():
    """Rank 1 issued neither c's #1 (group {0-3}) nor a's #1. Ranks 4 and 5, members of a and of
    the sibling c group {4-7}, issued a's #1 and their c group has not reached #1: two votes for
    a first, read through the sibling group (ranks 4-5 are in no group of rank 1's c)."""
    groups = {"0": ("default_pg", range(8)), "1": ("c", (0, 1, 2, 3)), "2": ("c", (4, 5, 6, 7)), "3": ("a", (1, 4, 5))}
    result = _job(groups, {0: "01", 1: "0", 2: "01", 3: "01", 4: "03", 5: "03", 6: "0", 7: "0"})
    assert result.culprit_ranks == (1,)
    assert result.headline == "DESYNC: rank 1 never joined all_reduce #1 of a (2 ranks wait in it); rank 1 is in no collective"
    assert result.evidence == ("majority: 3 of 4 members issued all_reduce #1 of c; rank 1 never did and waits for nobody",
                               "program order: the first op rank 1 never joined is all_reduce #1 of a, before all_reduce #1 of c",
                               NO_COLLECTIVE)


def test_a_rank_whose_buffer_wrapped_past_a_group_is_no_witness_that_it_never_reached_the_groups_op():
    """Rank 1 issued neither c's #1 nor a's #1; rank 2 issued c's before a's. Rank 5, a member of
    both, holds a's #1 and no op of c: its buffer wrapped past c, and it has no say on the order
    (read as not having reached c's #1, it would cancel rank 2's vote). Most wait in a's #1, but
    c's is the first op rank 1 never joined."""
    groups = {"0": ("default_pg", range(6)), "1": ("a", (0, 1, 2, 5)), "2": ("c", (1, 2, 4, 5))}
    result = _job(groups, {0: "01", 1: "0", 2: "021", 3: "0", 4: "02", 5: "01"}, wrapped=(5,))
    assert result.culprit_ranks == (1,)
    assert result.headline == "DESYNC: rank 1 never joined all_reduce #1 of c (1 rank waits in it); rank 1 is in no collective"
    assert result.evidence == ("majority: 3 of 4 members issued all_reduce #1 of a; rank 1 never did and waits for nobody",
                               "program order: the first op rank 1 never joined is all_reduce #1 of c, before all_reduce #1 of a",
                               NO_COLLECTIVE)


# ---------------------------------------------------------------------------- missing ranks (waitgraph.py)
def _completed(seq: int) -> dict:
    """A collective completed on an NCCL rank (completion recorded)."""
    return entry(seq=seq, backend="nccl", state="completed")


def _missing(result, group: str, seq: int):
    (finding,) = [f for f in result.findings if f.kind == "missing_ranks" and (f.group.name, f.collective_seq_id) == (group, seq)]
    return finding


def test_one_rank_waiting_where_a_buffer_wrapped_past_the_group_is_said_in_the_singular():
    """Rank 1's buffer wrapped and holds only p's #1: whether it issued the world's #2 is unknown,
    and rank 0, alone, waits in it."""
    groups = {"0": ("default_pg", range(3)), "1": ("p", (1, 2))}
    result = _job(groups, {0: "00", 1: "1", 2: "001"}, wrapped=(1,))
    assert result.culprit_ranks == (1,)
    assert _missing(result, "0", 2).detail.startswith(
        "rank 1 holds no op of default_pg (the buffer wrapped past it); rank 0 waits in it (the dumps do not record completion")


def test_of_five_ranks_that_never_issued_an_op_the_first_four_last_ops_are_said_and_the_fifth_counted():
    """Ranks 0-5 issued #3; ranks 7 and 9 stopped at #2, ranks 6, 8 and 10 at #1 (ranks 7 and 9
    wait for them in #2: they are the culprits)."""
    result = run({r: make_dump(ops(3 if r < 6 else 2 if r % 2 else 1)) for r in range(11)})
    assert result.culprit_ranks == (6, 8, 10)
    finding = _missing(result, "0", 3)
    assert finding.ranks == (6, 7, 8, 9, 10)
    assert finding.detail.startswith(
        "ranks 6-10 never issued it; ranks 0-5 did (rank 6's last op in default_pg is #1; rank 7's last op in default_pg "
        "is #2; rank 8's last op in default_pg is #1; rank 9's last op in default_pg is #2; ... (1 more))")


def test_a_collective_missing_a_rank_is_found_after_a_rank_blocked_in_a_send():
    """Rank 0 (listed first) is blocked in a send to rank 3, which stopped after #1; ranks 1-2
    wait in #2 for ranks 0 and 3. Both the unmatched send and #2's missing ranks are found."""
    world = {"0": ("default_pg", range(4))}

    waiting = [_completed(1), entry(seq=2, backend="nccl", state="scheduled")]
    result = run({0: nccl([_completed(1), p2p("send", 0, 3, 1, state="scheduled")], world), 1: nccl(waiting, world),
                  2: nccl(waiting, world), 3: nccl([_completed(1)], world)})
    assert result.culprit_ranks == (3,)
    assert [(f.kind, f.ranks) for f in result.findings] == [("p2p_unmatched", (3,)), ("missing_ranks", (0, 3))]
    assert _missing(result, "0", 2).detail.startswith("ranks 0,3 never issued it; ranks 1-2 did")


def test_an_op_nobody_waits_in_is_found_in_a_group_after_one_whose_first_gap_someone_waits_in():
    """Rank 3 stopped after the world's #1: ranks 0-2 wait for it in #2 (a finding from the graph),
    and it never issued x's #1, which rank 2 issued before the world's #2 and nobody waits in."""
    groups = {"0": ("default_pg", range(4)), "1": ("x", (2, 3))}
    result = _job(groups, {0: "00", 1: "00", 2: "010", 3: "0"})
    assert result.culprit_ranks == (3,)
    assert _missing(result, "1", 1).detail == "rank 3 never issued it, though rank 2 did and nobody is waiting in it"


def test_a_rank_blocked_in_an_op_without_a_name_is_said_to_be_in_an_unnamed_op():
    """Ranks 0-2 issued #2 with an empty profiling name; rank 3 stopped at #1."""
    result = run({r: make_dump([entry(seq=1), entry(seq=2, op="", backend="")][: 2 if r < 3 else 1]) for r in range(4)})
    assert result.culprit_ranks == (3,)
    assert result.evidence[0] == "majority: 3 of 4 members issued unnamed op #2 of default_pg; rank 3 never did and waits for nobody"


def test_of_four_ranks_that_never_issued_an_op_each_last_op_is_said_with_none_counted():
    """Ranks 0-4 issued #2, ranks 5-8 stopped at #1: four last ops, all said, nothing left over."""
    result = run({r: make_dump(ops(2 if r < 5 else 1)) for r in range(9)})
    assert result.culprit_ranks == (5, 6, 7, 8)
    assert _missing(result, "0", 2).detail.startswith(
        "ranks 5-8 never issued it; ranks 0-4 did (rank 5's last op in default_pg is #1; rank 6's last op in default_pg "
        "is #1; rank 7's last op in default_pg is #1; rank 8's last op in default_pg is #1) (")


# ---------------------------------------------------------------------------- send/recv pairing (p2p.py)
def _p2p(kind: str, me: int, peer: int, seq: int, state="scheduled", backend="nccl") -> dict:
    """A send or recv; `backend` other than nccl: one that records no completion (its ops stay scheduled)."""
    op = p2p(kind, me, peer, seq, state=state)
    return {**op, "profiling_name": op["profiling_name"].replace("nccl:", f"{backend}:", 1)}


PAIR, TRIO, FOUR = ({"0": ("default_pg", range(n))} for n in (2, 3, 4))


def test_a_recv_whose_peer_posted_no_send_at_all_is_unmatched():
    result = run({0: nccl([_completed(1)], PAIR), 1: nccl([_completed(1), _p2p("recv", 1, 0, 1)], PAIR)})
    assert result.culprit_ranks == (0,)
    (finding,) = result.findings
    assert (finding.kind, finding.ranks) == ("p2p_unmatched", (0,))
    assert finding.detail.startswith("rank 1's recv 1<-0 (p2p #1) has no matching send on rank 0 (1 unmatched)")


def test_a_pair_whose_completion_only_one_side_records_is_matched_from_the_first_op():
    """Rank 0 (NCCL) completed one send and waits in a second; rank 1's backend records no
    completion and shows one recv. Its completed send cannot be set aside as matched (rank 1's
    recv may be its partner): the second send is the one without a recv."""
    result = run({0: nccl([_p2p("send", 0, 1, 1, state="completed"), _p2p("send", 0, 1, 2)], PAIR),
                  1: nccl([_p2p("recv", 1, 0, 1, backend="mybackend")], PAIR)})
    assert result.culprit_ranks == (1,)
    (finding,) = result.findings
    assert finding.detail.startswith("rank 0's send 0->1 (p2p #2) has no matching recv on rank 1 (1 unmatched)")


def test_a_pair_one_of_whose_buffers_wrapped_is_not_checked_without_completion_and_the_next_pair_is():
    """No rank records completion. Rank 0's buffer wrapped: it holds its last two sends to rank 1,
    which shows all six recvs (pairing them from the first would leave four recvs unmatched).
    Rank 2's send to rank 3, which posted nothing, is checked all the same."""
    def untracked(*op):
        return _p2p(*op, backend="mybackend")
    result = run({0: nccl([untracked("send", 0, 1, 5), untracked("send", 0, 1, 6)], FOUR, first_record=100),
                  1: nccl([untracked("recv", 1, 0, seq) for seq in range(1, 7)], FOUR),
                  2: nccl([untracked("send", 2, 3, 1)], FOUR), 3: nccl([], FOUR)})
    assert "p2p 0->1 in default_pg not checked: a buffer wrapped and completion is not recorded" in result.warnings
    assert result.culprit_ranks == (3,)
    assert [(f.kind, f.op, f.ranks) for f in result.findings] == [("p2p_unmatched", "send 2->3", (3,))]


def test_a_send_to_a_rank_receiving_from_any_is_taken_though_another_rank_sends_elsewhere():
    """Rank 0 sends to rank 2, which receives from any rank; rank 1 sends to rank 3, another rank:
    rank 0 is the only sender rank 2's receive can take, and nothing is unmatched."""
    any_recv = entry(op="recv 2<-?", seq=0, p2p_seq=1, is_p2p=True, backend="mybackend", sizes=((4,),))

    def untracked(*op):
        return _p2p(*op, backend="mybackend")
    result = run({0: nccl([untracked("send", 0, 2, 1)], FOUR), 1: nccl([untracked("send", 1, 3, 1)], FOUR),
                  2: nccl([any_recv], FOUR), 3: nccl([untracked("recv", 3, 1, 1)], FOUR)})
    assert (result.verdict, result.findings) == ("clean", ())


def test_a_pair_with_a_rank_without_a_dump_is_passed_over_and_the_next_pair_checked():
    """Rank 0 left no dump: rank 1's recv from it is not checked; rank 1's later send to rank 2,
    which posted no recv, is."""
    result = run({1: nccl([_completed(1), _p2p("recv", 1, 0, 1, state="completed"), _p2p("send", 1, 2, 2)], TRIO),
                  2: nccl([_completed(1)], TRIO)})
    assert result.culprit_ranks == (2,)
    (finding,) = result.findings
    assert finding.detail.startswith("rank 1's send 1->2 (p2p #2) has no matching recv on rank 2 (1 unmatched)")


# ---------------------------------------------------------------------------- the graph's components (waitgraph.py)
def test_every_op_of_a_graph_is_in_one_component_when_a_later_op_was_reached_from_an_earlier_one():
    """Op a waits for rank 1, blocked in op b, which waits for rank 2; op c waits for ranks 2 and 3.
    The search from a reaches b, which is passed over as a start, and rank 2, whose component is
    finished before c reaches it again: every node still has its own component (no cycle)."""
    a, b, c = ("coll", "a", 1), ("coll", "b", 1), ("coll", "c", 1)
    graph = WaitGraph(views={}, blockers={}, unmatched=set(), dumps={}, tracking={})
    graph.waits_on = {a: (1,), b: (2,), c: (2, 3)}
    graph.op_of = {1: b}
    components = graph.components()
    every_node_alone = [[("op", a)], [("op", b)], [("op", c)], [("rank", 1)], [("rank", 2)], [("rank", 3)]]
    assert sorted(map(sorted, components)) == sorted(every_node_alone)
