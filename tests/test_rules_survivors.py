"""The size and op rules (analysis/collective_check.py) on the inputs the mutation run's survivors
named and no test built: an all_to_all every member sized alike whose totals cannot add up, as a
finding (its ranks and whether it was decided); a sibling group whose member's wrapped buffer
starts inside the collective, which still votes by its other members.

Every dump here is SYNTHETIC (conftest's factory, gloo's layout unless said)."""

from __future__ import annotations

from conftest import entry, make_dump, ops
from test_matcher import WORLD4, nccl, run


def test_an_all_to_all_every_member_sized_alike_that_cannot_add_up_is_a_finding_naming_nobody_and_undecided():
    """Every rank sends 4 and receives 5 elements: the group's totals (16, 20) cannot add up, and
    no member differs from another. The finding names no rank and is not decided (as JSON:
    `"ranks": []`, `"decided": false`)."""
    result = run({r: nccl([entry(op="all_to_all", sizes=((4,),), out=((5,),))], WORLD4) for r in range(4)})
    (finding,) = result.findings
    assert (finding.kind, finding.ranks, finding.decided) == ("size_mismatch", (), False)
    assert finding.ranks is not None and finding.decided is False


def _coalesced(tp: str, seq: int, second: int) -> list[dict]:
    """A coalesced group of two all_reduces in tp pair `tp` (the second of `second` elements) and
    its terminator, all numbered `seq`."""
    return [entry(pg=tp, desc="tp", seq=seq, sizes=((4,),)), entry(pg=tp, desc="tp", seq=seq, sizes=((second,),)),
            entry(pg=tp, desc="tp", seq=seq, op="coalesced", sizes=())]


def test_a_sibling_group_whose_member_s_buffer_starts_inside_the_op_votes_by_its_other_member():
    """tp pairs (0,1), (2,3), (4,5), (6,7); #3 is a coalesced group of two all_reduces. Rank 1's
    second has 5 elements where rank 0's has 4: a pair cannot outvote itself, the siblings decide.
    Pair (4,5) used 5, pair (6,7) used 4; rank 3's buffer wrapped and starts inside its #3 (it
    holds only the second all_reduce and the terminator: cut, not compared), so pair (2,3) votes
    by rank 2 alone, for 4. Two to one: rank 1 is the culprit (with rank 3's cut unit counted
    against its pair, the siblings would tie and decide nothing)."""
    second = {1: 5, 4: 5, 5: 5}

    def rank(r: int) -> dict:
        tp = str(1 + r // 2)
        head = ops(2, pg=tp, desc="tp", sizes=((4,),))
        group = _coalesced(tp, 3, second.get(r, 4))
        if r == 3:
            return make_dump(group[1:], first_record=50)
        return make_dump(head + group)

    result = run({r: rank(r) for r in range(8)})
    assert result.culprit_ranks == (1,)
    (finding,) = [f for f in result.findings if f.group.name == "1"]
    assert (finding.kind, finding.ranks, finding.decided) == ("size_mismatch", (1,), True)
    assert "(reference: the other tp groups)" in finding.detail
