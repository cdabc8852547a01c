"""Tracks and their reading (analysis/align.py) on the inputs the mutation run's survivors named
and no test built: a p2p name whose peer is the first local rank past the group, and a group
lined up anew whose member's track is one of units (a coalesced group in it), read for the
latest op it completed; a coalesced group recorded by its terminator alone, first in a buffer
that holds p2p ops or right after a p2p batch's terminator; ranks said in exactly eight runs.

Every dump here is SYNTHETIC: NCCL's layout (completion recorded), built with conftest's factory."""

from __future__ import annotations

import pytest
from conftest import entry, make_dump
from test_matcher import nccl, p2p, run
from test_moments_survivors import _stale_in_lined_up_world

PAIR = {"0": ("default_pg", range(2))}


@pytest.mark.parametrize("name", ["send 0->2", "recv 2<-?"])
def test_a_p2p_op_naming_the_first_local_rank_past_a_pair_names_no_member(name):
    """Local ranks of a pair are 0 and 1: local rank 2 is nobody in it."""
    odd = entry(op=name, seq=0, p2p_seq=1, is_p2p=True, backend="nccl", sizes=((4,),))
    done = entry(seq=1, backend="nccl", state="completed")
    result = run({0: nccl([done, odd], PAIR), 1: nccl([done], PAIR)})
    assert f"rank 0: p2p op '{name}' in default_pg names no rank of the group; not matched" in result.warnings
    assert not any(f.kind == "p2p_unmatched" for f in result.findings)


def _world(states: str, coalesced_at: int, members: str = "") -> dict:
    """World ops #1, #2, ... in the states given (c: completed, s: started), #`coalesced_at` a
    coalesced group of two all_reduces (in state `members`, else the group's) and its terminator
    (which carries the group's state)."""
    full = {"c": "completed", "s": "started"}
    ops = []
    for seq, state in enumerate(states, 1):
        if seq == coalesced_at:
            ops += [entry(seq=seq, backend="nccl", state=full[members or state]) for _ in range(2)]
            ops.append(entry(seq=seq, op="coalesced", backend="nccl", state=full[state], sizes=()))
        else:
            ops.append(entry(seq=seq, backend="nccl", state=full[state]))
    return make_dump(ops)


def test_a_lined_up_group_whose_track_holds_a_coalesced_group_is_read_for_its_latest_completed_op():
    """Rank 0 completed #1-#3 (#2 a coalesced group, so its track is one of units) and holds #4
    in flight; rank 1 ends at #1: #3, which every member joined, shows rank 1's dump older."""
    assert _stale_in_lined_up_world({0: _world("cccs", 2), 1: _world("c", 0)}) == {1: (1, 3, 0, "completed")}


def test_a_lined_up_group_whose_latest_completed_op_is_a_coalesced_group_is_read_by_its_terminator():
    """As above, #3 the coalesced group, its all_reduces left `started` and its terminator
    `completed`: the terminator's state is the group's."""
    assert _stale_in_lined_up_world({0: _world("cccs", 3, members="s"), 1: _world("c", 0)}) == {1: (1, 3, 0, "completed")}


TRIO = {"0": ("default_pg", range(3))}


def _nccl_op(seq: int, op: str = "all_reduce", state: str = "completed") -> dict:
    return entry(seq=seq, op=op, backend="nccl", state=state, sizes=() if op == "coalesced" else ((4,),))


def test_a_coalesced_group_recorded_by_its_terminator_alone_first_in_a_buffer_with_p2p_ops_is_a_collective():
    """Before PyTorch 2.7 a coalesced group of collectives shows only its terminator, with its own
    seq id. Ranks 0-1 ran one as #1, the first entry of their buffers, then a send and its recv,
    then #2; rank 2 called all_reduce as #1 instead. Nothing came before the terminator, so it
    ends no p2p batch: #1 is compared, and rank 2's op differs from the two others'."""
    def rank(me: int) -> list[dict]:
        mine = [p2p("send", 0, 1, 1)] if me == 0 else [p2p("recv", 1, 0, 1)] if me == 1 else []
        return [_nccl_op(1, "all_reduce" if me == 2 else "coalesced")] + mine + [_nccl_op(2, state="scheduled")]

    result = run({r: nccl(rank(r), TRIO) for r in range(3)})
    assert result.culprit_ranks == (2,)
    assert (result.findings[0].kind, result.findings[0].collective_seq_id) == ("type_mismatch", 1)


def test_a_coalesced_group_recorded_by_its_terminator_alone_right_after_a_p2p_batch_is_a_collective():
    """Ranks 0-1 begin their buffers with a batch of one p2p op (rank 0's send, rank 1's recv),
    ended by its terminator (its seq id not bumped: 0), then run a coalesced group of collectives
    recorded by its terminator alone (before PyTorch 2.7) as #1; rank 2 called all_reduce as #1
    instead. The batch's terminator ended the batch: the next terminator is #1, compared, and
    rank 2's op differs from the two others'."""
    def batch_end(p2p_seq: int) -> dict:
        return entry(seq=0, op="coalesced", backend="nccl", state="completed", sizes=(), p2p_seq=p2p_seq)

    def rank(me: int) -> list[dict]:
        batch = ([p2p("send", 0, 1, 1, state="scheduled"), batch_end(1)] if me == 0 else
                 [p2p("recv", 1, 0, 1, state="scheduled"), batch_end(1)] if me == 1 else [])
        return batch + [_nccl_op(1, "all_reduce" if me == 2 else "coalesced"), _nccl_op(2, state="scheduled")]

    result = run({r: nccl(rank(r), TRIO) for r in range(3)})
    assert result.culprit_ranks == (2,)
    assert (result.findings[0].kind, result.findings[0].collective_seq_id) == ("type_mismatch", 1)
    assert not any(f.kind == "p2p_unmatched" for f in result.findings)


def test_eight_runs_of_ranks_are_all_said_and_a_ninth_is_counted():
    """A sentence says up to eight runs of consecutive ranks (align.MAX_RANK_RUNS) in words; past
    that, the first eight and a count."""
    from frtrace.analysis.align import ranks_word

    assert ranks_word(range(0, 16, 2)) == "ranks 0,2,4,6,8,10,12,14"
    assert ranks_word([0, 1, 3, 5, 7, 9, 11, 13, 14]) == "ranks 0-1,3,5,7,9,11,13-14"
    assert ranks_word(range(0, 18, 2)) == "ranks 0,2,4,6,8,10,12,14,... (9 ranks)"
