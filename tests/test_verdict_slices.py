"""The verdict's small rules that the mutation run's slices of verdict.py found untested (issue 52,
tests/mutation.py --part verdict --slice K/5): a culprit held up by ranks whose dumps say nothing
of the end, findings of ranks that ran ahead among others, a culprit's stack beside its peers' and
the odd ones out in words, each culprit's cause in words (with its stack where it has one), who is
said to wait for ranks stuck below PyTorch, and what the first line counts: further culprits, late
arrivals, older dumps, a stuck op undecided. Each rule is asked directly, on stand-ins of the
wait-for graph that hold only what the rule reads, or analysed whole on SYNTHETIC NCCL dumps
(conftest's entries)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import entry, make_dump
from test_moments import _op, _run, _steps
from test_matcher import after_one_world_op, nccl, p2p, run

from frtrace.analysis.verdict import _causes, _odd_ones_said, _stacks_apart, _with_ran_ahead, _with_stacks, _without_unseen
from frtrace.reading.stacks import Thread
from frtrace.types import Finding, HealthCheck, StackApart

TP = SimpleNamespace(key=("tp",), name="tp", label="tp", ranks=(0, 1, 2, 3))


def _blocked(seq: int, peer: int | None = None) -> SimpleNamespace:
    """A rank's blocker: an op of TP at `seq`, a send or recv to `peer` where given."""
    return SimpleNamespace(group=TP, seq=seq, p2p=None if peer is None else SimpleNamespace(peer=peer),
                           describe=lambda: f"all_reduce #{seq} in tp")


def _graph(blockers: dict, known_last: dict, unseen: frozenset[int] = frozenset()) -> SimpleNamespace:
    """The wait-for graph as _without_unseen reads it: each culprit's op, and TP's view (the members
    whose dumps do not say where they were at the end, `unseen`; every member's dump holds the op;
    each member's last seq id)."""
    units = {rank: object() for rank in TP.ranks}
    view = SimpleNamespace(unseen=unseen, known_last=known_last, unit=lambda seq, rank: units.get(rank))
    return SimpleNamespace(joined_by_all=blockers, views={TP.key: view})


def test_a_culprit_in_a_send_to_a_rank_whose_dump_is_seen_stays_named():
    # rank 3's dump is older than the end; rank 0 waits in a send to rank 1, whose dump is seen
    graph = _graph({0: _blocked(5, peer=1)}, {0: 5, 1: 5, 2: 5, 3: 4})
    assert _without_unseen([(0, None)], graph, {3: "older"}, frozenset()) == ([(0, None)], [])
    # ... and where the send is to rank 3, whether rank 0 waits for it cannot be told
    graph = _graph({0: _blocked(5, peer=3)}, {0: 5, 1: 5, 2: 5, 3: 4})
    assert _without_unseen([(0, None)], graph, {3: "older"}, frozenset()) == (
        [], ["whether rank 0, in all_reduce #5 in tp, waits there for rank 3 (dump older than the end) cannot be told"])


def test_a_culprit_in_an_op_every_member_holds_and_none_went_past_stays_named_where_its_group_is_whole():
    # rank 2's recorder was off; rank 0's op is held by every member, none went past it, tp is no short group
    graph = _graph({0: _blocked(5)}, {0: 5, 1: 5, 2: 5, 3: 5})
    assert _without_unseen([(0, None)], graph, {}, frozenset({2})) == ([(0, None)], [])
    # a group smaller than its siblings say: the member no dump shows may be what it waits for
    kept, said = _without_unseen([(0, None)], graph, {}, frozenset({2}), short=frozenset({TP.key}))
    assert kept == [] and said == ["whether rank 0, in all_reduce #5 in tp, waits there for a member no dump shows (tp has "
                                   "4 of the members its siblings or shapes say) cannot be told"]
    # ... and so where every dump says where its rank was at the end
    assert _without_unseen([(0, None)], graph, {}, frozenset(), short=frozenset({TP.key})) == ([], said)


def _finding(kind: str, seq: int, ranks: tuple[int, ...]) -> Finding:
    return Finding(kind, TP, seq, None, "all_reduce", ranks, TP.ranks, f"{kind} at #{seq}")


def test_findings_before_and_after_an_op_ranks_ran_ahead_in_are_all_kept():
    key = ("coll", TP.key, 7)
    graph = SimpleNamespace(ran_ahead={key: (0, 1)}, waits_on={key: (2, 3)}, views={TP.key: SimpleNamespace(known_last={2: 6})})
    before, after = _finding("size_mismatch", 3, (2,)), _finding("not_completed", 9, (1,))
    result = _with_ran_ahead([before, _finding("missing_ranks", 7, (2, 3)), after], graph)
    assert [f.kind for f in result] == ["size_mismatch", "extra_op", "not_completed"]
    assert result[0] is before and result[2] is after
    # rank 3 issued no op of tp, rank 2 did: the last of theirs is rank 2's
    assert result[1].ranks == (0, 1)
    assert result[1].detail == ("ranks 0-1 issued it alone; ranks 2-3 never did and wait for nobody (their last op in tp "
                                "is #6)")


def _main(*functions: str) -> Thread:
    """A training thread in the program's own train.py, outermost function last."""
    return Thread("MainThread", tuple(("train.py", 10 + i, name) for i, name in enumerate(functions)))


def test_a_culprit_whose_stack_its_peers_share_is_shown_beside_theirs():
    group = SimpleNamespace(key=("dp",), name="dp", label="dp", ranks=(0, 1, 2, 3))
    mains = {0: _main("step", "main"), 1: _main("step", "main"), 2: _main("step", "main"), 3: _main("load", "main")}
    apart = {seen.rank: seen for seen in _stacks_apart([0], [group], mains)}
    # rank 3 is the odd one out; rank 0, a culprit, is not, and is shown beside the stack its peers share
    assert sorted(apart) == [0, 3]
    assert apart[3].odd and not apart[0].odd
    assert (apart[0].agreeing, apart[0].peers, apart[0].frames == apart[0].peers_frames) == (2, 3, True)
    # a rank that is neither a culprit nor an odd one out is not shown
    assert not {seen.rank for seen in _stacks_apart([], [group], mains)} - {3}


def test_a_culprit_is_shown_beside_the_peers_of_its_smallest_group_where_any_peer_has_a_stack():
    # rank 1, rank 0's one peer in the pair, left no stack; rank 0's dp peers did
    pair = SimpleNamespace(key=("pair",), name="pair", label="pair", ranks=(0, 1))
    mains = {0: _main("step", "main"), 2: _main("step", "main"), 3: _main("step", "main")}
    (seen,) = _stacks_apart([0], [pair, _group_of(4)], mains)
    assert (seen.rank, seen.group.name, seen.agreeing, seen.peers, seen.odd) == (0, "dp", 2, 3, False)


def test_only_the_ranks_that_wait_for_ranks_stuck_below_pytorch_are_said_to():
    """Ranks 0-1 stuck in tp's op; rank 2 waits in x's for rank 1, rank 3 in y's for rank 2 (not stuck)."""
    groups = {"0": ("default_pg", (0, 1, 2, 3)), "1": ("tp", (0, 1)), "2": ("x", (1, 2)), "3": ("y", (2, 3))}
    result = after_one_world_op(groups, {0: "1", 1: "1", 2: "2", 3: "3"})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (0, 1))
    assert result.evidence == ("completion recorded: every member issued it, ranks 0-1 never completed it",
                               "consequence: rank 2 waits in other ops for ranks stuck below PyTorch")


def test_a_finding_that_names_no_culprit_is_no_root_cause():
    """Rank 1 never joined tp's op (ranks 0 and 4 wait in it); rank 2 waits in x's for rank 1, so
    it never sent what rank 3's recv waits for: the unmatched recv names rank 2, no culprit."""
    groups = {"0": ("default_pg", (0, 1, 2, 3, 4)), "1": ("tp", (0, 1, 4)), "2": ("x", (1, 2))}
    result = after_one_world_op(groups, {0: "1", 1: None, 2: "2", 3: p2p("recv", 3, 2, 1, state="started"), 4: "1"})
    assert (result.verdict, result.culprit_ranks) == ("desync", (1,))
    assert [(f.kind, f.group.desc, f.ranks, f.root_cause) for f in result.findings] == [
        ("missing_ranks", "tp", (1,), True), ("p2p_unmatched", "default_pg", (2,), False), ("missing_ranks", "x", (1,), False)]


def test_each_culprits_cause_in_words():
    graph = SimpleNamespace(unasked=set(), unanswered={2}, done_partner=lambda blocker: None, blockers={}, op_of={},
                            p2p_unrecorded=False)
    passed = SimpleNamespace(health=(HealthCheck("gpu", True, "passed"),))
    causes = _causes([0, 1, 2, 3], {0: "mismatch"}, set(), {0: passed, 1: passed, 3: SimpleNamespace(health=())}, graph)
    assert causes == {
        0: ("divergence", "issued other ops than its peers: its program took another path"),  # a passed check is no cause
        1: ("compute_or_data_stall", "in no collective: computing or loading data"),
        2: ("process_gone", "did not answer frtrace live: its process may be gone or its host unreachable"),
        3: ("compute_or_data_stall", "in no collective: computing or loading data")}


def _group_of(size: int) -> SimpleNamespace:
    return SimpleNamespace(key=("dp",), name="dp", label="dp", ranks=tuple(range(size)))


def test_culprits_come_first_among_the_odd_ones_out():
    mains = {rank: _main("step", "main") for rank in range(7)}
    mains[0], mains[3] = _main("load", "main"), _main("save", "main")
    assert [seen.rank for seen in _stacks_apart([3], [_group_of(7)], mains)] == [3, 0]


def test_no_rank_is_the_odd_one_out_where_its_peers_split_in_halves():
    # rank 0's six peers: three at one stack, three at another; no stack is most of theirs
    mains = {rank: _main("step" if rank < 4 else "save", "main") for rank in range(1, 7)} | {0: _main("load", "main")}
    assert _stacks_apart([], [_group_of(7)], mains) == ()


def test_an_odd_one_out_with_no_line_of_its_own_is_said_where_its_stack_parts_and_that_it_has_no_frame_of_its_own():
    library = (("/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 0, "barrier"),)
    peers = (("train.py", 5, "main"), ("train.py", 9, "step"))
    seen = StackApart(5, _group_of(4), library, peers, 3, 3, 0, True)
    assert _odd_ones_said((seen,), {}) == ({5: (
        "rank 5 is in no frame of its own", "3 of its 3 dp peers are at train.py:9 in step; their stacks part at "
                                            "distributed_c10d.py in barrier against train.py:5 in main")}, 0)


def test_an_odd_one_out_whose_peers_have_no_frame_of_their_own_is_said_so():
    library = (("/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 0, "barrier"),)
    seen = StackApart(5, _group_of(4), (("train.py", 5, "main"), ("train.py", 9, "load")), library, 3, 3, 0, True)
    assert _odd_ones_said((seen,), {5: "at train.py:9 in load"}) == ({5: (
        "rank 5 is at train.py:9 in load", "3 of its 3 dp peers are in no frame of their own; their stacks part at "
                                           "train.py:5 in main against distributed_c10d.py in barrier")}, 0)


def test_a_second_op_stuck_below_pytorch_is_counted_in_the_headline():
    groups = {"0": ("default_pg", (0, 1, 2, 3)), "1": ("x", (0, 1)), "2": ("y", (2, 3))}
    result = after_one_world_op(groups, {0: "1", 1: "1", 2: "2", 3: "2"})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (0, 1, 2, 3))
    assert result.headline == ("STUCK: ranks 0-1 never completed all_reduce #1 of x, which every member issued: stuck below "
                               "PyTorch (NCCL, network or a GPU) (and 1 more stuck op, see the findings)")


@pytest.mark.parametrize("groups", [4, 5])
def test_the_headline_names_three_further_culprits_and_counts_the_rest(groups):
    """Groups of 3 (g1, g2, ...), each with one rank that never joined its op: the first line says
    the first culprit and three further ones, then how many more."""
    ranks = range(3 * groups)
    by_group = {"0": ("default_pg", tuple(ranks))} | {str(g + 1): (f"g{g + 1}", (3 * g, 3 * g + 1, 3 * g + 2)) for g in range(groups)}
    result = after_one_world_op(by_group, {r: (str(r // 3 + 1) if r % 3 else None) for r in ranks})
    assert result.culprit_ranks == tuple(range(0, 3 * groups, 3))
    further = "; ".join(f"rank {3 * g} never joined all_reduce #1 of g{g + 1}" for g in (1, 2, 3))
    more = "; and 1 more, see the findings" if groups == 5 else ""
    assert result.headline == ("DESYNC: rank 0 never joined all_reduce #1 of g1 (2 ranks wait in it); rank 0 is in no "
                               f"collective (all its ops completed); {further}{more} ({groups} independent desyncs)")


def test_late_arrivals_in_two_groups_are_counted_in_the_headline():
    head = _steps(2, gap_s=0.01)

    def ops_of(rank):  # rank 2 issued default_pg's last op and other's second 7 s after its peers
        late = 7.0 if rank == 2 else 0.0
        return head + [_op(1, 0.5, pg="1", desc="other"), _op(len(head) + 1, 1.0 + late),
                       _op(2, 1.1 + late, pg="1", desc="other")]

    result = _run({r: make_dump(ops_of(r)) for r in range(4)})
    assert [(f.kind, f.group.label, f.ranks) for f in result.findings] == [
        ("late_arrival", "default_pg", (2,)), ("late_arrival", "other", (2,))]
    assert result.headline.endswith("the others had given up on it by then (+1 more group(s) with a late arrival)")


def test_an_op_one_rank_never_completed_beside_a_member_that_recorded_nothing_is_undecided_in_the_singular():
    """x holds ranks 1 and 3: rank 1 started x's op, rank 3's recorder was off (SYNTHETIC NCCL)."""
    groups = {"0": ("default_pg", (0, 1, 2, 3)), "1": ("x", (1, 3))}
    world = entry(seq=1, state="completed", backend="nccl")
    dumps = {0: nccl([world], groups), 1: nccl([world, entry(pg="1", desc="x", seq=1, state="started", backend="nccl")], groups),
             2: nccl([world], groups), 3: {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}}
    result = run(dumps)
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())
    assert result.headline == ("INCONCLUSIVE: all_reduce #1 of x never completed on rank 1, but rank 3 recorded nothing "
                               "(recorder off): whether it waits for them cannot be told")
    # the op is still where the report shows the hang starts; rank 3 is not said to have issued it
    assert [(f.kind, f.ranks, f.root_cause, f.detail) for f in result.findings] == [(
        "not_completed", (1,), True, "issued by 1 of 2 members (rank 3's dump does not show it), not completed on rank 1 "
                                     "(state started)")]


def test_each_culprit_with_a_stack_has_it_said_beside_its_cause_and_a_program_line_decides_nothing():
    # rank 0 left no stack; ranks 1 and 2 are in their program's own line
    causes = {0: ("compute_or_data_stall", "computing"), 1: ("unknown", "in no op"), 2: ("unknown", "in no op")}
    mains = {1: _main("step", "main"), 2: _main("step", "main")}
    places = {1: "at train.py:10 in step", 2: "at train.py:10 in step"}
    changed = _with_stacks(causes, {2}, mains, places)
    assert sorted(changed) == [1, 2]
    # an unknown cause is open only where the dumps left the rank undecided (2): there the line cannot tell
    assert changed[1] == ("unknown", "in no op; its Python stack: at train.py:10 in step", None)
    assert changed[2] == ("unknown", "in no op; its Python stack, at train.py:10 in step, cannot tell: a wait on a request "
                                     "(work.wait()) shows as the line that called it, as compute does", None)


def test_an_op_ranks_ran_ahead_in_that_no_idle_rank_issued_any_of_is_said_so_and_other_findings_there_stay():
    key = ("coll", TP.key, 7)
    graph = SimpleNamespace(ran_ahead={key: (0, 1)}, waits_on={key: (2, 3)}, views={TP.key: SimpleNamespace(known_last={})})
    mismatch = _finding("size_mismatch", 7, (1,))
    extra, kept = _with_ran_ahead([_finding("missing_ranks", 7, (2, 3)), mismatch], graph)
    assert extra.detail == "ranks 0-1 issued it alone; ranks 2-3 never did and wait for nobody (they issued no op of tp)"
    assert kept is mismatch  # only a missing-ranks finding is read as the op some ran ahead in


def test_a_rank_with_a_dump_that_frtrace_live_did_not_ask_is_not_said_to_lack_an_address():
    graph = SimpleNamespace(unasked={0, 1}, unanswered=set(), done_partner=lambda blocker: None, blockers={}, op_of={},
                            p2p_unrecorded=False)
    causes = _causes([0, 1], {}, set(), {1: SimpleNamespace(health=())}, graph)
    assert causes[0] == ("unknown", "left no debug-server address for frtrace live to ask: it never started the debug "
                                    "server; whether its process is alive cannot be told")
    assert causes[1] == ("compute_or_data_stall", "in no collective: computing or loading data")


def test_an_odd_one_out_whose_peers_stack_is_a_start_of_its_own_is_said_with_no_place_of_parting():
    peers = (("train.py", 5, "main"), ("train.py", 9, "step"))
    mine = peers + (("train.py", 20, "save"), ("checkpoint.py", 7, "write"))
    seen = StackApart(5, _group_of(4), mine, peers, 3, 3, 2, True)
    assert _odd_ones_said((seen,), {5: "at checkpoint.py:7 in write"}) == ({5: (
        "rank 5 is at checkpoint.py:7 in write", "3 of its 3 dp peers are at train.py:9 in step")}, 0)


def test_a_culprit_in_an_op_a_member_whose_dump_is_older_holds_stays_named():
    # rank 3's dump is older than the end, but it holds rank 0's op, and nobody went past it
    graph = _graph({0: _blocked(5)}, {0: 5, 1: 5, 2: 5, 3: 5}, unseen=frozenset({3}))
    assert _without_unseen([(0, None)], graph, {3: "older"}, frozenset()) == ([(0, None)], [])


def test_a_rank_of_three_whose_two_peers_share_another_stack_is_the_odd_one_out():
    mains = {0: _main("load", "main"), 1: _main("step", "main"), 2: _main("step", "main")}
    (seen,) = _stacks_apart([], [_group_of(3)], mains)
    assert (seen.rank, seen.odd, seen.agreeing, seen.peers) == (0, True, 2, 2)


def test_one_idle_rank_that_issued_no_op_of_the_group_is_said_in_the_singular():
    key = ("coll", TP.key, 7)
    graph = SimpleNamespace(ran_ahead={key: (0, 1, 3)}, waits_on={key: (2,)}, views={TP.key: SimpleNamespace(known_last={})})
    (extra,) = _with_ran_ahead([_finding("missing_ranks", 7, (2,))], graph)
    assert extra.detail == "ranks 0-1,3 issued it alone; rank 2 never did and waits for nobody (it issued no op of tp)"
