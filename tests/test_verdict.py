"""The verdict's words and the rules around it, read as a user reads them: headlines, evidence,
notes, and which findings come first."""

from __future__ import annotations

from pathlib import Path

import pytest

import accuracy
from conftest import entry, make_dump, ops
from test_matcher import WORLD4, after_one_world_op, nccl, p2p, run


def test_a_clean_headline_counts_the_ranks_the_groups_and_the_collectives_every_member_issued():
    result = run({r: make_dump(ops(3)) for r in range(4)})
    assert result.headline == "CLEAN: 4 ranks, 1 group, 3 collectives matched; no desync"
    assert result.evidence == ("every collective matched on every member that issued it; nobody waits for another rank",)
    one = run({r: make_dump(ops(1)) for r in range(2)})
    assert one.headline == "CLEAN: 2 ranks, 1 group, 1 collective matched; no desync"


def test_a_clean_headline_names_a_missing_dump_nobody_waits_for():
    # rank 3 left no dump; ranks 0-2 issued #1-#2 of the world and completed them: both matched on
    # every member that left a dump, and the missing dump is said
    result = run({r: nccl(ops(2, backend="nccl", state="completed"), WORLD4) for r in range(3)})
    assert result.verdict == "clean", result.headline
    assert result.headline == ("CLEAN: 3 ranks, 1 group, 2 collectives matched; no desync "
                               "(no dump from rank 3, and nobody waits for it)")


@pytest.mark.parametrize("states", [
    ("completed", "completed", "scheduled"),  # completion recorded, by "completed"
    ("started",),  # or by "started" alone
])
def test_a_backend_frtrace_does_not_know_tracks_completion_where_its_states_say_so(states):
    dumps = {r: make_dump([entry(seq=s, backend="custom", state=state) for s, state in enumerate(states, 1)]) for r in range(4)}
    result = run(dumps)
    last = len(states)
    assert result.verdict == "stuck", result.headline
    assert result.headline == (f"STUCK: ranks 0-3 never completed all_reduce #{last} of default_pg, which every member "
                               f"issued: stuck below PyTorch (NCCL, network or a GPU)")
    assert result.evidence == ("completion recorded: every member issued it, ranks 0-3 never completed it",)
    assert set(result.culprit_entries) == {0, 1, 2, 3} and result.culprit_entries[0].collective_seq_id == last


def test_a_backend_frtrace_does_not_know_without_completion_states_reads_like_gloo():
    result = run({r: make_dump([entry(seq=1, backend="custom", state="scheduled")]) for r in range(4)})
    assert result.verdict == "clean", result.headline


def test_every_rank_breaking_its_ops_size_rule_alike_is_inconclusive_not_blamed():
    # all four members gather 3 x their input: a group of 3 by its sizes, 4 by its members
    dumps = {r: make_dump([entry(op="all_gather", sizes=((2,),), out=((6,),))]) for r in range(4)}
    result = run(dumps)
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    detail = ("every rank gathers 6 elements from 2 each of 4 ranks: the group likely has another size than its members "
              "show (a member left no dump?)")
    assert result.headline == f"INCONCLUSIVE: size mismatch in all_gather #1 of default_pg: {detail}"
    assert result.evidence == (f"undecided: {detail}",)
    (finding,) = result.findings
    assert finding.kind == "size_mismatch" and finding.decided is False and finding.ranks == ()


def test_op_names_and_backends_without_rules_are_listed_once_with_the_first_rank_that_used_them():
    dumps = {0: make_dump([entry(seq=1, op="frobnicate", backend="mybackend")]),
             1: make_dump([entry(seq=1, op="frobnicate", backend="mybackend"), entry(seq=2, op="", backend="other")])}
    notes = run(dumps).warnings
    assert "op names without size rules, compared by name only: '(empty name)' (first on rank 1), 'frobnicate' (first on rank 0)" in notes
    assert "unknown backends, read like NCCL: 'mybackend' (rank 0), 'other' (rank 1)" in notes


def test_point_to_point_ops_are_not_taken_for_unknown_op_names():
    pair = {"0": ("default_pg", range(2))}
    result = run({0: nccl([p2p("send", 0, 1, 1)], pair), 1: nccl([p2p("recv", 1, 0, 1)], pair)})
    assert result.verdict == "clean" and result.warnings == ()


# ---------------------------------------------------------------------------- point to point
def _any_recv(me, seq, state="scheduled"):
    return entry(op=f"recv {me}<-?", seq=0, p2p_seq=seq, is_p2p=True, state=state, backend="nccl", sizes=((4,),))


PAIR, TRIO = {"0": ("default_pg", range(2))}, {"0": ("default_pg", range(3))}


@pytest.mark.parametrize("dropped, op, detail", [
    ("recv", "send 0->1", "rank 0's send 0->1 (p2p #2) has no matching recv on rank 1 (2 unmatched)"),
    ("send", "recv 1<-0", "rank 1's recv 1<-0 (p2p #2) has no matching send on rank 0 (2 unmatched)"),
])
def test_an_unmatched_p2p_op_is_named_by_its_rank_number_and_what_it_lacks(dropped, op, detail):
    posted = {"send": [p2p("send", 0, 1, 1)], "recv": [p2p("recv", 1, 0, 1)]}
    side = "send" if dropped == "recv" else "recv"
    me, peer = (0, 1) if side == "send" else (1, 0)
    posted[side] += [p2p(side, me, peer, 2, state="scheduled"), p2p(side, me, peer, 3, state="scheduled")]
    result = run({0: nccl(posted["send"], PAIR), 1: nccl(posted["recv"], PAIR)})
    (finding,) = result.findings
    assert (finding.kind, finding.op, finding.p2p_seq_id, finding.ranks, finding.expected_ranks) == ("p2p_unmatched", op, 2, (peer,), (0, 1))
    assert finding.detail.startswith(detail + " [decided by wait-for graph: ")
    assert result.culprit_ranks == (peer,) and finding.root_cause


def test_receives_from_any_rank_with_several_senders_cannot_say_who_was_dropped():
    dumps = {0: nccl([p2p("send", 0, 2, 1, state="scheduled")], TRIO), 1: nccl([p2p("send", 1, 2, 1, state="scheduled")], TRIO),
             2: nccl([_any_recv(2, 1), _any_recv(2, 2)], TRIO)}
    result = run(dumps)
    why = "rank 2 posted receive(s) from any rank, and ranks 0, 1 send to it: which send each took cannot be told"
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == f"INCONCLUSIVE: p2p unmatched in send 0->2 #1 of default_pg: {why}"
    assert [(f.kind, f.op, f.p2p_seq_id, f.ranks, f.decided) for f in result.findings] == [
        ("p2p_unmatched", "send 0->2", 1, (), False), ("p2p_unmatched", "send 1->2", 1, (), False)]


def test_a_receive_from_any_rank_that_completed_takes_no_later_send():
    dumps = {0: nccl([p2p("send", 0, 2, 1), p2p("send", 0, 2, 2, state="scheduled")], TRIO), 1: nccl([], TRIO),
             2: nccl([_any_recv(2, 1, state="completed")], TRIO)}
    result = run(dumps)
    assert result.culprit_ranks == (2,)
    assert result.findings[0].detail.startswith("rank 0's send 0->2 (p2p #2) has no matching recv on rank 2 (1 unmatched)")


# ---------------------------------------------------------------------------- evidence, order
def _skip_on_rank2(health: dict[int, dict]) -> dict[int, dict]:
    """Four gloo ranks; rank 2 never issued #3 and went on (its dump ends at #2): the culprit."""
    dumps = {r: make_dump(ops(2 if r == 2 else 3)) for r in range(4)}
    for rank, checks in health.items():
        dumps[rank]["health_check_results"] = checks
    return dumps


@pytest.mark.parametrize("checks, said", [
    ({"gpu": "fail", "nic": "ok"}, "health check: rank 2's gpu check failed"),
    ({"gpu0": False, "gpu1": False, "nic0": "error", "nic1": "down", "nvlink": "failed", "disk": True},
     "health check: rank 2's gpu0, gpu1, nic0, nic1 checks failed"),  # the first four of five
])
def test_a_culprits_failed_health_checks_are_evidence(checks, said):
    result = run(_skip_on_rank2({2: checks, 1: {"gpu": "fail"}}))  # rank 1 is no culprit: its checks are not said
    assert result.culprit_ranks == (2,)
    assert result.evidence[-1] == said and not any("rank 1's" in e for e in result.evidence)
    assert result.findings[0].detail.endswith(f"; {said}]")


def test_a_culprit_whose_checks_passed_has_no_health_evidence():
    result = run(_skip_on_rank2({2: {"gpu": "ok", "nic": True}}))
    assert result.culprit_ranks == (2,) and not any(e.startswith("health check") for e in result.evidence)


def test_who_waits_for_whom_is_kept_for_the_report_and_p2p_ops_have_no_collective_number():
    skip = run(_skip_on_rank2({}))
    assert skip.waits == (("all_reduce #3 of default_pg", (0, 1, 3), (2,)),)
    assert {r: (what, group.ranks, seq) for r, (what, group, seq) in skip.blocked_in.items()} == {
        r: ("all_reduce #3 of default_pg", (0, 1, 2, 3), 3) for r in (0, 1, 3)}  # rank 2 went on: blocked nowhere
    sends = [p2p("send", 0, 1, 1), p2p("send", 0, 1, 2, state="scheduled")]
    pair = run({0: nccl(sends, PAIR), 1: nccl([p2p("recv", 1, 0, 1)], PAIR)})
    assert pair.waits == (("send 0->1 (p2p #2) of default_pg", (0,), (1,)),)
    assert {r: (what, seq) for r, (what, _, seq) in pair.blocked_in.items()} == {0: ("send 0->1 (p2p #2) of default_pg", None)}


# ---------------------------------------------------------------------------- missing ranks
def _finding(result) -> tuple:
    (finding,) = result.findings
    return finding.kind, finding.collective_seq_id, finding.op, finding.ranks, finding.detail.split(" [decided by ")[0]


@pytest.mark.parametrize("backend, after", [
    ("nccl", ""), ("gloo", " (the dumps do not record completion: this reads them as taken during a hang)")])
def test_a_rank_that_never_issued_what_the_others_wait_in_is_named_with_its_last_op(backend, after):
    state = "completed" if backend == "nccl" else "scheduled"
    dumps = {r: nccl(ops(2, backend=backend, state=state) + ([] if r == 2 else [entry(seq=3, backend=backend, state="scheduled")]), WORLD4)
             for r in range(4)}
    assert _finding(run(dumps)) == ("missing_ranks", 3, "all_reduce", (2,),
                                    f"rank 2 never issued it; ranks 0-1,3 did (rank 2's last op in default_pg is #2){after}")


def test_a_rank_without_a_dump_that_the_others_wait_for_is_said_so():
    dumps = {r: nccl(ops(2, backend="nccl", state="completed") + [entry(seq=3, backend="nccl", state="scheduled")], WORLD4) for r in range(3)}
    assert _finding(run(dumps)) == ("missing_ranks", 3, "all_reduce", (3,), "rank 3 left no readable dump; ranks 0-2 wait in it")


def test_a_collective_some_never_issued_and_nobody_waits_in_is_still_reported_with_its_number_and_op():
    # a broadcast's root and the receivers served first finish before others issue it: rank 3 may never have
    dumps = {r: nccl(ops(3 if r < 3 else 2, backend="nccl", state="completed", op="broadcast"), WORLD4) for r in range(4)}
    result = run(dumps)
    assert _finding(result) == ("missing_ranks", 3, "broadcast", (3,),
                                "rank 3 never issued it, though ranks 0-2 did and nobody is waiting in it")
    assert result.headline == ("DESYNC: missing ranks in broadcast of default_pg: rank 3 never issued it, "
                               "though ranks 0-2 did and nobody is waiting in it")
    assert result.stale == {}


@pytest.mark.parametrize("first_older, said", [(3, "rank 3's is older"), (2, "ranks 2-3's are older")])
def test_a_rank_whose_dump_ends_before_a_collective_its_peers_completed_is_an_older_dump_not_a_culprit(first_older, said):
    # the others completed all_reduce #3, which waits for every member: the older ranks joined it, their dumps are older
    dumps = {r: nccl(ops(3 if r < first_older else 2, backend="nccl", state="completed"), WORLD4) for r in range(4)}
    result = run(dumps)
    assert (result.verdict, result.culprit_ranks, result.findings) == ("clean", (), ())
    assert result.headline.endswith(f"no desync; the dumps were taken at different moments ({said}, see the notes)")
    assert list(result.stale) == list(range(first_older, 4))
    assert result.stale[3].startswith("rank 3's dump is older than its peers': it ends at #2 of default_pg, but rank 0's "
                                      "shows #3 finished (completed), which rank 3 must have joined")
    assert result.stale[3] in result.warnings


def test_a_collective_its_issuers_never_completed_names_the_rank_that_never_issued_it():
    dumps = {r: nccl(ops(2, backend="nccl", state="completed", op="broadcast")
                     + ops(1, start=3, backend="nccl", op="broadcast") * (r < 3), WORLD4) for r in range(4)}
    result = run(dumps)
    assert (result.verdict, result.culprit_ranks, result.stale) == ("desync", (3,), {})


# ---------------------------------------------------------------------------- several ranks in one sentence
def test_ranks_that_ran_ahead_of_an_idle_majority_are_the_culprits_in_plural_words():
    # ranks 0-1 issued #3, ranks 2-7 stopped after #2 and wait for nobody: 2 ran ahead, not 6 behind
    result = run({r: make_dump(ops(3 if r < 2 else 2)) for r in range(8)})
    assert result.culprit_ranks == (0, 1)
    assert result.headline == ("DESYNC: ranks 0-1 ran ahead: they issued all_reduce #3 of default_pg, which ranks 2-7 never "
                               "issued, and wait in it; ranks 2-7 wait for nobody")
    assert result.evidence == ("majority: 6 of 8 members never issued all_reduce #3 of default_pg and wait for nobody; "
                               "ranks 0-1 issued it alone",)
    (finding,) = result.findings
    assert (finding.kind, finding.op, finding.ranks) == ("extra_op", "all_reduce", (0, 1))
    assert finding.detail.startswith("ranks 0-1 issued it alone; ranks 2-7 never did and wait for nobody "
                                     "(their last op in default_pg is #2) [decided by majority: ")


def test_ranks_behind_a_majority_are_named_in_plural_words():
    result = run({r: make_dump(ops(3 if r < 6 else 2)) for r in range(8)})
    assert result.culprit_ranks == (6, 7)
    assert result.headline == ("DESYNC: ranks 6-7 never joined all_reduce #3 of default_pg (6 ranks wait in it); ranks 6-7 "
                               "are in no collective")
    assert result.evidence == ("majority: 6 of 8 members issued all_reduce #3 of default_pg; ranks 6-7 never did and wait for nobody",
                               "where: ranks 6-7 are in no collective: their last op, all_reduce #2 of default_pg, was joined by "
                               "every member (or in a send or recv, which gloo does not record)")


def test_as_many_ranks_ahead_as_behind_is_undecided_in_plural_words():
    result = run({r: make_dump(ops(3 if r < 2 else 2)) for r in range(4)})
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.evidence == ("undecided: ranks 0-1 issued all_reduce #3 of default_pg, ranks 2-3 never did and wait for "
                               "nobody: as many members ran ahead as stayed behind, and no sibling group shows which is right",)


def _nccl_done(n):
    return ops(n, backend="nccl", state="completed")


def test_ranks_that_never_joined_are_described_one_clause_per_situation():
    # 0-1 wait in #3; 3 completed everything it issued; 4-5 recorded nothing; 6 issued #1-#2 and is
    # blocked in an op of its pair with 5, which 5 never issued (so 6 waits for 5 and is no culprit)
    groups = {"0": ("default_pg", range(7)), "1": ("pair", (5, 6))}
    dumps = {0: _nccl_done(2) + [entry(seq=3, backend="nccl")], 1: _nccl_done(2) + [entry(seq=3, backend="nccl")],
             2: _nccl_done(3), 3: _nccl_done(2), 4: [], 5: [], 6: _nccl_done(2) + [entry(seq=1, pg="1", desc="pair", backend="nccl")]}
    dumps[2][-1]["state"] = "scheduled"
    result = run({r: nccl(raw, groups) for r, raw in dumps.items()})
    assert result.culprit_ranks == (3, 4, 5)
    # whether pair #1 comes before the world's #3 in the program, no other rank shows: rank 6 may have skipped #3
    # the first line says the culprits; what is undecided is evidence, the report's "Undecided:" line
    assert result.headline == ("DESYNC: ranks 3-5 never joined all_reduce #3 of default_pg (3 ranks wait in it); rank 3 is in "
                               "no collective (all its ops completed); ranks 4-5 have an empty buffer (no op in flight, or none recorded)")
    assert result.evidence[0] == "wait-for graph: ranks 0-2 wait in all_reduce #3 of default_pg for ranks 3-5, who wait for nobody"
    assert result.evidence[-1] == ("undecided: whether rank 6, blocked in one op while others wait for it in another, skipped "
                                   "that other op cannot be told (no other rank shows their order)")
    import io

    from frtrace.outputs.report import render_text

    out = io.StringIO()
    render_text(result, {}, (), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == result.headline and "undecided" not in lines[0]  # the first line, which people paste
    (said,) = [line for line in lines if "whether rank 6" in line]  # said once, on its own line
    assert said.startswith("Undecided: whether rank 6, blocked in one op") and "Evidence: " not in said


def test_ranks_whose_buffers_wrapped_past_the_group_may_never_have_joined():
    # 0-1 wait in #3 of the world; 3 left no dump; the wrapped buffers of 2, 4, 5 and 6 hold only
    # other groups' ops: whether they issued #3 cannot be read, and the words say so
    groups = {"0": ("default_pg", range(7)), "1": ("a", (2, 4)), "2": ("b", (4, 5)), "3": ("solo", (6,))}
    def of(pg, desc, seqs, state="completed", backend="nccl"):
        return [entry(seq=s, pg=pg, desc=desc, backend=backend, state=state) for s in seqs]
    raw = {0: _nccl_done(2) + [entry(seq=3, backend="nccl")], 1: _nccl_done(2) + [entry(seq=3, backend="nccl")],
           2: of("1", "a", (7, 8)), 4: of("1", "a", (7, 8)) + of("2", "b", (9,), state="scheduled"),
           5: of("2", "b", (8, 9)), 6: of("3", "solo", (4, 5), state="scheduled", backend="gloo")}
    result = run({r: nccl(entries, groups, first_record=50 if r >= 2 else 0) for r, entries in raw.items()})
    unseen = "rank 3 left no readable dump; ranks 2,4-6 hold no op of default_pg (the buffer wrapped past it)"
    assert result.culprit_ranks == (2, 3, 4, 5, 6)
    assert result.headline == ("DESYNC: ranks 2-6 may never have joined all_reduce #3 of default_pg (2 ranks wait in it); "
                               "ranks 2,5 are in no collective (all their ops completed); rank 3 left no readable dump; "
                               "rank 4 is blocked in all_reduce #9 of b, which every member joined; (+1 more situations, see the findings)")
    assert result.evidence[0] == f"missing dump: {unseen}, and ranks 0-1 wait for them"
    missing = result.findings[0]
    assert (missing.kind, missing.ranks) == ("missing_ranks", (2, 3, 4, 5, 6))
    assert missing.detail.startswith(f"{unseen}; ranks 0-1 wait in it [decided by missing dump: ")
    assert [(f.kind, f.op, f.collective_seq_id, f.ranks) for f in result.findings[1:]] == [("not_completed", "all_reduce", 9, (4,))]


# ---------------------------------------------------------------------------- who waits, with other ranks around
QUAD = {"0": ("default_pg", range(4))}


def test_a_receive_from_any_rank_that_nobody_sends_to_waits_for_every_other_member():
    # rank 0 sends to rank 1 (matched); nobody sends to rank 2, which posted a receive from any rank
    dumps = {0: _nccl_done(1) + [p2p("send", 0, 1, 1)], 1: _nccl_done(1) + [p2p("recv", 1, 0, 1)],
             2: _nccl_done(1) + [_any_recv(2, 1)], 3: _nccl_done(1)}
    result = run({r: nccl(raw, QUAD) for r, raw in dumps.items()})
    assert result.culprit_ranks == (0, 1, 3)
    assert result.headline == ("DESYNC: ranks 0-1,3 never posted the send matching rank 2's recv 2<-? (p2p #1) of default_pg; "
                               "ranks 0-1,3 are in no collective (all their ops completed)")


@pytest.mark.parametrize("first", ["receive from any rank, matched", "collective every member joined"])
def test_a_rank_waiting_for_nobody_missing_does_not_hide_the_ranks_after_it(first):
    # ranks 0-1 are blocked where nobody is missing; rank 2 is blocked in world #2, which ranks 0-1,3 never issued
    groups = {"0": ("default_pg", range(4)), "1": ("pair", (0, 1))}
    if first.startswith("receive"):
        zero, one = [_any_recv(0, 1)], [p2p("send", 1, 0, 1, state="scheduled")]
    else:
        zero = one = [entry(seq=1, pg="1", desc="pair", backend="nccl")]
    dumps = {0: _nccl_done(1) + zero, 1: _nccl_done(1) + one, 2: _nccl_done(1) + [entry(seq=2, backend="nccl")], 3: _nccl_done(1)}
    result = run({r: nccl(raw, groups) for r, raw in dumps.items()})
    assert result.culprit_ranks == (2,)
    assert result.headline == ("DESYNC: rank 2 ran ahead: it issued all_reduce #2 of default_pg, which ranks 0-1,3 never issued, "
                               "and waits in it; ranks 0-1,3 wait for nobody")


# ---------------------------------------------------------------------------- mismatches nobody can be blamed for, and odd names
def test_an_all_to_all_every_member_sized_alike_that_cannot_add_up_blames_nobody():
    result = run({r: nccl([entry(op="all_to_all", sizes=((4,),), out=((5,),))], WORLD4) for r in range(4)})
    detail = "every rank sends 4 / receives 5 elements: the group sends 16 but receives 20, and no rank differs from the others"
    assert result.verdict == "inconclusive" and result.culprit_ranks == ()
    assert result.headline == f"INCONCLUSIVE: size mismatch in all_to_all #1 of default_pg: {detail}"
    (finding,) = result.findings
    assert finding.detail == detail  # an undecided finding is not said to be decided by anything


def test_a_size_rule_every_rank_breaks_alike_is_found_in_any_op_of_the_job():
    # the rule-breaking all_gather is the job's second distinct op (the column path flags ops by their code)
    result = run({r: make_dump(ops(1) + [entry(seq=2, op="all_gather", sizes=((2,),), out=((6,),))]) for r in range(4)})
    assert result.verdict == "inconclusive"
    assert [(f.kind, f.collective_seq_id) for f in result.findings] == [("size_mismatch", 2)]


def test_an_op_without_a_name_is_called_unnamed():
    dumps = {r: make_dump(ops(2)) for r in range(4)}
    dumps[1]["entries"][1]["profiling_name"] = "gloo:"
    result = run(dumps)
    assert result.headline == "DESYNC: rank 1 called unnamed op as #2 of default_pg where ranks 0,2-3 called all_reduce"
    assert result.findings[0].detail.startswith("rank 1: unnamed op where ranks 0,2-3 have all_reduce [decided by majority")


@pytest.mark.parametrize("odd_dtype", ["Float", "Half"])  # a dtype of its own does not make it a dtype mismatch
def test_coalesced_groups_that_differ_only_in_their_terminator_are_told_apart_in_the_headline(odd_dtype):
    def grouped(terminator, dtype="Float"):
        return [entry(seq=1, op="all_gather", sizes=((2,),), out=((8,),), dtype=dtype), entry(seq=1, op=terminator, sizes=())] + ops(1, start=2)
    dumps = {r: make_dump(grouped("ALLGATHER_coalesced", odd_dtype) if r == 1 else grouped("coalesced")) for r in range(4)}
    result = run(dumps)
    assert result.culprit_ranks == (1,)
    assert result.headline == ("DESYNC: type mismatch in coalesced(all_gather) #1 of default_pg: "
                               "rank 1: all_gather+ALLGATHER_coalesced where ranks 0,2-3 have all_gather+coalesced")


def test_every_op_stuck_below_pytorch_is_a_finding_with_the_states_it_was_left_in():
    # ranks 0-1: a matched send and recv, neither completed; group a: rank 2 started its
    # all_reduce, rank 3 scheduled it; group b: rank 4 completed it, rank 5 never did
    groups = {"0": ("default_pg", range(6)), "1": ("a", (2, 3)), "2": ("b", (4, 5))}
    def pair(pg, desc, state):
        return _nccl_done(1) + [entry(seq=1, pg=pg, desc=desc, backend="nccl", state=state)]
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1, state="scheduled")], 1: _nccl_done(1) + [p2p("recv", 1, 0, 1, state="scheduled")],
           2: pair("1", "a", "started"), 3: pair("1", "a", "scheduled"), 4: pair("2", "b", "completed"), 5: pair("2", "b", "scheduled")}
    result = run({r: nccl(entries, groups) for r, entries in raw.items()})
    # in a, rank 2's stream started the op and rank 3's never did: rank 3's GPU never reached it (issue 27)
    assert result.verdict == "stuck" and result.culprit_ranks == (0, 1, 3, 5)
    assert result.headline == ("STUCK: ranks 0-1 never completed send 0->1 (p2p #1) of default_pg, which both ends posted: "
                               "stuck below PyTorch (NCCL, network or a GPU) (and 2 more stuck ops, see the findings)")
    assert result.evidence == ("completion recorded: both ends posted send 0->1 (p2p #1) of default_pg, ranks 0-1 never completed it",
                               "op states: rank 3 left all_reduce #1 of a scheduled where every other member started it",
                               "completion recorded: every member issued all_reduce #1 of b, rank 5 never completed it")
    assert [(f.group.label, f.ranks, f.detail.split(" [decided by ")[0]) for f in result.findings] == [
        ("default_pg", (0, 1), "rank 0's send 0->1 (p2p #1) and rank 1's recv 1<-0 (p2p #1) both posted, completed on "
                               "neither (state scheduled)"),
        ("a", (3,), "issued by all 2 members; rank 3 never started it (scheduled) where rank 2 did: its GPU never reached it"),
        ("b", (5,), "issued by all 2 members, not completed on rank 5 (state scheduled)")]
    assert {rank: cause for rank, (cause, _) in result.causes.items()} == {
        0: "stuck_below_pytorch", 1: "stuck_below_pytorch", 3: "gpu_never_reached", 5: "stuck_below_pytorch"}


@pytest.mark.parametrize("state", ["scheduled", "started"])
def test_a_send_and_its_recv_both_posted_and_never_completed_are_stuck_below_pytorch_not_clean(state):
    """SYNTHETIC (NCCL records completion; gloo records no send or recv): ranks 0 and 1 posted a
    matched send and recv that never completed, and ranks 2-3 wait for them in the next
    all_reduce: a link lost under the pair, as a collective every member issued and none finished
    (was: CLEAN, 'nobody waits for another rank', where only the pair was left)."""
    world = {"0": ("default_pg", range(4))}
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1, state=state)], 1: _nccl_done(1) + [p2p("recv", 1, 0, 1, state=state)],
           2: _nccl_done(1) + [entry(seq=2, backend="nccl", state="started")],
           3: _nccl_done(1) + [entry(seq=2, backend="nccl", state="started")]}
    result = run({r: nccl(entries, world) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (0, 1))
    assert result.headline == ("STUCK: ranks 0-1 never completed send 0->1 (p2p #1) of default_pg, which both ends posted: "
                               "stuck below PyTorch (NCCL, network or a GPU)")
    assert result.evidence == ("completion recorded: both ends posted it, ranks 0-1 never completed it",
                               "consequence: ranks 2-3 wait in other ops for ranks stuck below PyTorch")
    alone = run({r: nccl(raw[r], {"0": ("default_pg", (0, 1))}) for r in (0, 1)})
    assert (alone.verdict, alone.culprit_ranks) == ("stuck", (0, 1))


PAIR = {"0": ("default_pg", (0, 1))}
EAGER = ("rank 1's recv 1<-0 (p2p #1) never completed (state scheduled), though rank 0's send 0->1 (p2p #1) did: the data "
         "was sent (a send that fits the receiver's buffer completes before its recv runs)")


def test_a_send_completed_before_its_recv_ran_is_the_recvs_partner_and_the_receiver_holds_the_link():
    """SYNTHETIC (NCCL records completion; gloo records no send or recv): NCCL completes a send that
    fits the receiver's buffer before the recv runs (NVIDIA/nccl#544). Rank 0 sent and completed
    its one send; rank 1 posted the recv and never completed it. Both buffers hold every op of the
    link, so the send is that recv's partner: rank 1 holds the link (was: 'rank 0 never posted
    the send', the completed send taken for an earlier recv's)."""
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1)], 1: _nccl_done(1) + [p2p("recv", 1, 0, 1, state="scheduled")]}
    result = run({r: nccl(entries, PAIR) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (1,))
    assert result.headline.startswith("STUCK: rank 1 never completed recv 1<-0 (p2p #1) of default_pg, which both ends posted")
    assert [(f.kind, f.ranks, f.detail.split(" [decided by ")[0]) for f in result.findings] == [("not_completed", (1,), EAGER)]
    # the sender gone on to wait for the receiver's next send: the receiver, behind in its own recv, is named
    raw[0].append(p2p("recv", 0, 1, 2, state="started"))
    result = run({r: nccl(entries, PAIR) for r, entries in raw.items()})
    assert result.culprit_ranks == (1,)
    assert result.headline == ("DESYNC: rank 1 never posted the send matching rank 0's recv 0<-1 (p2p #2) of default_pg; "
                               "rank 1 is blocked in recv 1<-0 (p2p #1) of default_pg, whose partner completed")
    assert ("not_completed", (1,), EAGER) in [(f.kind, f.ranks, f.detail) for f in result.findings]
    assert not any(f.kind == "p2p_unmatched" and f.ranks == (0,) for f in result.findings)
    # in a recv, not computing: its cause is below PyTorch (was: 'in no collective: computing or loading data')
    assert result.causes[1] == ("stuck_below_pytorch", "in recv 1<-0 (p2p #1) of default_pg, whose partner completed: "
                                "NCCL, the network or its GPU (a kernel before it that never ended)")


def test_a_recv_completed_beside_its_send_left_started_names_the_sender_not_the_receiver():
    """SYNTHETIC NCCL dumps: rank 1's recv completed, rank 0's send of it is still started: the data
    arrived, so rank 1 posted its end (was: 'rank 1 never posted the recv')."""
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1, state="started")], 1: _nccl_done(1) + [p2p("recv", 1, 0, 1)]}
    result = run({r: nccl(entries, PAIR) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (0,))
    assert [(f.kind, f.ranks, f.detail.split(" [decided by ")[0]) for f in result.findings] == [
        ("not_completed", (0,), "rank 0's send 0->1 (p2p #1) never completed (state started), though rank 1's recv 1<-0 "
                                "(p2p #1) did: the data arrived")]


def test_a_send_completed_before_a_larger_recv_is_compared_with_it():
    """SYNTHETIC NCCL dumps: rank 0's send of 4 elements completed, rank 1's recv of 8 waits for the
    rest (NCCL hangs a recv larger than its send): the pair's sizes differ, which a pair cannot
    pin on either side (was: 'no matching send on rank 0', the sizes never compared)."""
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1)], 1: _nccl_done(1) + [p2p("recv", 1, 0, 1, state="started", sizes=((8,),))]}
    result = run({r: nccl(entries, PAIR) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())
    assert result.findings[0].kind == "size_mismatch"
    assert result.findings[0].detail == "rank 0 sends [[4]] Float but rank 1 receives [[8]] Float; a pair cannot tell which side is wrong"


def test_a_recv_posted_in_a_batch_whose_send_completed_leaves_the_batch_to_its_other_op():
    """SYNTHETIC NCCL dumps: rank 0's send to rank 1 completed; rank 1 posted its recv in a batch
    with a send to rank 2, which rank 2 never received: the batch (and so the recv's recorded
    state) is held by that send. Rank 2 is named, nobody else (was: 'rank 1's recv has no
    matching send on rank 0', rank 0 named first)."""
    world = {"0": ("default_pg", (0, 1, 2))}
    batch = [p2p("recv", 1, 0, 1, state="scheduled"), p2p("send", 1, 2, 1, state="scheduled"),  # its ops: the batch's state
             entry(seq=1, op="coalesced", sizes=(), backend="nccl", p2p_seq=1, state="started")]  # the batch's end: seq id not bumped
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1)], 1: _nccl_done(1) + batch, 2: _nccl_done(1)}
    result = run({r: nccl(entries, world) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks) == ("desync", (2,))
    assert [(f.kind, f.ranks) for f in result.findings] == [("p2p_unmatched", (2,))]
    assert result.findings[0].detail.startswith("rank 1's send 1->2 (p2p #1) has no matching recv on rank 2")


@pytest.mark.parametrize("wrapped", [(), (1,), (0, 1)])
def test_a_sender_that_never_posted_the_send_a_recv_waits_for_is_named_whatever_the_buffers_hold(wrapped):
    """SYNTHETIC NCCL dumps: rank 0 sent twice, each received; rank 1's third recv waits. With
    every op of the link held, the sends are counted against the recvs; where a buffer wrapped,
    each completed op is an earlier pair's (as before): either way rank 0 never posted it."""
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1), p2p("send", 0, 1, 2)],
           1: _nccl_done(1) + [p2p("recv", 1, 0, 1), p2p("recv", 1, 0, 2), p2p("recv", 1, 0, 3, state="scheduled")]}
    result = run({r: nccl(entries, PAIR, first_record=100 if r in wrapped else 0) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks) == ("desync", (0,))
    assert result.headline == ("DESYNC: rank 0 never posted the send matching rank 1's recv 1<-0 (p2p #3) of default_pg; "
                               "rank 0 is in no collective (all its ops completed)")


def test_a_send_whose_peer_is_blocked_in_another_op_is_no_stuck_pair():
    """Rank 1 never reached its recv (its first unfinished op is an all_reduce rank 0 never
    issued): the send waits on rank 1's program, not below PyTorch."""
    world = {"0": ("default_pg", (0, 1))}
    raw = {0: _nccl_done(1) + [p2p("send", 0, 1, 1, state="started")],
           1: _nccl_done(1) + [entry(seq=2, backend="nccl", state="started"), p2p("recv", 1, 0, 1, state="scheduled")]}
    result = run({r: nccl(entries, world) for r, entries in raw.items()})
    assert [f for f in result.findings if f.kind == "not_completed"] == []
    assert result.verdict != "stuck"


def test_a_rank_whose_buffer_wrapped_past_the_group_is_not_said_to_have_never_issued_the_op():
    groups = {"0": ("default_pg", range(4)), "1": ("a", (3,))}
    dumps = {r: nccl(_nccl_done(2) + [entry(seq=3, backend="nccl")], groups) for r in range(3)}
    dumps[3] = nccl([entry(seq=s, pg="1", desc="a", backend="nccl", state="completed") for s in (7, 8)], groups, first_record=50)
    result = run(dumps)
    assert result.culprit_ranks == (3,)
    assert result.headline == ("DESYNC: rank 3 may never have joined all_reduce #3 of default_pg (3 ranks wait in it); "
                               "rank 3 is in no collective (all its ops completed)")
    assert result.evidence == ("majority: 3 of 4 members issued all_reduce #3 of default_pg; rank 3 shows no sign of it and waits for nobody",)
    assert result.findings[0].detail.startswith("rank 3 holds no op of default_pg (the buffer wrapped past it); ranks 0-2 wait in it [")


def test_ranks_that_did_not_send_to_a_receive_from_any_rank_are_not_said_to_have_wrapped_buffers():
    dumps = {0: _nccl_done(1), 1: _nccl_done(1), 2: _nccl_done(1) + [_any_recv(2, 1)]}  # rank 3 left no dump
    result = run({r: nccl(raw, QUAD) for r, raw in dumps.items()})
    assert result.evidence == ("missing dump: rank 3 left no readable dump, and rank 2 waits for it",)


# ---------------------------------------------------------------------------- queued behind the rank's own op
@pytest.mark.parametrize("rank3_tp, culprits, cause", [
    ("scheduled", (3,), "gpu_never_reached"),  # rank 3's GPU never reached tp #1, which rank 2 started
    ("started", (2, 3), "stuck_below_pytorch"),  # both started tp #1, neither finished it
])
def test_an_op_queued_behind_the_ranks_own_op_in_flight_is_no_gpu_that_never_reached_it(rank3_tp, culprits, cause):
    # world #2: ranks 0-1 started it; ranks 2-3 left it scheduled behind their own tp #1, which holds them
    groups = {"0": ("default_pg", range(4)), "1": ("tp", (2, 3))}

    def world(seq, state):
        return entry(seq=seq, backend="nccl", state=state)

    def tp(state):
        return entry(seq=1, pg="1", desc="tp", backend="nccl", state=state)

    raw = {0: [world(1, "completed"), world(2, "started")], 1: [world(1, "completed"), world(2, "started")],
           2: [world(1, "completed"), tp("started"), world(2, "scheduled")],
           3: [world(1, "completed"), tp(rank3_tp), world(2, "scheduled")]}
    result = run({r: nccl(entries, groups) for r, entries in raw.items()})
    assert (result.verdict, result.culprit_ranks, result.cause) == ("stuck", culprits, cause)
    roots = [(f.group.desc, f.collective_seq_id) for f in result.findings if f.root_cause]
    assert roots == [("tp", 1)]


def test_a_member_that_issued_no_op_of_its_group_is_said_so_not_given_a_last_op_numbered_0():
    groups = {"0": ("default_pg", (0, 1)), "1": ("b", (0, 1))}
    raw = {0: _nccl_done(1) + [entry(seq=1, pg="1", desc="b", backend="nccl", state="started")], 1: _nccl_done(1)}
    result = run({r: nccl(entries, groups) for r, entries in raw.items()})
    assert [f.detail for f in result.findings] == ["rank 1 never issued it; rank 0 did (rank 1 issued no op of b)"]


def test_ranks_that_ran_ahead_of_members_that_issued_no_op_of_the_group_say_so():
    groups = {"0": ("default_pg", (0, 1, 2)), "1": ("tp", (0, 1, 2))}
    raw = {0: _nccl_done(1) + [entry(seq=1, pg="1", desc="tp", backend="nccl", state="started")], 1: _nccl_done(1), 2: _nccl_done(1)}
    result = run({r: nccl(entries, groups) for r, entries in raw.items()})
    assert result.culprit_ranks == (0,)
    assert [f.detail.split(" [decided by ")[0] for f in result.findings] == [
        "rank 0 issued it alone; ranks 1-2 never did and wait for nobody (they issued no op of tp)"]


FIXTURE_SETS = sorted(path.parent for path in (Path(__file__).resolve().parents[1] / "fixtures").rglob("expected.json"))


@pytest.mark.parametrize("folder", FIXTURE_SETS, ids=lambda path: path.name)
def test_no_root_cause_finding_says_its_own_detail_again_as_what_decided_it(folder):
    """'[decided by late arrival: <the detail, word for word>]' told nothing: the bracket is kept only
    where what decided the finding is more than its own words."""
    import frtrace

    for finding in frtrace.analyze_dumps(str(folder)).analysis.findings:
        detail, _, decided = finding.detail.partition(" [decided by ")
        assert decided.removesuffix("]").partition(": ")[2] != detail, finding.detail


def test_ranks_held_in_an_op_stuck_below_pytorch_did_not_leave_an_issuer_of_another_op_to_run_ahead():
    """SYNTHETIC NCCL dumps: ranks 0-1 both started x's all_reduce and neither finished it; rank 2
    waits in g's (ranks 0-2), which they never issued, held in x's. Rank 2 ran ahead of nobody: it
    waits for ranks stuck below PyTorch (was: 'DESYNC: rank 2 ran ahead', an innocent rank named)."""
    groups = {"0": ("default_pg", (0, 1, 2, 3)), "1": ("x", (0, 1)), "2": ("g", (0, 1, 2))}
    result = after_one_world_op(groups, {0: "1", 1: "1", 2: "2", 3: None})
    assert (result.verdict, result.culprit_ranks) == ("stuck", (0, 1))
    assert result.headline == ("STUCK: ranks 0-1 never completed all_reduce #1 of x, which every member issued: stuck below "
                               "PyTorch (NCCL, network or a GPU)")
    assert "consequence: rank 2 waits in other ops for ranks stuck below PyTorch" in result.evidence
    # an extra op (tests/jobgen.py: rank 4 issued all_reduce #7 alone): the others are held in #6, which
    # every member issued, but rank 4 went past it, so they are not stuck there, and rank 4 ran ahead
    outcome, job, analysis = accuracy.run_job(2, "extra_op")
    assert (outcome, job.faulted, analysis.culprit_ranks) == ("right", 4, (4,))
