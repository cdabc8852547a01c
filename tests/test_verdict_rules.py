"""The verdict's small rules (analysis/verdict.py), each asked directly: how ranks whose dumps say
nothing of the end are named, the op the Python stacks wait in where the dumps show nobody
waiting, an entry of a check that is not there, a long cycle cut for the first line, a send to a
rank without a dump, the ops stuck below PyTorch that explain the graph, groups that cannot be
lined up, and a late arrival's cause and entry (issue 52: the survivors of verdict.py's first
mutation run, session 34). The dumps are SYNTHETIC NCCL dumps (conftest's entries; the late
arrivals, tests/jobgen.py's): gloo records no send or recv."""

from __future__ import annotations

from types import SimpleNamespace

import accuracy
from conftest import entry, make_dump
from test_matcher import nccl, p2p, run
from test_moments_survivors import _loaded

from frtrace.analysis.verdict import _entry_at, _few_waits, _stuck_below, _unrecorded_wait, _unseen_in, _unseen_word
from frtrace.matcher import analyze
from frtrace.reading.anchor import Anchoring
from frtrace.reading.stacks import Thread

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
OLD = {1: "older", 3: "older"}  # the stale ranks (what each says is not read here)


def test_ranks_that_say_nothing_of_the_end_are_named_by_why():
    assert _unseen_word([1, 3, 8], OLD, frozenset({8})) == "ranks 1,3 (dumps older than the end) and rank 8 (recorder off)"
    assert _unseen_word([1], OLD, frozenset()) == "rank 1 (dump older than the end)"
    assert _unseen_word([8, 9], {}, frozenset({8, 9})) == "ranks 8-9 (recorder off)"
    assert _unseen_word([], {}, frozenset()) == ""


def test_the_members_of_stuck_groups_that_say_nothing_of_the_end_are_named_by_why():
    stuck = [SimpleNamespace(group=SimpleNamespace(ranks=(0, 1, 2, 3))), SimpleNamespace(group=SimpleNamespace(ranks=(8,)))]
    assert _unseen_in(stuck, OLD, frozenset({8})) == ("ranks 1,3's dumps are older than the end and rank 8 recorded "
                                                     "nothing (recorder off)")
    assert _unseen_in(stuck, {1: "older"}, frozenset()) == "rank 1's dump is older than the end"
    assert _unseen_in(stuck, {5: "older"}, frozenset({9})) == ""  # neither is a member of a stuck op's group


def _waiting_in(call: str) -> Thread:
    return Thread("MainThread", ((C10D, 10, call), ("train.py", 40, "step")))


def _dumps(last_ops: dict) -> dict:
    return {r: SimpleNamespace(entries=[SimpleNamespace(op=op)] if op else []) for r, op in last_ops.items()}


WORLD = SimpleNamespace(ranks=(0, 1, 2), label="default_pg")
TABLE = SimpleNamespace(groups=[SimpleNamespace(ranks=(0, 1), label="tp"), WORLD], world=(0, 1, 2))


def test_ranks_whose_stacks_wait_in_an_op_their_dumps_do_not_record_outnumber_the_rest():
    mains = {0: _waiting_in("monitored_barrier"), 1: _waiting_in("monitored_barrier"), 2: Thread("MainThread", (("train.py", 7, "load"),))}
    finding, verdict, headline = _unrecorded_wait(_dumps({0: "all_reduce", 1: "all_reduce", 2: "all_reduce"}), TABLE, mains,
                                                  {2: "in load (train.py:7)"})
    assert (verdict, finding.ranks, finding.group) == ("desync", (2,), WORLD)
    assert finding.detail == ("ranks 0-1 wait in monitored_barrier (distributed_c10d.py), which their dumps do not record; "
                              "rank 2 is elsewhere (rank 2 in load (train.py:7)): the op the others wait in is one the "
                              "recorder does not log")
    assert headline == ("rank 2 never joined monitored_barrier, which ranks 0-1 wait in (by the Python stacks: the Flight "
                        "Recorder does not record it)")


def test_one_rank_waiting_in_two_unrecorded_calls_alone_is_inconclusive_and_names_both():
    mains = {0: _waiting_in("monitored_barrier"), 1: _waiting_in("recv")}
    finding, verdict, _ = _unrecorded_wait(_dumps({0: None}), TABLE, mains, {})  # rank 0's dump holds nothing, 1 has none
    assert (verdict, finding.ranks, finding.op) == ("inconclusive", (), "monitored_barrier/recv")
    assert finding.detail.startswith("ranks 0-1 wait in monitored_barrier/recv (distributed_c10d.py), which their dumps "
                                     "do not record, and no rank's stack is elsewhere")


def test_a_rank_waiting_in_the_op_its_dump_ends_in_is_no_unrecorded_wait():
    mains = {0: _waiting_in("all_reduce"), 1: _waiting_in("all_reduce")}
    assert _unrecorded_wait(_dumps({0: "all_reduce", 1: "all_reduce"}), TABLE, mains, {}) is None
    finding, _, _ = _unrecorded_wait(_dumps({0: "all_reduce", 1: "barrier"}), TABLE, mains, {})
    assert finding.detail.startswith("rank 1 waits in all_reduce (distributed_c10d.py), which its dump does not record")


def test_without_a_group_of_the_whole_world_an_unrecorded_wait_is_said_in_the_largest_group():
    largest = SimpleNamespace(ranks=(0, 1, 2), label="dp")
    table = SimpleNamespace(groups=[SimpleNamespace(ranks=(0,), label="a"), largest, SimpleNamespace(ranks=(1, 2), label="b")],
                            world=(0, 1, 2, 3))
    finding, _, _ = _unrecorded_wait(_dumps({0: None}), table, {0: _waiting_in("barrier")}, {})
    assert finding.group is largest


def test_an_entry_of_an_op_no_check_holds_is_none():
    checks = SimpleNamespace(at=lambda group, seq: None)
    assert _entry_at(checks, SimpleNamespace(group="g", collective_seq_id=4), 0) is None
    held = SimpleNamespace(at=lambda group, seq: SimpleNamespace(entries={0: ["first", "last"], 1: []}))
    assert _entry_at(held, SimpleNamespace(group="g", collective_seq_id=4), 0) == "last"
    assert _entry_at(held, SimpleNamespace(group="g", collective_seq_id=4), 1) is None


def test_the_ranks_elsewhere_are_said_with_where_their_stacks_are_where_known():
    table = SimpleNamespace(groups=[SimpleNamespace(ranks=tuple(range(5)), label="default_pg")], world=tuple(range(5)))
    mains = {r: _waiting_in("monitored_barrier") for r in range(3)}
    mains.update({3: Thread("MainThread", (("train.py", 7, "load"),)), 4: Thread("MainThread", (("train.py", 9, "save"),))})
    dumps = _dumps(dict.fromkeys(range(5), "all_reduce"))
    finding, _, _ = _unrecorded_wait(dumps, table, mains, {3: "in load (train.py:7)", 4: "in save (train.py:9)"})
    assert finding.detail.endswith("; ranks 3-4 are elsewhere (rank 3 in load (train.py:7); rank 4 in save (train.py:9)): "
                                   "the op the others wait in is one the recorder does not log")
    finding, _, _ = _unrecorded_wait(dumps, table, mains, {})
    assert finding.detail.endswith("; ranks 3-4 are elsewhere: the op the others wait in is one the recorder does not log")


def test_as_many_ranks_elsewhere_as_waiting_is_inconclusive_and_says_so():
    mains = {0: _waiting_in("monitored_barrier"), 1: Thread("MainThread", (("train.py", 7, "load"),))}
    finding, verdict, _ = _unrecorded_wait(_dumps({0: "all_reduce", 1: "all_reduce"}), TABLE, mains, {})
    assert verdict == "inconclusive"
    assert finding.detail.endswith(", and as many ranks (rank 1) are elsewhere: which holds the job cannot be told")


def test_an_inconclusive_unrecorded_wait_is_undecided():
    finding, verdict, _ = _unrecorded_wait(_dumps({0: None}), TABLE, {0: _waiting_in("barrier")}, {})
    assert verdict == "inconclusive" and finding.decided is False


def test_a_long_cycle_of_waits_is_cut_to_its_first_on_the_first_line_and_keeps_why():
    waits = "; ".join(f"rank {r} waits in all_reduce #{r} of tp for rank {(r + 1) % 4}" for r in range(4))
    cycle = f"{waits}: neither rule decides: rank 3's history says: skipped"
    assert _few_waits(cycle) == ("rank 0 waits in all_reduce #0 of tp for rank 1, and 3 more waits in a cycle (see "
                                 "Undecided): neither rule decides: rank 3's history says: skipped")
    two = "rank 0 waits in a for rank 1; rank 1 waits in b for rank 0: neither rule decides"
    assert _few_waits(two) == two


def test_a_send_to_a_rank_without_a_dump_says_the_recv_it_never_posted():
    """SYNTHETIC (NCCL): rank 0's send to rank 1 started, rank 1 left no dump, rank 2 went on to
    all_reduce #3: rank 1 is named for the recv it never posted, as ever for a send, and its
    missing dump is said beside it (not 'the prime suspect' of a collective it never joined)."""
    world = {"0": ("default_pg", (0, 1, 2))}
    done = [entry(seq=s, backend="nccl", state="completed") for s in (1, 2)]
    result = run({0: nccl(done + [p2p("send", 0, 1, 1, state="started")], world),
                  2: nccl(done + [entry(seq=3, backend="nccl", state="started")], world)})
    assert (result.verdict, result.culprit_ranks) == ("desync", (1,))
    assert result.headline == ("DESYNC: rank 1 never posted the recv matching rank 0's send 0->1 (p2p #1) of default_pg; "
                               "rank 1 left no readable dump")


def _stuck(ranks: tuple, members: tuple, detail: str = "issued by all members, not completed") -> SimpleNamespace:
    return SimpleNamespace(ranks=ranks, expected_ranks=members, detail=detail)


def test_the_ops_stuck_below_pytorch_that_explain_the_graph_are_those_holding_its_culprits():
    tp, pp = _stuck((0, 1), (0, 1)), _stuck((4, 5), (4, 5))
    assert _stuck_below([(1, None)], [tp, pp]) == [tp]  # the other stuck op holds no culprit
    assert _stuck_below([(1, None), (4, None)], [tp, pp]) == [tp, pp]
    assert _stuck_below([(1, None), (7, None)], [tp, pp]) == []  # rank 7 is held by nothing stuck
    assert _stuck_below([], [tp, _stuck((4,), (4, 5))]) == [tp]  # one member finished: no hang below PyTorch


def test_groups_that_cannot_be_lined_up_make_the_verdict_inconclusive_naming_the_first_and_counting_the_rest():
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"}}
    raw = {r: make_dump([entry(seq=1, backend="nccl", state="completed")], pg_config=config) for r in (0, 1)}
    dumps, table = _loaded(raw)
    world, tp = sorted(table.groups, key=lambda g: g.desc)
    for unaligned, more in (([(tp, "its buffers wrapped")], ""), ([(tp, "its buffers wrapped"), (world, "so did these")],
                                                                  " (+1 more group(s))")):
        result = analyze(dumps, table, anchoring=Anchoring(unaligned=unaligned))
        assert result.verdict == "inconclusive"
        assert result.headline == f"INCONCLUSIVE: the ops of tp cannot be lined up across its ranks: its buffers wrapped{more}"


def test_a_late_arrival_is_a_compute_or_data_stall_blocked_in_the_op_it_issued_late():
    """The accuracy run's late-arrival jobs (tests/jobgen.py: the late rank created the last world
    op past its peers' deadline), NCCL's and gloo's layouts: the late rank's cause, and the entry it
    is blocked in, the late op itself."""
    checked = 0
    for seed in range(40):
        outcome, job, analysis = accuracy.run_job(seed, "late_arrival")
        if job.torchcomms:
            continue
        assert outcome == "right" and analysis.culprit_ranks == (job.faulted,)
        (late,) = [f for f in analysis.findings if f.kind == "late_arrival"]
        assert analysis.causes[job.faulted][0] == "compute_or_data_stall"
        blocked = analysis.culprit_entries[job.faulted]
        assert (blocked.pg_name, blocked.collective_seq_id, blocked.is_p2p) == (late.group.name, late.collective_seq_id, False)
        checked += 1
    assert checked > 15
