"""Send/recv pairing (analysis/p2p.py) on the inputs the mutation run's survivors named
(docs/testing.md, "Result by part (session 30)" and session 33's) and no test built: a stuck
pair whose sizes differ while its dtype is one, or whose dtypes differ; a recv posted in a
batch, settled by its batch's state, ahead of a lone recv on the same link; a link one end of
which records no completion.

The dumps are SYNTHETIC NCCL dumps (conftest's entries; send/recv names in NCCL's layout): gloo
records no send or recv, so it cannot write them."""

from __future__ import annotations

from conftest import entry
from test_matcher import nccl, p2p, run

PAIR = {"0": ("default_pg", (0, 1))}
TWO_DONE = [entry(seq=s, backend="nccl", state="completed") for s in (1, 2)]


def test_a_stuck_pair_whose_sizes_differ_in_one_dtype_is_a_size_mismatch_not_a_hang_below_pytorch():
    """Ranks 0 and 1 completed two all_reduces; then rank 0 sends 4 floats to rank 1, which posted
    a recv of 8 floats: both started, neither completed (NCCL waits for the bytes it was told
    of). The pair disagrees on the size: that is the finding, and a pair cannot tell which side
    is wrong, so nobody is named; it is not a transfer stuck below PyTorch."""
    result = run({0: nccl(TWO_DONE + [p2p("send", 0, 1, 1, state="started", sizes=((4,),))], PAIR),
                  1: nccl(TWO_DONE + [p2p("recv", 1, 0, 1, state="started", sizes=((8,),))], PAIR)})
    detail = "rank 0 sends [[4]] Float but rank 1 receives [[8]] Float; a pair cannot tell which side is wrong"
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())
    assert [(f.kind, f.detail, f.decided) for f in result.findings if f.kind.endswith("mismatch")] == [
        ("size_mismatch", detail, False)]
    assert result.headline == f"INCONCLUSIVE: size mismatch in send 0->1 #1 of default_pg: {detail}"


def _batch(ops: list[dict], p2p_seq: int, state: str, seq: int) -> list[dict]:
    """ops posted in one batch (batch_isend_irecv): one p2p seq id, then the batch's end, which
    carries its state (a 'coalesced' entry with the last collective's seq id)."""
    return ([{**op, "p2p_seq_id": p2p_seq} for op in ops]
            + [entry(seq=seq, op="coalesced", sizes=(), backend="nccl", p2p_seq=p2p_seq, state=state)])


def test_a_batched_recv_settled_by_its_batch_leaves_the_lone_recv_after_it_to_the_open_send():
    """A pipeline 0 -> 1 -> 2 after two world all_reduces. Rank 0 sent to rank 1 twice, the first
    completed, the second started. Rank 1 posted a batch (recv from 0, send to 2), started, then
    a lone recv from 0, scheduled. Rank 2 never posted the recv of rank 1's send and went on to
    world all_reduce #3 alone. The batch is started because its send waits for rank 2; its recv
    started together with rank 0's open send would have completed with it, so it is done (with
    rank 0's first send) and rank 0's open send pairs with rank 1's lone recv, which rank 1's
    stream holds behind the batch. Rank 2 is the culprit, and rank 1 posted every recv it owes
    rank 0."""
    world = {"0": ("default_pg", (0, 1, 2))}
    dumps = {0: nccl(TWO_DONE + [p2p("send", 0, 1, 1), p2p("send", 0, 1, 2, state="started")], world),
             1: nccl(TWO_DONE + _batch([p2p("recv", 1, 0, 1), p2p("send", 1, 2, 1)], 1, "started", 2)
                     + [p2p("recv", 1, 0, 2, state="scheduled")], world),
             2: nccl(TWO_DONE + [entry(seq=3, backend="nccl", state="started")], world)}
    result = run(dumps)
    assert (result.verdict, result.culprit_ranks) == ("desync", (2,))
    (unmatched,) = [f for f in result.findings if f.kind == "p2p_unmatched"]
    assert unmatched.ranks == (2,)
    assert unmatched.detail.startswith("rank 1's send 1->2 (p2p #1) has no matching recv on rank 2 (1 unmatched)")


# session 33: p2p.py mutated whole, 245 of 255 killed; these for the survivors that were not equivalent
def test_a_stuck_pair_whose_dtypes_differ_is_a_dtype_mismatch_naming_nobody_of_the_pair():
    """As the size mismatch above, but the sizes agree and rank 1 receives halves where rank 0
    sends floats: a dtype mismatch, with nobody named (the pair's members expected)."""
    half = {"input_dtypes": ["Half"], "output_dtypes": ["Half"]}
    result = run({0: nccl(TWO_DONE + [p2p("send", 0, 1, 1, state="started")], PAIR),
                  1: nccl(TWO_DONE + [{**p2p("recv", 1, 0, 1, state="started"), **half}], PAIR)})
    (found,) = [f for f in result.findings if f.kind.endswith("mismatch")]
    assert (found.kind, found.ranks, found.expected_ranks, found.p2p_seq_id, found.op, found.decided) == (
        "dtype_mismatch", (), (0, 1), 1, "send 0->1", False)
    assert found.detail == "rank 0 sends [[4]] Float but rank 1 receives [[4]] Half; a pair cannot tell which side is wrong"


def test_where_one_end_of_a_link_records_no_completion_its_ops_pair_in_the_order_posted():
    """Rank 0 (NCCL: it records completion) completed two sends to rank 1; rank 1's dump records
    no completion (its recvs only scheduled, no backend that tracks it): the two recvs are the
    two sends' partners, paired in order, not two recvs left open behind sends no longer shown."""
    untracked = [entry(op="recv 1<-0", seq=0, p2p_seq=s, is_p2p=True, backend="", sizes=((4,),)) for s in (1, 2)]
    result = run({0: nccl([p2p("send", 0, 1, 1), p2p("send", 0, 1, 2)], PAIR), 1: nccl(untracked, PAIR)})
    assert [f for f in result.findings if f.kind.startswith("p2p") or f.kind.endswith("mismatch")] == []
    # rank 0's buffer wrapped (its records from 5 on): the link cannot be paired; said, never a finding
    wrapped = run({0: nccl([p2p("send", 0, 1, 1), p2p("send", 0, 1, 2)], PAIR, first_record=5), 1: nccl(untracked, PAIR)})
    assert [f for f in wrapped.findings if f.kind.startswith("p2p") or f.kind.endswith("mismatch")] == []
    assert "p2p 0->1 in default_pg not checked: a buffer wrapped and completion is not recorded" in wrapped.warnings


def test_a_batched_recv_done_with_the_open_send_leaves_the_next_recv_on_the_link():
    """_done_in_batch: an open send alone and an open recv posted in a batch, both started, would
    have completed together: the batched recv is done, and the send's partner is the next recv,
    which stays (one recv taken, not two)."""
    from frtrace.analysis.align import P2POp
    from frtrace.analysis.p2p import _done_in_batch

    send = P2POp(None, 5, "send", 0, 1, "started")
    batched, lone = P2POp(None, 3, "recv", 0, 1, "started", batched=True), P2POp(None, 4, "recv", 0, 1, "started")
    assert _done_in_batch([send], [batched, lone]) == ([send], [lone])
    assert _done_in_batch([P2POp(None, 5, "send", 0, 1, "started", batched=True), send], [lone]) == ([send], [lone])
