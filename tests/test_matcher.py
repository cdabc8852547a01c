"""The matcher on small hand-built dump sets: alignment, size rules, culprits, purity."""

from __future__ import annotations

import copy
from collections import Counter
import pickle

import pytest

from conftest import entry, make_dump, ops
from frtrace.reading.groups import resolve_groups
from frtrace.loader import normalize
from frtrace.matcher import analyze, format_ranks


def run(raw_dumps: dict[int, dict]):
    dumps = {r: normalize(copy.deepcopy(raw), r, f"rank{r}", "pickle") for r, raw in raw_dumps.items()}
    table = resolve_groups(dumps, frozenset(raw_dumps))
    return analyze(dumps, table)


def nccl(raw_entries, ranks_by_group, first_record=0):
    config = {name: {"name": name, "desc": desc, "ranks": str(list(ranks))} for name, (desc, ranks) in ranks_by_group.items()}
    return make_dump(raw_entries, pg_config=config, first_record=first_record)


def after_one_world_op(ranks_by_group: dict, then: dict) -> object:
    """The analysis of SYNTHETIC NCCL dumps whose ranks each completed one all_reduce of the world
    (group "0"), then (`then`: rank -> what) started the first all_reduce of the group named, issued
    the raw entry given, or (None) nothing more."""
    world = entry(seq=1, state="completed", backend="nccl")

    def last(what) -> list[dict]:
        if what is None or isinstance(what, dict):
            return [what] if what else []
        return [entry(pg=what, desc=ranks_by_group[what][0], seq=1, state="started", backend="nccl")]

    return run({rank: nccl([world, *last(what)], ranks_by_group) for rank, what in then.items()})


WORLD4 = {"0": ("default_pg", range(4))}


def test_healthy_world_is_clean():
    result = run({r: make_dump(ops(5)) for r in range(4)})
    assert (result.verdict, result.culprit_ranks, result.findings) == ("clean", (), ())


@pytest.mark.parametrize("culprit", [0, 1, 3])
def test_the_odd_rank_is_blamed_wherever_it_is_listed(culprit):
    dumps = {r: make_dump(ops(3) + [entry(seq=4, op="broadcast" if r == culprit else "all_reduce")]) for r in range(4)}
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (culprit,)
    assert result.findings[0].kind == "type_mismatch" and result.findings[0].root_cause


def test_record_ids_are_not_used_to_align_wrapped_buffers():
    # ranks 0 and 1 ran 50 extra ops in their own group: their buffers start 50 records later
    pair = [entry(pg="1", desc="tp", seq=s, sizes=((2,),)) for s in range(1, 51)]
    dumps = {}
    for r in range(4):
        world = ops(10, start=11)
        mine = world if r >= 2 else pair[-20:] + world
        dumps[r] = make_dump(mine, first_record=60 if r < 2 else 10)
    result = run(dumps)
    assert result.verdict == "clean", result.headline


def test_wrapped_buffer_still_shows_a_skip():
    dumps = {r: make_dump(ops(10 if r != 2 else 9, start=31), first_record=30) for r in range(4)}
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (2,)
    assert result.findings[0].collective_seq_id == 40


def test_a_buffer_holding_none_of_the_others_ops_does_not_stop_the_comparison_of_the_rest():
    # rank 1's wrapped buffer holds only #45-#50; ranks 0, 2, 3 hold #1-#40, rank 2 with odd sizes at #10
    dumps = {0: make_dump(ops(40)), 1: make_dump(ops(6, start=45), first_record=100), 2: make_dump(ops(40)), 3: make_dump(ops(40))}
    dumps[2]["entries"][9]["input_sizes"] = dumps[2]["entries"][9]["output_sizes"] = [[5, 5]]
    result = run(dumps)
    assert result.culprit_ranks == (2,)
    assert [(f.kind, f.collective_seq_id, f.ranks) for f in result.findings][:1] == [("size_mismatch", 10, (2,))]


def test_first_unit_of_a_wrapped_buffer_may_be_cut_and_is_not_compared():
    # rank 1's first entry is the tail of a coalesced group: it must not read as a type mismatch
    full = [entry(seq=5, op="all_reduce"), entry(seq=5, op="all_reduce"), entry(seq=5, op="coalesced", sizes=())]
    cut = full[1:]
    rest = ops(3, start=6)
    dumps = {0: make_dump(full + rest, first_record=20), 1: make_dump(cut + rest, first_record=21),
             2: make_dump(full + rest, first_record=20)}
    assert run(dumps).verdict == "clean"


def test_pair_group_mismatch_is_decided_by_sibling_groups():
    def rank(r):
        tp = "1" if r < 2 else "2"
        op = "broadcast" if r == 3 else "all_reduce"
        return make_dump(ops(2, pg=tp, desc="tp") + [entry(pg=tp, desc="tp", seq=3, op=op)])
    result = run({r: rank(r) for r in range(4)})
    assert result.verdict == "desync" and result.culprit_ranks == (3,)
    assert "reference: the other tp groups" in result.findings[0].detail


def _tp_pairs(size_at_3: dict[int, int], issued_3=range(8), ranks=8):
    """tp pairs (0,1), (2,3), ...: two all_reduces of size 4, then #3 with each rank's size (4 unless
    given), issued by the ranks in issued_3."""
    def rank(r):
        tp = str(1 + r // 2)
        mine = ops(2, pg=tp, desc="tp", sizes=((4,),))
        if r in issued_3:
            mine.append(entry(pg=tp, desc="tp", seq=3, sizes=((size_at_3.get(r, 4),),)))
        return make_dump(mine)
    return run({r: rank(r) for r in range(ranks)})


def test_in_a_pair_the_sizes_most_sibling_groups_used_decide():
    # pair (0,1) disagrees at #3; pairs (2,3) and (4,5) used 4, pair (6,7) used 5: 4 wins two to one
    result = _tp_pairs({1: 5, 6: 5, 7: 5})
    assert result.verdict == "desync" and result.culprit_ranks == (1,)
    (finding,) = result.findings
    assert (finding.kind, finding.ranks, finding.decided) == ("size_mismatch", (1,), True)
    assert finding.detail.startswith("rank 1: [[5]] -> [[5]] where rank 0 has [[4]] -> [[4]] (reference: the other tp groups)")
    assert result.headline == "DESYNC: rank 1 passed sizes [[5]] to all_reduce #3 of tp where rank 0 passed sizes [[4]]"
    assert result.evidence == ("sibling groups: the other tp groups decide all_reduce #3",)


def test_sibling_groups_that_tie_decide_nothing():
    result = _tp_pairs({1: 5, 4: 5, 5: 5}, ranks=6)  # pair (2,3) used 4, pair (4,5) used 5
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == ("INCONCLUSIVE: size mismatch in all_reduce #3 of tp: rank 0: [[4]] -> [[4]], "
                               "rank 1: [[5]] -> [[5]]; two members cannot outvote each other and no sibling group decides")


def test_sibling_groups_three_ways_apart_decide_nothing():
    result = _tp_pairs({1: 5, 4: 5, 5: 5, 6: 6, 7: 6})  # pairs (2,3), (4,5), (6,7) used 4, 5 and 6
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.findings[0].detail.startswith("rank 0: [[4]] -> [[4]], rank 1: [[5]] -> [[5]]; two members cannot "
                                                "outvote each other and no sibling group decides")


def test_a_sibling_group_not_every_member_of_which_issued_the_op_has_no_vote():
    # ranks 5 and 7 never issued #3: their partners' size 5 is no vote; pair (2,3)'s 4 decides
    result = _tp_pairs({1: 5, 4: 5, 6: 5}, issued_3={0, 1, 2, 3, 4, 6})
    pair = [f for f in result.findings if f.group.name == "1"]
    assert [(f.kind, f.ranks, f.decided) for f in pair] == [("size_mismatch", (1,), True)]
    assert sorted(f.ranks for f in result.findings if f.kind == "missing_ranks") == [(5,), (7,)]


def test_three_ways_of_one_collective_and_no_majority_decide_nothing():
    dumps = {r: make_dump(ops(1) + [entry(seq=2, sizes=((4 + r,),))]) for r in range(3)}
    result = run(dumps)
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    (finding,) = result.findings
    assert (finding.ranks, finding.decided) == ((), False)
    assert result.headline == ("INCONCLUSIVE: size mismatch in all_reduce #2 of default_pg: rank 0: [[4]] -> [[4]], "
                               "rank 1: [[5]] -> [[5]], rank 2: [[6]] -> [[6]]; no majority and no sibling group decides")


def test_two_odd_ranks_each_have_their_sizes_said():
    result = run({r: make_dump([entry(sizes=(({3: 5, 4: 6}.get(r, 4),),))]) for r in range(5)})
    assert result.culprit_ranks == (3, 4)
    assert result.findings[0].detail.startswith("ranks 3-4: [[5]] -> [[5]]; [[6]] -> [[6]] where ranks 0-2 have [[4]] -> [[4]] [")


def test_pair_group_mismatch_without_siblings_is_inconclusive():
    dumps = {0: make_dump(ops(2)), 1: make_dump(ops(1) + [entry(seq=2, sizes=((9,),))])}
    result = run(dumps)
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert "cannot outvote" in result.headline


def test_skipper_that_went_on_is_the_culprit_not_its_waiting_peer():
    groups = {"0": ("default_pg", range(4)), "1": ("tp", (0, 1)), "2": ("tp", (2, 3))}
    dumps = {}
    for r in range(4):
        tp = "1" if r < 2 else "2"
        mine = ops(2) + ops(2, pg=tp, desc="tp")
        if r == 1:
            mine.append(entry(pg=tp, desc="tp", seq=3))
        else:
            mine.append(entry(seq=3))
        dumps[r] = nccl(mine, groups)
    result = run(dumps)
    assert result.culprit_ranks == (1,)
    assert result.headline.startswith("DESYNC: rank 1 never joined all_reduce #3 of default_pg (3 ranks wait in it); rank 1 is blocked in all_reduce #3 of tp")


def test_cycle_between_two_ranks_is_inconclusive():
    groups = {"1": ("a", (0, 1)), "2": ("b", (0, 1))}
    dumps = {0: nccl(ops(2, pg="1", desc="a") + ops(2, pg="2", desc="b") + [entry(pg="1", desc="a", seq=3)], groups),
             1: nccl(ops(2, pg="1", desc="a") + ops(2, pg="2", desc="b") + [entry(pg="2", desc="b", seq=3)], groups)}
    result = run(dumps)
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == ("INCONCLUSIVE: rank 1 waits in all_reduce #3 of b for rank 0; rank 0 waits in all_reduce #3 "
                               "of a for rank 1: they issued ops in different orders and neither their own histories nor "
                               "any other rank shows which order is right")


@pytest.mark.parametrize("op,sizes,out,bad", [
    ("all_gather", ((2,),), ((8,),), False),
    ("all_gather", ((2,),), ((6,),), True),
    ("reduce_scatter", ((8,),), ((2,),), False),
    ("reduce_scatter", ((8,),), ((3,),), True),
    ("all_reduce", ((4,),), ((4,),), False),
    ("all_reduce", ((4,),), ((5,),), True),
])
def test_a_rank_breaking_its_ops_own_size_rule_is_flagged(op, sizes, out, bad):
    dumps = {r: make_dump([entry(op=op, sizes=((2,),) if op == "all_gather" else ((8,),) if op == "reduce_scatter" else ((4,),),
                                 out=((8,),) if op == "all_gather" else ((2,),) if op == "reduce_scatter" else ((4,),))]) for r in range(4)}
    dumps[2] = make_dump([entry(op=op, sizes=sizes, out=out)])
    result = run(dumps)
    assert (result.culprit_ranks == (2,)) is bad
    assert (result.verdict == "desync") is bad


# each case: rank 2 differs from the others only in what its op's cross-rank rule compares, and
# keeps its own op's size rule, so nothing but the cross-rank comparison can see it
@pytest.mark.parametrize("op,usual,odd", [
    ("broadcast", (((4,),), ((4,),)), (((5,),), ((5,),))),
    ("all_gather", (((2,),), ((8,),)), (((3,),), ((12,),))),
    ("_all_gather_base", (((2,),), ((8,),)), (((3,),), ((12,),))),
    ("reduce_scatter", (((8,),), ((2,),)), (((12,),), ((3,),))),
    ("gather", (((3,),), ()), (((5,),), ())),
    ("scatter", ((), ((3,),)), ((), ((5,),))),
])
def test_a_rank_whose_sizes_differ_from_the_groups_by_its_ops_rule_is_flagged(op, usual, odd):
    dumps = {r: make_dump([*ops(2), entry(seq=3, op=op, sizes=usual[0], out=usual[1])]) for r in range(4)}
    result = run(dumps)
    assert result.verdict == "clean", result.headline
    dumps[2] = make_dump([*ops(2), entry(seq=3, op=op, sizes=odd[0], out=odd[1])])
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (2,), result.headline
    assert result.findings[0].kind == "size_mismatch" and result.findings[0].collective_seq_id == 3


# each case: rank 2 agrees with the others on what the cross-rank rule compares, and breaks only
# its own op's size rule (a group of 4)
@pytest.mark.parametrize("op,usual,odd", [
    ("reduce_scatter", (((8,),), ((2,),)), (((6,),), ((2,),))),  # scatters 6 elements into 2 each for 4
    ("all_gather", (((2,),), ((8,),)), (((2,),), ((10,),))),  # gathers more than 4 x 2
    ("all_gather", (((2,),), ((8,),)), (((2,),), ((6,),))),  # and fewer
])
def test_a_rank_breaking_only_its_own_size_rule_is_flagged(op, usual, odd):
    dumps = {r: make_dump([entry(op=op, sizes=usual[0], out=usual[1])]) for r in range(4)}
    assert run(dumps).verdict == "clean"
    dumps[2] = make_dump([entry(op=op, sizes=odd[0], out=odd[1])])
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (2,), result.headline
    assert result.findings[0].kind == "size_mismatch"


def test_the_culprit_is_where_a_chain_of_waiting_ends():
    # 0 and 4 wait for 1 in group a; 1 (with 3) waits for 2 in group b; 2 waits for nobody: the
    # waiting ends at rank 2, the culprit. Rank 1 never joined a's #3 either, and is outvoted there,
    # but it waits: it is not a culprit
    groups = {"1": ("a", (0, 1, 4)), "2": ("b", (1, 2, 3))}
    a, b = ({"pg": name, "desc": desc} for name, (desc, _) in groups.items())
    dumps = {0: nccl([*ops(2, **a, state="completed"), entry(seq=3, **a)], groups),
             1: nccl([*ops(2, **a, state="completed"), *ops(2, **b, state="completed"), entry(seq=3, **b)], groups),
             2: nccl(ops(2, **b, state="completed"), groups),
             3: nccl([*ops(2, **b, state="completed"), entry(seq=3, **b)], groups),
             4: nccl([*ops(2, **a, state="completed"), entry(seq=3, **a)], groups)}
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (2,), result.headline
    assert result.blocked_in[1][1].name == "2" and result.blocked_in[0][1].name == "1"


def test_gather_roots_and_non_roots_differ_legitimately():
    dumps = {r: make_dump([entry(op="gather", sizes=((3,),), out=((4, 3),) if r == 0 else ())]) for r in range(4)}
    assert run(dumps).verdict == "clean"


def test_all_to_all_checks_group_totals():
    good = {r: make_dump([entry(op="all_to_all", sizes=((r + 1,),), out=((4 - r,),))]) for r in range(4)}
    assert run(good).verdict == "clean"
    bad = {r: make_dump([entry(op="all_to_all", sizes=((4,),), out=((4,),))]) for r in range(4)}
    bad[1] = make_dump([entry(op="all_to_all", sizes=((5,),), out=((4,),))])
    result = run(bad)
    assert result.culprit_ranks == (1,)
    assert result.findings[0].detail.startswith("the group sends 17 elements but receives 16; rank 1: sends 5 / receives 4 "
                                                "elements where ranks 0,2-3 have sends 4 / receives 4 elements [decided by majority")


def test_the_majority_counts_the_members_that_issued_the_collective():
    # all five issued #1; rank 4 never issued #2: 3 of its 4 issuers agree, rank 2 used another dtype
    dumps = {r: make_dump(ops(1) + ([entry(seq=2, dtype="Half" if r == 2 else "Float")] if r != 4 else [])) for r in range(5)}
    result = run(dumps)
    mismatch = next(f for f in result.findings if f.kind == "dtype_mismatch")
    assert mismatch.ranks == (2,)
    assert "majority: 3 of 4 issuers of all_reduce #2 in default_pg agree" in result.evidence


def test_every_issuer_breaking_its_size_rule_its_own_way_is_said_so():
    # four members (pg_config): each gathers 9 to 12 elements from 2 each, where 8 is right
    dumps = {r: nccl([entry(op="all_gather", sizes=((2,),), out=((9 + r,),))], WORLD4) for r in range(4)}
    result = run(dumps)
    assert result.culprit_ranks == (0, 1, 2, 3)
    assert result.evidence == ("own rule: every issuer of all_gather #1 breaks its size rule",)
    each = "; ".join(f"rank {r} gathers {9 + r} elements from 2 each of 4 ranks" for r in range(4))
    assert result.headline == f"DESYNC: size mismatch in all_gather #1 of default_pg: {each}"


def test_dtype_mismatch_names_the_odd_rank():
    dumps = {r: make_dump([entry(dtype="BFloat16" if r == 2 else "Float")]) for r in range(4)}
    result = run(dumps)
    assert result.findings[0].kind == "dtype_mismatch" and result.culprit_ranks == (2,)
    assert result.findings[0].detail == ("rank 2: dtype BFloat16 where ranks 0-1,3 have dtype Float [decided by majority: "
                                         "3 of 4 issuers of all_reduce #1 in default_pg agree]")
    assert result.headline == ("DESYNC: rank 2 used dtype BFloat16 in all_reduce #1 of default_pg "
                               "where ranks 0-1,3 used dtype Float")


def p2p(kind, me, peer, seq, state="completed", sizes=((4,),)):
    name = f"send {me}->{peer}" if kind == "send" else f"recv {me}<-{peer}"
    return entry(op=name, seq=0, p2p_seq=seq, is_p2p=True, state=state, backend="nccl", sizes=sizes)


def test_p2p_pairs_fifo_and_names_the_rank_that_never_received():
    dumps = {0: nccl([p2p("send", 0, 1, 1), p2p("send", 0, 1, 2, state="scheduled")], {"0": ("default_pg", (0, 1))}),
             1: nccl([p2p("recv", 1, 0, 1)], {"0": ("default_pg", (0, 1))})}
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (1,)
    assert result.findings[0].kind == "p2p_unmatched"


def test_p2p_local_ranks_map_to_global_ranks():
    groups = {"0": ("default_pg", range(4)), "5": ("pp", (2, 3))}
    dumps = {r: nccl([entry(backend="nccl", state="completed")], groups) for r in range(4)}
    dumps[2] = nccl([entry(backend="nccl", state="completed"), {**p2p("send", 0, 1, 1, state="scheduled"), "process_group": ("5", "pp")}], groups)
    result = run(dumps)
    assert result.culprit_ranks == (3,)  # local rank 1 of pp {2, 3}


def test_stuck_collective_with_completion_tracking():
    dumps = {r: make_dump(ops(2, backend="nccl", state="completed") + [entry(seq=3, backend="nccl", state="started")]) for r in range(4)}
    result = run(dumps)
    assert result.verdict == "stuck" and result.culprit_ranks == (0, 1, 2, 3)


def test_gloo_last_ops_without_completion_data_are_clean():
    dumps = {r: make_dump(ops(3)) for r in range(4)}
    assert run(dumps).verdict == "clean"


def test_missing_dump_everyone_waits_for_is_the_prime_suspect():
    groups = {"0": ("default_pg", range(4))}
    dumps = {r: nccl(ops(2, backend="nccl", state="completed") + [entry(seq=3, backend="nccl")], groups) for r in range(3)}
    result = run(dumps)
    assert result.culprit_ranks == (3,) and "prime suspect" in result.headline
    assert result.ranks_missing == (3,)


def test_missing_dump_of_a_rank_nobody_waits_for_is_only_listed():
    groups = {"0": ("default_pg", range(4))}
    dumps = {r: nccl(ops(3, backend="nccl", state="completed"), groups) for r in range(3)}
    result = run(dumps)
    assert result.verdict == "clean" and result.ranks_missing == (3,)


def test_world_size_is_read_from_all_gather_shapes_when_the_top_rank_is_missing():
    dumps = {r: make_dump([entry(op="all_gather", sizes=((2,),), out=((4, 2),)), entry(seq=2)]) for r in range(3)}
    result = run(dumps)
    assert result.ranks_missing == (3,)
    assert result.culprit_ranks == (3,)


def test_coalesced_groups_compare_as_one_unit():
    def coalesced(n):
        return [entry(seq=1, op="all_reduce", sizes=((i + 1,),)) for i in range(n)] + [entry(seq=1, op="coalesced", sizes=())]
    same = {r: make_dump(coalesced(3) + [entry(seq=2)]) for r in range(4)}
    assert run(same).verdict == "clean"
    odd = dict(same)
    odd[1] = make_dump(coalesced(2) + [entry(seq=2)])
    assert run(odd).culprit_ranks == (1,)


@pytest.mark.parametrize("odd,headline,detail", [
    ("size", "DESYNC: rank 2 passed sizes [[2]] -> [[8]] | sizes [[5]] -> [[20]] to coalesced(all_gather x2) #3 of default_pg "
             "where ranks 0-1,3 passed sizes [[2]] -> [[8]] | sizes [[3]] -> [[12]]",
     "rank 2: [[2]] -> [[8]] | [[5]] -> [[20]] | [] -> [] where ranks 0-1,3 have [[2]] -> [[8]] | [[3]] -> [[12]] | [] -> []"),
    ("dtype", "DESYNC: rank 2 used dtype Float,Half in coalesced(all_gather x2) #3 of default_pg where ranks 0-1,3 used dtype Float",
     "rank 2: dtype Float,Half where ranks 0-1,3 have dtype Float"),
    ("op", "DESYNC: rank 2 called coalesced(all_gather, reduce_scatter) as #3 of default_pg where ranks 0-1,3 called "
           "coalesced(all_gather x2)",
     "rank 2: all_gather+reduce_scatter+coalesced where ranks 0-1,3 have all_gather+all_gather+coalesced"),
])
def test_a_coalesced_group_that_differs_is_described_op_by_op(odd, headline, detail):
    def rank(r):
        second = {"op": "all_gather", "sizes": ((3,),), "out": ((12,),)}
        if r == 2:
            second = {"size": {"op": "all_gather", "sizes": ((5,),), "out": ((20,),)}, "dtype": {**second, "dtype": "Half"},
                      "op": {"op": "reduce_scatter", "sizes": ((12,),), "out": ((3,),)}}[odd]
        return make_dump(ops(2) + [entry(seq=3, op="all_gather", sizes=((2,),), out=((8,),)), entry(seq=3, **second),
                                   entry(seq=3, op="coalesced", sizes=())])
    result = run({r: rank(r) for r in range(4)})
    assert result.verdict == "desync" and result.culprit_ranks == (2,)
    assert result.headline == headline
    assert result.findings[0].detail.startswith(detail + " [decided by majority: 3 of 4 issuers of coalesced(all_gather x2) #3")


def test_analysis_does_not_depend_on_the_order_of_ranks():
    raw = {r: make_dump(ops(3) + ([] if r == 1 else [entry(seq=4)])) for r in range(4)}
    forward = run(raw)
    backward = run(dict(reversed(list(raw.items()))))
    assert (forward.verdict, forward.culprit_ranks, forward.headline) == (backward.verdict, backward.culprit_ranks, backward.headline)


def test_analyze_leaves_its_input_unchanged():
    dumps = {r: normalize(make_dump(ops(3) + ([] if r == 1 else [entry(seq=4)])), r, f"r{r}", "pickle") for r in range(4)}
    table = resolve_groups(dumps)
    before = pickle.dumps((dumps, table))
    first = analyze(dumps, table)
    assert pickle.dumps((dumps, table)) == before
    assert analyze(dumps, table).headline == first.headline


@pytest.mark.parametrize("ranks,text", [([], ""), ([3], "3"), ([0, 1, 2, 5], "0-2,5"), ([7, 1, 2], "1-2,7")])
def test_format_ranks(ranks, text):
    assert format_ranks(ranks) == text


def test_unknown_ops_and_backends_are_compared_by_name_and_reported():
    dumps = {r: make_dump([entry(op="frobnicate", backend="mybackend", sizes=((r,),))]) for r in range(3)}
    result = run(dumps)
    assert result.verdict == "clean"  # sizes of an op without rules may differ
    assert any("'frobnicate' (first on rank 0)" in w for w in result.warnings)
    assert any("'mybackend'" in w for w in result.warnings)
    dumps[1] = make_dump([entry(op="defrobnicate", backend="mybackend")])
    assert run(dumps).culprit_ranks == (1,)


def test_culprits_in_the_same_situation_share_one_clause():
    dumps = {r: make_dump(ops(3) + ([] if r in (1, 3, 5) else [entry(seq=4)])) for r in range(8)}
    result = run(dumps)
    assert result.culprit_ranks == (1, 3, 5)
    assert result.headline == "DESYNC: ranks 1,3,5 never joined all_reduce #4 of default_pg (5 ranks wait in it); ranks 1,3,5 are in no collective"
    assert ("where: ranks 1,3,5 are in no collective: their last op, all_reduce #3 of default_pg, was joined by every member "
            "(or in a send or recv, which gloo does not record)") in result.evidence


def test_version_1_4_dumps_with_one_seq_counter_find_the_skipper():
    def rank(r):
        n = 4 if r == 2 else 5
        return {"version": "1.4", "pg_config": {0: [0, 1, 2, 3]}, "entries": [
            {"record_id": i, "seq_id": i + 1, "pg_id": 0, "op_id": i + 1, "profiling_name": "nccl:all_reduce",
             "input_sizes": [[8]], "output_sizes": [[8]], "state": "completed" if i < n - 1 or r == 2 else "scheduled"}
            for i in range(n)]}
    result = run({r: rank(r) for r in range(4)})
    assert result.verdict == "desync" and result.culprit_ranks == (2,)
    assert result.findings[0].kind == "missing_ranks" and result.findings[0].collective_seq_id == 5


def test_in_a_cycle_the_other_ranks_show_which_op_comes_first():
    """Rank 7 skips its tp op and goes on to world: seven ranks then wait for rank 6, stuck in tp.

    'The op most ranks wait in' would blame rank 6; ranks 0-5 ran tp before world, so rank 7,
    missing from the earlier op, is the skipper.
    """
    groups = {"0": ("default_pg", range(8)), **{str(1 + i): ("tp", (2 * i, 2 * i + 1)) for i in range(4)}}
    dumps = {}
    for r in range(8):
        tp = str(1 + r // 2)
        mine = []
        for step in (1, 2, 3):
            if not (r == 7 and step == 3):
                mine.append(entry(pg=tp, desc="tp", seq=step))
            mine.append(entry(seq=step))
        if r == 6:
            mine.pop()  # rank 6 is stuck in tp #3 and never reaches world #3
        dumps[r] = nccl(mine, groups)
    result = run(dumps)
    assert result.culprit_ranks == (7,), result.headline
    assert result.headline.startswith("DESYNC: rank 7 never joined all_reduce #3 of tp")


W2 = {"0": ("default_pg", (0, 1))}


def _pair_steps(steps: int, skipper: int, world=W2, also_skipped: int | None = None):
    """Each step rank 0 sends to rank 1, then every rank all_reduces (NCCL). After `steps` steps
    `skipper` leaves out its p2p op (rank 0 its send, rank 1 its recv) and waits in the
    all_reduce while its peer waits in its p2p op: a cycle. The skipper may have left out the p2p
    op of step `also_skipped` too; ranks past 1 only all_reduce."""
    peer = 1 - skipper
    dumps = {}
    for r in sorted({rank for _, ranks in world.values() for rank in ranks}):
        mine = []
        for step in range(1, steps + 2):
            last = step == steps + 1
            state = "scheduled" if last else "completed"
            if r in (0, 1) and not (r == skipper and (last or step == also_skipped)):
                mine.append(p2p("send", 0, 1, step, state=state) if r == 0 else p2p("recv", 1, 0, step, state=state))
            if not (last and r == peer):
                mine.append(entry(seq=step, backend="nccl", state=state))
        dumps[r] = nccl(mine, world)
    return run(dumps)


@pytest.mark.parametrize("steps", [4, 6])
def test_a_rank_whose_own_history_always_had_the_recv_is_the_one_that_skipped_it(steps):
    result = _pair_steps(steps, skipper=1)
    assert result.verdict == "desync" and result.culprit_ranks == (1,)
    # the buffer never wrapped: what it holds before its first all_reduce is the first step
    assert result.evidence == (f"own history: rank 1's buffer shows recv 0->1 of default_pg between every two all_reduce "
                               f"of default_pg in its last {steps} steps, and not before its latest one",)


def test_a_history_too_short_decides_nothing():
    result = _pair_steps(2, skipper=1)
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == ("INCONCLUSIVE: rank 1 waits in all_reduce #3 of default_pg for rank 0; rank 0 waits "
                               "in send 0->1 (p2p #3) of default_pg for rank 1: they issued ops in different orders "
                               "and neither their own histories nor any other rank shows which order is right")


@pytest.mark.parametrize("also_skipped", [6, 2], ids=["skipped-last-step", "skipped-early"])
def test_an_irregular_history_decides_nothing_but_the_other_ranks_keeping_their_step_do(also_skipped, monkeypatch):
    """Rank 1 also left out an earlier recv: its own history shows no rule it broke. Rank 0 sends
    and all_reduces every step, and is blocked where that step has it: rank 1 left the program."""
    result = _pair_steps(6, skipper=1, also_skipped=also_skipped)
    assert result.culprit_ranks == (1,)
    assert result.evidence == ("own history: rank 0 follows the step its buffer repeats up to the op it is blocked in; "
                               "of the deadlock's ranks only rank 1 does not show it, so it left its program",)
    from frtrace.analysis import waitgraph

    monkeypatch.setattr(waitgraph.WaitGraph, "_left_by_history", lambda self, cycle_ranks: None)
    assert _pair_steps(6, skipper=1, also_skipped=also_skipped).verdict == "inconclusive"


def test_entries_are_labelled_by_op_number_and_group():
    from frtrace.analysis.align import entry_label

    groups = {"0": ("default_pg", (0, 1)), "5": ("tp", (0, 1))}
    raw = {r: nccl([entry(seq=7), entry(pg="5", desc="tp", seq=2), p2p("send", 0, 1, 3) if r == 0 else p2p("recv", 1, 0, 3)],
                   groups) for r in (0, 1)}
    dumps = {r: normalize(d, r, f"rank{r}", "pickle") for r, d in raw.items()}
    table = resolve_groups(dumps, frozenset(dumps))
    assert [entry_label(e, table) for e in dumps[0].entries] == [
        "all_reduce #7 of default_pg", "all_reduce #2 of tp", "send 0->1 p2p #3 of default_pg"]
    outside = dumps[1].entries[0]._replace(pg_name="99")  # a group no dump configured
    assert entry_label(outside, table) == "all_reduce #7 of 99"


def test_a_cycle_of_collectives_no_history_or_other_rank_decides_goes_to_the_op_most_ranks_wait_in():
    # only ranks 2 and 3 have a tp group: no rank outside the cycle shows the order of tp and world
    groups = {"0": ("default_pg", range(4)), "1": ("tp", (2, 3))}
    dumps = {}
    for r in range(4):
        mine = []
        for step in (1, 2, 3):
            if r in (2, 3) and not (r == 3 and step == 3):
                mine.append(entry(pg="1", desc="tp", seq=step))
            if not (r == 2 and step == 3):
                mine.append(entry(seq=step))
        dumps[r] = nccl(mine, groups)
    result = run(dumps)
    assert result.verdict == "desync" and result.culprit_ranks == (2,)
    # rank 3 left tp #3 out as well: whether that was a second fault, nothing shows, and it is said
    assert result.evidence == ("majority: ranks 0-1,3 wait in all_reduce #3 of default_pg, more than in any other op of the cycle",
                               "undecided: whether rank 3, blocked in one op while others wait for it in another, skipped that "
                               "other op cannot be told (no other rank shows their order)")


def test_a_cycle_through_a_send_is_not_decided_by_the_op_most_ranks_wait_in():
    """A sender blocked on a dropped recv is missing from every collective after it: the
    majority there says nothing (without enough history of its own, nothing decides)."""
    result = _pair_steps(2, skipper=1, world={"0": ("default_pg", (0, 1, 2))})
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == ("INCONCLUSIVE: ranks 1-2 wait in all_reduce #3 of default_pg for rank 0; rank 0 waits in "
                               "send 0->1 (p2p #3) of default_pg for rank 1: they issued ops in different orders and neither "
                               "their own histories nor any other rank shows which order is right")


def test_a_rank_whose_own_history_always_had_the_send_is_the_one_that_skipped_it():
    result = _pair_steps(5, skipper=0)  # rank 0 skips its 6th send; rank 1 waits in the recv
    assert result.verdict == "desync" and result.culprit_ranks == (0,)
    assert result.headline.startswith("DESYNC: rank 0 never posted the send matching rank 1's recv 1<-0 (p2p #6) of default_pg")
    assert result.evidence == ("own history: rank 0's buffer shows send 0->1 of default_pg between every two all_reduce "
                               "of default_pg in its last 5 steps, and not before its latest one",)


def _pair_split(last_seq: dict[int, int], missing=(), desc="tp", layout="gloo"):
    """Pairs (0,1), (2,3), (4,5), (6,7) (gloo): rank 0 issued #3, rank 1 stopped at #2 and waits
    for nobody, the other ranks' last seq ids as given (else 3); a tie only sibling groups decide.
    layout="nccl": the NCCL layout, every op completed but rank 0's #3 (started)."""
    last_seq = {0: 3, 1: 2, **last_seq}
    if layout == "gloo":
        return run({r: make_dump(ops(last_seq.get(r, 3), pg=str(1 + r // 2), desc=desc)) for r in range(8) if r not in missing})
    groups = {str(1 + i): (desc, (2 * i, 2 * i + 1)) for i in range(4)}
    return run({r: nccl([entry(seq=s, pg=str(1 + r // 2), desc=desc, backend="nccl",
                               state="started" if (r, s) == (0, 3) else "completed") for s in range(1, last_seq.get(r, 3) + 1)],
                        groups) for r in range(8) if r not in missing})


def test_in_a_tie_the_sibling_groups_that_went_on_blame_the_rank_left_behind():
    result = _pair_split({})
    # gloo records no send or recv: the rank may be waiting in one (a pipeline stage), and it is said
    assert result.culprit_ranks == (1,) and result.evidence == (
        "sibling groups: the other tp groups issued #3 too", "where: rank 1 is in no collective: its last op, all_reduce "
        "#2 of tp, was joined by every member (or in a send or recv, which gloo does not record)")
    assert result.headline == "DESYNC: rank 1 never joined all_reduce #3 of tp (1 rank waits in it); rank 1 is in no collective"
    assert _pair_split({}, layout="nccl").headline == (
        "DESYNC: rank 1 never joined all_reduce #3 of tp (1 rank waits in it); rank 1 is in no collective (all its ops completed)")


def test_groups_without_a_desc_have_no_siblings():
    result = _pair_split({}, desc="undefined")  # the other pairs went on, but nothing says they are alike
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()


def test_in_a_tie_the_sibling_groups_that_stopped_blame_the_rank_that_ran_ahead():
    result = _pair_split({r: 2 for r in range(2, 8)}, layout="nccl")
    assert result.culprit_ranks == (0,) and result.evidence == ("sibling groups: the other tp groups stopped before #3",)
    assert result.headline == ("DESYNC: rank 0 ran ahead: it issued all_reduce #3 of tp, which rank 1 never issued, and "
                               "waits in it; rank 1 waits for nobody")
    (finding,) = result.findings
    assert finding.kind == "extra_op" and finding.detail.startswith(
        "rank 0 issued it alone; rank 1 never did and waits for nobody (their last op in tp is #2)")


def test_in_gloo_sibling_groups_that_stopped_decide_nothing():
    """Gloo records no send or recv: the other pairs may have stopped in a pipeline receive that
    waits, through others, for rank 1, so their stop says nothing of where the program ends."""
    result = _pair_split({r: 2 for r in range(2, 8)})
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline.startswith("INCONCLUSIVE: rank 0 issued all_reduce #3 of tp, rank 1 never did and waits for nobody")


def _loops(program: dict[int, str]) -> dict[int, dict]:
    """gloo dumps of ranks 0-2 from their programs, one letter an op: t an all_reduce of tp {0, 1},
    w one of the world's."""
    groups = {"0": ("default_pg", range(3)), "1": ("tp", (0, 1))}
    dumps = {}
    for rank, letters in program.items():
        seqs = Counter()
        raw = []
        for letter in letters:
            pg = "1" if letter == "t" else "0"
            seqs[pg] += 1
            raw.append(entry(pg=pg, desc=groups[pg][0], seq=seqs[pg]))
        dumps[rank] = nccl(raw, groups)
    return dumps


def test_in_a_tie_the_rank_that_stopped_inside_the_loop_its_buffer_repeats_stayed_behind():
    """Ranks 0 and 1 repeat (tp, tp, world); rank 0 stopped one tp into its fourth pass, where rank
    1 issued the second: its loop cannot end there (its buffer began where a pass begins)."""
    result = run(_loops({0: "ttw" * 3 + "t", 1: "ttw" * 3 + "tt", 2: "www"}))
    assert result.culprit_ranks == (0,)
    assert result.evidence == ("own history: each of ranks 0-1 repeats one step op for op, and stopped 2 ops into a step "
                               "of its own with all_reduce of tp next, before the end of its loop: rank 1 issued it there, "
                               "rank 0 stayed behind", "where: rank 0 is in no collective: its last op, all_reduce #7 of tp, "
                               "was joined by every member (or in a send or recv, which gloo does not record)")


@pytest.mark.parametrize("program", [
    {0: "ttw" * 3, 1: "ttw" * 3 + "t", 2: "www"},  # rank 0 ended where a pass of its loop ends: the program may end there
    {0: "wttw" * 3 + "t", 1: "wttw" * 3 + "tt", 2: "wwwwww"},  # a world op before the loop: where it starts is not shown
    {0: "ttw" * 2 + "t", 1: "ttw" * 2 + "tt", 2: "ww"},  # two passes: too few to read a loop from
], ids=["at-the-loop-end", "prologue", "too-few-steps"])
def test_in_a_tie_own_histories_decide_only_inside_a_loop_they_show(program):
    result = run(_loops(program))
    assert result.verdict == "inconclusive" and result.culprit_ranks == (), result.headline
    assert result.headline.endswith("as many members ran ahead as stayed behind, and no sibling group shows which is right")


@pytest.mark.parametrize("letters,wrapped,found", [
    ("ARRRW" * 3 + "ARR", False, (5, 4)),  # first ops ARRR: a pass runs A..W; 4 ops into a step (W A R R), R next
    ("ARRRW" * 3 + "A", False, (5, 2)),
    ("ARRRW" * 3, False, None),  # stopped where a pass ends
    ("ARRRW" * 3 + "AA", False, None),  # the step it is in does not follow the one it repeats
    ("ARRRW" * 3 + "AR", True, None),  # wrapped: where a pass starts is gone
    ("B" + "ARRRW" * 3 + "AR", False, None),  # an op before the loop: the first ops are no step's end
], ids=["mid-step", "early", "loop-end", "astray", "wrapped", "prologue"])
def test_a_rank_stopped_inside_its_loop_is_told_from_one_whose_program_may_have_ended(letters, wrapped, found):
    from frtrace.analysis.steps import _Buffer, _stopped_in_step

    buffer = _Buffer([(i, letter, False) for i, letter in enumerate(letters)], wrapped)
    assert _stopped_in_step(buffer, len(letters), "R") == found


@pytest.mark.parametrize("last_seq,layout", [({2: 2, 4: 2, 6: 2}, "gloo"), ({2: 2, 3: 2}, "nccl")],
                         ids=["siblings-split-too", "siblings-disagree"])
def test_in_a_tie_siblings_split_or_disagreeing_decide_nothing(last_seq, layout):
    result = _pair_split(last_seq, layout=layout)
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == ("INCONCLUSIVE: rank 0 issued all_reduce #3 of tp, rank 1 never did and waits for nobody: as "
                               "many members ran ahead as stayed behind, and no sibling group shows which is right")


def test_a_sibling_group_with_a_missing_dump_has_no_say():
    # pair (2,3): rank 3 left no dump, rank 2 stopped at #2; pairs (4,5) and (6,7) went on
    result = _pair_split({2: 2}, missing=(3,))
    assert 1 in result.culprit_ranks and 0 not in result.culprit_ranks
    assert "sibling groups: the other tp groups issued #3 too" in result.evidence


@pytest.mark.parametrize("pair_first", [True, False], ids=["pair-op-first", "world-op-first"])
def test_of_two_mismatches_the_headline_names_the_one_the_culprit_issued_first(pair_first):
    groups = {"0": ("default_pg", range(4)), "1": ("tp", (0, 1)), "2": ("tp", (2, 3))}
    dumps = {}
    for r in range(4):
        world = ops(2, sizes=((4,),)) + [entry(seq=3, sizes=((9 if r == 3 else 4,),))]
        pair = [entry(pg="1" if r < 2 else "2", desc="tp", seq=1, dtype="Half" if r == 3 else "Float")]
        dumps[r] = nccl(pair + world if pair_first else world + pair, groups)
    result = run(dumps)
    assert result.culprit_ranks == (3,)
    assert result.headline == ("DESYNC: rank 3 used dtype Half in all_reduce #1 of tp where rank 2 used dtype Float" if pair_first
                               else "DESYNC: rank 3 passed sizes [[9]] to all_reduce #3 of default_pg where ranks 0-2 passed "
                                    "sizes [[4]]") + " (+1 more group(s) with a mismatch)"
    assert result.culprit_entries[3].pg_name == ("2" if pair_first else "0")


def test_the_evidence_says_who_waits_for_whom_in_words_that_agree():
    world = {"0": ("default_pg", range(4))}
    stuck = run({r: nccl(ops(2, backend="nccl", state="completed") + [entry(seq=3, backend="nccl", state="scheduled")], world)
                 for r in range(3)})  # rank 3 left no dump
    assert stuck.culprit_ranks == (3,)
    assert stuck.evidence == ("missing dump: rank 3 left no readable dump, and ranks 0-2 wait for it",)
    pair = {"0": ("default_pg", (0, 1))}
    unmatched = run({0: nccl([p2p("send", 0, 1, 1), p2p("send", 0, 1, 2, state="scheduled")], pair),
                     1: nccl([p2p("recv", 1, 0, 1)], pair)})
    assert unmatched.culprit_ranks == (1,)
    assert unmatched.evidence == ("wait-for graph: rank 0 waits in send 0->1 (p2p #2) of default_pg for rank 1, who waits for nobody",)
    behind = run({r: make_dump(ops(3 if r != 3 else 2)) for r in range(4)})
    assert behind.culprit_ranks == (3,)
    assert behind.evidence == ("majority: 3 of 4 members issued all_reduce #3 of default_pg; rank 3 never did and waits for nobody",
                               "where: rank 3 is in no collective: its last op, all_reduce #2 of default_pg, was joined by "
                               "every member (or in a send or recv, which gloo does not record)")


def test_a_missing_dump_one_rank_waits_for_is_said_in_the_singular():
    result = _pair_split({2: 2}, missing=(3,))
    assert "missing dump: rank 3 left no readable dump, and rank 2 waits for it" in result.evidence


@pytest.mark.parametrize("size,dumps,headline", [
    (2, {0: ops(3)}, "DESYNC: rank 1 left no readable dump and rank 0 waits for it in all_reduce #3 of default_pg: it is "
                     "the prime suspect"),
    (4, {0: ops(3), 1: ops(3), 2: ops(3)}, "DESYNC: rank 3 left no readable dump and ranks 0-2 wait for it in all_reduce "
                                           "#3 of default_pg: it is the prime suspect"),
    (4, {0: ops(3), 1: ops(3)}, "DESYNC: ranks 2-3 left no readable dump and ranks 0-1 wait for them in all_reduce #3 of "
                                "default_pg: they are the prime suspect"),
    (3, {0: ops(1), 1: ops(1), 2: []}, "DESYNC: rank 2 never joined all_reduce #1 of default_pg (2 ranks wait in it); "
                                       "rank 2 has an empty buffer (no op in flight, or none recorded)"),
], ids=["one-waits-for-one", "several-wait-for-one", "several-wait-for-several", "empty-buffer"])
def test_headlines_agree_in_number_with_who_waits_for_whom(size, dumps, headline):
    world = {"0": ("default_pg", range(size))}
    assert run({r: nccl(raw, world) for r, raw in dumps.items()}).headline == headline


def test_a_dropped_recv_is_named_from_the_senders_side():
    assert _pair_steps(4, skipper=1).headline == ("DESYNC: rank 1 never posted the recv matching rank 0's send 0->1 (p2p #5) "
                                                  "of default_pg; rank 1 is blocked in all_reduce #5 of default_pg")


@pytest.mark.parametrize("seen,complete,left_out", [
    ("WRCASRCAS", True, False),  # the whole step: nothing left out
    ("WRCASCAS", True, True),  # one R fewer, the rest in order
    ("WRCASCA", False, True),  # a step still running, one R fewer so far
    ("WRCASRC", False, False),  # a step still running, as the template so far
    ("WCASCAS", True, False),  # two R fewer
    ("WRCSRCAS", True, False),  # an A fewer: not the op it is awaited in
], ids=["same", "one-fewer", "running-one-fewer", "running-prefix", "two-fewer", "other-op"])
def test_a_step_less_one_awaited_op_is_told_from_any_other_step(seen, complete, left_out):
    from frtrace.analysis.steps import _one_left_out

    assert _one_left_out(tuple("WRCASRCAS"), tuple(seen), "R", complete=complete) is left_out


@pytest.mark.parametrize("backend", ["ncclx", "xccl"])
def test_the_ops_pytorchs_analyzer_knows_are_known_and_v_ops_have_no_size_rule(backend):
    # all_gather_v and reduce_scatter_v: each rank gives its own count; split and new_window carry no data
    def step(rank):
        return [entry(seq=1, op="all_gather_v", sizes=((rank + 1,),), out=((10,),), backend=backend, state="completed"),
                entry(seq=2, op="reduce_scatter_v", sizes=((10,),), out=((rank + 1,),), backend=backend, state="completed"),
                entry(seq=3, op="split", sizes=(), backend=backend, state="completed"),
                entry(seq=4, op="new_window", sizes=(), backend=backend, state="completed")]
    result = run({r: nccl(step(r), WORLD4) for r in range(4)})
    assert (result.verdict, result.culprit_ranks) == ("clean", ())
    assert not any("op names without size rules" in w or "unknown backends" in w for w in result.warnings)
    dtypes = {r: nccl(step(r)[:1], WORLD4) for r in range(4)}
    dtypes[2]["entries"][0]["input_dtypes"] = ["Half"]  # a dtype rule still holds
    assert run(dtypes).culprit_ranks == (2,)
