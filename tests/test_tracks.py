"""How one rank's entries become its track in a group, read through the verdict: batched p2p ops
and the terminator that gives them their state, coalesced groups recorded by their terminator
alone (before PyTorch 2.7), p2p names that name no member, and more distinct kinds or states
than fit in a byte. Synthetic NCCL dumps: gloo records no p2p ops and no completion."""

from __future__ import annotations

import pytest

from conftest import entry, make_dump, ops
from test_matcher import nccl, p2p, run

PAIR, TRIO = {"0": ("default_pg", range(2))}, {"0": ("default_pg", range(3))}


def _coll(seq, state="completed", op="all_reduce"):
    sizes = () if op == "coalesced" else ((4,),)
    return entry(seq=seq, op=op, backend="nccl", state=state, sizes=sizes)


def _batch_end(seq, p2p_seq, state="completed"):
    """The terminator of a batch of p2p ops: not a p2p op itself, its collective seq id not bumped."""
    return entry(seq=seq, op="coalesced", backend="nccl", state=state, sizes=(), p2p_seq=p2p_seq)


def _stuck_in_2_on_both(result):
    assert result.verdict == "stuck", result.headline
    assert result.headline.startswith("STUCK: ranks 0-1 never completed all_reduce #2 of default_pg, which every member issued")
    assert result.findings[0].kind == "not_completed"


@pytest.mark.parametrize("before", [[_coll(1)], []], ids=["after a collective", "first in the buffer"])
def test_a_batched_send_takes_the_state_of_its_batchs_terminator(before):
    # rank 0 sent inside a batch (its send entry stays "scheduled"; the batch's terminator
    # completed), rank 1 received it plainly; both then wait in all_reduce #2
    last = len(before)
    sent = before + [p2p("send", 0, 1, 1, state="scheduled"), _batch_end(last, 1), _coll(last + 1, "scheduled")]
    received = before + [p2p("recv", 1, 0, 1), _coll(last + 1, "scheduled")]
    result = run({0: nccl(sent, PAIR), 1: nccl(received, PAIR)})
    if before:
        _stuck_in_2_on_both(result)
    else:
        assert result.verdict == "stuck" and result.findings[0].collective_seq_id == 1, result.headline
    assert not any(f.kind == "p2p_unmatched" for f in result.findings)


def test_a_rank_past_a_completed_batch_is_blocked_in_its_next_op_not_in_the_batch():
    # as above, and ranks 2-4 went on to #3 (their #2 completed): they wait for ranks 0-1, each
    # of which is described by the op it is blocked in, all_reduce #2 (the batched send completed)
    five = {"0": ("default_pg", range(5))}
    sent = [_coll(1), p2p("send", 0, 1, 1, state="scheduled"), _batch_end(1, 1), _coll(2, "scheduled")]
    received = [_coll(1), p2p("recv", 1, 0, 1), _coll(2, "scheduled")]
    ahead = [_coll(1), _coll(2), _coll(3, "scheduled")]
    result = run({0: nccl(sent, five), 1: nccl(received, five), 2: nccl(ahead, five), 3: nccl(ahead, five), 4: nccl(ahead, five)})
    assert result.culprit_ranks == (0, 1)
    assert result.headline.endswith("; ranks 0-1 are blocked in all_reduce #2 of default_pg, which every member joined")


def test_a_send_whose_batch_never_completed_is_still_pending():
    sent = [_coll(1), p2p("send", 0, 1, 1, state="completed"), _batch_end(1, 1, state="scheduled")]
    result = run({0: nccl(sent, PAIR), 1: nccl([_coll(1)], PAIR)})
    assert result.culprit_ranks == (1,)
    assert result.findings[0].detail.startswith("rank 0's send 0->1 (p2p #1) has no matching recv on rank 1 (1 unmatched)")


def test_a_coalesced_group_recorded_by_its_terminator_alone_after_a_p2p_op_is_a_collective():
    # before PyTorch 2.7 a coalesced group of collectives shows only its terminator, with its own
    # (bumped) seq id: after a send it must not be read as the end of a p2p batch. Ranks 0-1 send
    # and receive, then run the coalesced group as #2; rank 2 calls all_reduce as #2 instead
    def rank(me):
        mine = [p2p("send", 0, 1, 1)] if me == 0 else [p2p("recv", 1, 0, 1)] if me == 1 else []
        return [_coll(1)] + mine + [_coll(2, op="all_reduce" if me == 2 else "coalesced"), _coll(3, "scheduled")]
    result = run({r: nccl(rank(r), TRIO) for r in range(3)})
    assert result.culprit_ranks == (2,)
    assert (result.findings[0].kind, result.findings[0].collective_seq_id) == ("type_mismatch", 2)


def test_a_coalesced_group_first_in_a_buffer_is_compared_like_any_collective():
    dumps = {r: make_dump(ops(2)) for r in range(4)}
    dumps[0] = make_dump([entry(seq=1, op="coalesced", sizes=())] + ops(1, start=2))
    result = run(dumps)
    assert result.culprit_ranks == (0,)
    assert (result.findings[0].kind, result.findings[0].collective_seq_id) == ("type_mismatch", 1)


def test_p2p_ops_that_name_no_member_are_noted_and_not_matched():
    odd = [entry(op="send 0->7", seq=0, p2p_seq=1, is_p2p=True, backend="nccl", sizes=((4,),)),
           entry(op="send to whoever", seq=0, p2p_seq=2, is_p2p=True, backend="nccl", sizes=((4,),))]
    result = run({0: nccl([_coll(1)] + odd, PAIR), 1: nccl([_coll(1)], PAIR)})
    assert "rank 0: p2p op 'send 0->7' in default_pg names no rank of the group; not matched" in result.warnings
    assert "rank 0: p2p op 'send to whoever' in default_pg names no rank of the group; not matched" in result.warnings
    assert not any(f.kind == "p2p_unmatched" for f in result.findings)


def test_more_distinct_kinds_than_fit_in_a_byte_are_compared_all_the_same():
    # 256 sizes on every rank, and rank 2's odd one: 257 distinct kinds in the dump set
    def job(rank):
        return [entry(seq=s, sizes=((1000 if rank == 2 and s == 100 else s,),)) for s in range(1, 257)]
    result = run({r: make_dump(job(r)) for r in range(4)})
    assert result.culprit_ranks == (2,)
    assert (result.findings[0].kind, result.findings[0].collective_seq_id) == ("size_mismatch", 100)


def test_more_distinct_states_than_fit_in_a_byte_are_read_all_the_same():
    # a hostile or foreign producer: 257 distinct state strings, one per op, and rank 3 skips the last
    def job(rank):
        return [entry(seq=s, state=f"state {s}") for s in range(1, 258 if rank != 3 else 257)]
    result = run({r: make_dump(job(r)) for r in range(4)})
    assert result.culprit_ranks == (3,)
    assert (result.findings[0].kind, result.findings[0].collective_seq_id) == ("missing_ranks", 257)


def test_a_p2p_op_naming_no_member_before_the_op_a_rank_is_blocked_in_is_passed_over():
    # rank 0's unreadable send is the only entry of its group pp (no track there), and comes before all_reduce #2
    groups = {"0": ("default_pg", range(2)), "1": ("pp", (0, 1))}
    odd = entry(op="send 0->7", pg="1", desc="pp", seq=0, p2p_seq=1, is_p2p=True, backend="nccl", sizes=((4,),))
    result = run({0: nccl([_coll(1), odd, _coll(2, "scheduled")], groups), 1: nccl([_coll(1), _coll(2, "scheduled")], groups)})
    _stuck_in_2_on_both(result)
    assert {r: e.collective_seq_id for r, e in result.culprit_entries.items()} == {0: 2, 1: 2}
