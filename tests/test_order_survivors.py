"""Program order and sibling groups (analysis/order.py) on the inputs the mutation run's survivors
named and no test built: a rank of a deadlock that is also awaited in a send, one that skipped two
ops of the program, sibling groups counted as one op of the program by the majority (and groups
without a desc not), a sibling group with a member whose buffer wrapped past it, a deadlocked rank
whose own history keeps its step, and one its history blames while the other ranks clear it."""

from __future__ import annotations

from test_matcher import nccl, p2p, run
from test_waitgraph_survivors import _job, programs_dumps

# the world, and two tp groups: ranks 0-1 issue tp #1 and then the world's #1 (the program's
# order); rank 2 waits in its tp #1 for rank 3, which skipped it and waits in the world's #1
TP_THEN_WORLD = {"0": ("default_pg", range(4)), "1": ("tp", (0, 1)), "2": ("tp", (2, 3))}
TP_THEN_WORLD_PROGRAMS = {0: "10", 1: "10", 2: "2", 3: "0"}
RANK3_SKIPPED_TP = ("program order: ranks outside the cycle issued all_reduce #1 of tp before all_reduce #1 of "
                    "default_pg, which rank 3 is blocked in")


def test_a_deadlocked_rank_also_awaited_in_a_send_is_judged_by_the_collectives_alone():
    """Rank 3 skipped tp #1 (a deadlock with rank 2, which waits in it); rank 4 is blocked in a
    send to rank 3, which posted no recv. The send says nothing of the collectives' order: the
    ranks outside the cycle, which issued tp #1 before the world's #1, name rank 3."""
    groups = {**TP_THEN_WORLD, "3": ("p", (3, 4))}
    dumps = programs_dumps(groups, TP_THEN_WORLD_PROGRAMS)
    send = p2p("send", 1, 0, 1, state="scheduled")  # local ranks of p: rank 4 to rank 3
    dumps[4] = nccl([{**send, "process_group": ("3", "p"), "pg_id": 3}], groups)
    result = run(dumps)
    assert result.culprit_ranks == (3,)
    assert result.headline == ("DESYNC: rank 3 never joined all_reduce #1 of tp (1 rank waits in it); "
                               "rank 3 is blocked in all_reduce #1 of default_pg")
    assert result.evidence[0] == RANK3_SKIPPED_TP
    assert [(f.kind, f.ranks) for f in result.findings] == [("missing_ranks", (3,)), ("p2p_unmatched", (3,)),
                                                             ("missing_ranks", (2,))]


def test_a_deadlocked_rank_that_skipped_two_ops_is_said_to_have_skipped_the_first_of_them_in_the_program():
    """The program is x #1, tp #1, the world's #1. Rank 3 skipped both x #1 (rank 4 waits in it)
    and tp #1 (rank 2 waits in it) and waits in the world's #1. Rank 0, in both, issued x's before
    tp's: x #1 is the op rank 3 left the program at, though rank 2 (listed first) waits in tp #1."""
    groups = {**TP_THEN_WORLD, "3": ("x", (3, 4)), "4": ("x", (0, 5))}
    result = _job({**groups, "0": ("default_pg", range(6))}, {0: "410", 1: "10", 2: "2", 3: "0", 4: "3", 5: "40"})
    assert result.culprit_ranks == (3,)
    assert result.headline == ("DESYNC: rank 3 never joined all_reduce #1 of x (1 rank waits in it); "
                               "rank 3 is blocked in all_reduce #1 of default_pg")
    assert result.evidence == (("program order: ranks outside the cycle issued all_reduce #1 of x before all_reduce #1 of "
                                "default_pg, which rank 3 is blocked in"),)


def test_two_sibling_groups_waiting_in_one_seq_count_as_one_op_for_the_majority_of_a_deadlock():
    """The program is tp #1, then the world's #1; ranks 2 and 5 skipped their tp #1. Ranks 0-1
    and 3-4 wait in the two tp groups' #1, ranks 2 and 5 in the world's: four ranks wait in one
    op of the program (no rank outside the deadlock shows the order), two in the other."""
    groups = {"0": ("default_pg", range(6)), "1": ("tp", (0, 1, 2)), "2": ("tp", (3, 4, 5))}
    result = _job(groups, {0: "1", 1: "1", 2: "0", 3: "2", 4: "2", 5: "0"})
    assert result.culprit_ranks == (2, 5)
    assert result.evidence[0] == ("majority: ranks 0-1,3-4 wait in all_reduce #1 of tp (and its sibling groups), more "
                                  "than in any other op of the cycle")


def test_groups_without_a_desc_are_no_siblings_and_a_deadlock_of_three_ops_waited_in_alike_is_undecided():
    """As above, the groups without a desc: nothing says the two are one op of the program, and
    two ranks wait in each of three ops."""
    groups = {"0": ("default_pg", range(6)), "1": ("undefined", (0, 1, 2)), "2": ("undefined", (3, 4, 5))}
    result = _job(groups, {0: "1", 1: "1", 2: "0", 3: "2", 4: "2", 5: "0"})
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())
    assert result.evidence == (("undecided: ranks 3-4 wait in all_reduce #1 of pg 2 for rank 5; ranks 2,5 wait in all_reduce "
                                "#1 of default_pg for ranks 0-1,3-4; ranks 0-1 wait in all_reduce #1 of pg 1 for rank 2: they "
                                "issued ops in different orders and neither their own histories nor any other rank shows "
                                "which order is right"),)


def test_a_sibling_group_with_a_member_whose_buffer_wrapped_past_it_does_not_break_a_tie():
    """Rank 0 issued dp #2, rank 1 stopped at #1: a tie. In the sibling dp group rank 2 issued #2,
    and rank 3's buffer wrapped past the group: whether that group reached #2 is unknown, and
    nothing breaks the tie."""
    groups = {"0": ("default_pg", range(4)), "1": ("dp", (0, 1)), "2": ("dp", (2, 3))}
    result = _job(groups, {0: "011", 1: "01", 2: "022", 3: "0"}, wrapped=(3,))
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())
    assert result.headline == ("INCONCLUSIVE: rank 0 issued all_reduce #2 of dp, rank 1 never did and waits for nobody: as "
                               "many members ran ahead as stayed behind, and no sibling group shows which is right")


# ranks 0-1 issue a, then b, three steps; then rank 0 issues a #4 and rank 1, which skipped it, b #4
A_THEN_B = {"1": ("a", (0, 1)), "2": ("b", (0, 1))}
RANK1_SKIPPED_A = {0: "1212121", 1: "1212122"}


def test_a_deadlocked_rank_whose_own_history_keeps_its_step_is_not_said_to_be_unordered():
    """Nothing outside the deadlock shows the order of a and b, but rank 1's own history does:
    it skipped a #4. Rank 0, blocked in a #4 with b after each a in its buffer, is where its
    program has it, and nothing is said of it."""
    result = _job(A_THEN_B, RANK1_SKIPPED_A)
    assert result.culprit_ranks == (1,)
    assert result.headline == ("DESYNC: rank 1 never joined all_reduce #4 of a (1 rank waits in it); "
                               "rank 1 is blocked in all_reduce #4 of b")
    assert result.evidence == (("own history: rank 1's buffer shows all_reduce of a between every two all_reduce of b in "
                                "its last 3 steps, and not before its latest one"),)


def test_a_rank_its_own_history_blames_and_the_other_ranks_show_in_order_is_undecided():
    """As above, and the sibling a and b groups of ranks 2-3 issued b #4 before a #4: what the
    ranks outside the deadlock show clears rank 1, which its own history blames."""
    groups = {**A_THEN_B, "3": ("a", (2, 3)), "4": ("b", (2, 3))}
    result = _job(groups, {**RANK1_SKIPPED_A, 2: "34343443", 3: "34343443"})
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())
    assert result.evidence == (("undecided: rank 1 waits in all_reduce #4 of b for rank 0; rank 0 waits in all_reduce #4 "
                                "of a for rank 1: their own histories point at rank 1, whom the ranks outside the cycle "
                                "show issuing their ops in order; the rules disagree"),)
