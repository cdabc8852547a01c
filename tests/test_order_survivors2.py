"""Program order (analysis/order.py, `ProgramOrder._votes`) on the inputs the mutation run's
survivors named (docs/testing.md, "Result by part (session 30)") and no test built: a rank in a
chain of waits, blocked in one op while another waits for it in an op it never issued, where a
rank that reached only one of the two is listed before the rank that issued both and shows their
order. (Votes split evenly between two orders: test_waitgraph_survivors.py, votes "split".)

The dumps are SYNTHETIC gloo-layout dumps written from each rank's program (programs_dumps): one
character a collective, the name of its group."""

from __future__ import annotations

from test_waitgraph_survivors import _job


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
