"""Program order (analysis/order.py, `ProgramOrder._votes`) on the inputs the mutation run's
survivors named (docs/testing.md, "Result by part (session 30)") and no test built: two ranks
outside a culprit whose buffers show two ops in opposite orders (votes split evenly: a tie, no
first op, whichever of the two is asked first); and a rank in a chain of waits, blocked in one op
while another waits for it in an op it never issued, where a rank that reached only one of the
two is listed before the rank that issued both and shows their order.

The dumps are SYNTHETIC gloo-layout dumps written from each rank's program (programs_dumps): one
character a collective, the name of its group."""

from __future__ import annotations

import pytest
from test_waitgraph_survivors import NO_COLLECTIVE, _job


@pytest.mark.parametrize("most_wait_in", ["a", "b"])
def test_a_culprit_missing_from_two_ops_other_ranks_issued_in_opposite_orders_is_named_by_the_op_most_wait_in(most_wait_in):
    """Rank 1 issued neither a's #1 nor b's #1. Ranks 2 and 3, members of both, issued both (their
    ops are posted without waiting): rank 2 a's first, rank 3 b's first, one vote each way, so
    nothing shows which op rank 1 left the program at. The culprit is said where most ranks wait
    (rank 5 joins that group), whichever of the two ops that is, and no program order is said."""
    a, b = ((0, 1, 2, 3, 5), (1, 2, 3, 4)) if most_wait_in == "a" else ((0, 1, 2, 3), (1, 2, 3, 4, 5))
    groups = {"0": ("default_pg", range(6)), "1": ("a", a), "2": ("b", b)}
    result = _job(groups, {0: "01", 1: "0", 2: "012", 3: "021", 4: "02", 5: "01" if 5 in a else "02"})
    assert result.culprit_ranks == (1,)
    assert result.headline == (f"DESYNC: rank 1 never joined all_reduce #1 of {most_wait_in} (3 ranks wait in it); "
                               "rank 1 is in no collective")
    assert result.evidence == ((f"majority: 4 of 5 members issued all_reduce #1 of {most_wait_in}; rank 1 never did and "
                                "waits for nobody"), NO_COLLECTIVE)


def test_a_rank_in_a_chain_that_skipped_the_op_it_is_awaited_in_is_named_by_the_rank_that_issued_both():
    """Groups k {0,1} and b {1,2}, and their siblings k {3,4} and b {4,5} (same desc and size: the
    same program). Rank 1 skipped k #1 and is blocked in b #1, waiting for rank 2, which has not
    issued b #1 and waits for nobody; rank 0 waits in k #1 for rank 1. Rank 4 issued its k #1 and
    then its b #1: k's comes first in the program, and rank 1 left it. Rank 1 (which reached b #1
    only) and rank 2 (in b only) are listed before rank 4 and say nothing of the order; rank 4's
    word names rank 1. Rank 2 never joined b #1 either: two desyncs, which caused which untold."""
    groups = {"0": ("default_pg", range(6)), "1": ("k", (0, 1)), "2": ("b", (1, 2)), "3": ("k", (3, 4)), "4": ("b", (4, 5))}
    result = _job(groups, {0: "01", 1: "02", 2: "0", 3: "03", 4: "034", 5: "04"})
    assert (result.verdict, result.culprit_ranks) == ("desync", (1, 2))
    assert result.headline == ("DESYNC: rank 1 never joined all_reduce #1 of k (1 rank waits in it); rank 1 is blocked in "
                               "all_reduce #1 of b; rank 2 never joined all_reduce #1 of b (2 desyncs; which caused which "
                               "cannot be told)")
    assert result.evidence[0] == ("program order: the other ranks issued all_reduce #1 of k before all_reduce #1 of b, which "
                                  "rank 1 is blocked in")
