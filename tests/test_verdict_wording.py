"""The verdict's words, read on the shipped fixtures: each cause, headline and note said whole, as
people read and paste them (issue 52: most survivors of verdict.py's mutation slice 1 of 5, session
35, were words of rare branches no test read whole). Where no fixture reaches a branch, SYNTHETIC
dumps (conftest's) or a fixture copied with a stack file added, each said where. The fixtures'
truths are their generators' (fixtures/generate_*.py); what is asserted here is only how frtrace
says them."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
from conftest import FIXTURES, entry, make_dump, ops
from test_matcher import nccl, run

import frtrace
from frtrace.analysis.verdict import _moment_notes


@pytest.fixture(scope="module")
def analysis():
    read: dict[str, object] = {}

    def of(name: str):
        if name not in read:
            read[name] = frtrace.analyze_dumps(FIXTURES / name, jobs=1).analysis
        return read[name]

    return of


def test_a_rank_whose_process_is_gone_is_said_so(analysis):
    assert analysis("killed_member_rank3").causes == {3: ("process_gone", "left no dump: its process is gone or its host "
                                                                          "unreachable")}


def test_ranks_stuck_below_pytorch_are_said_so_and_so_are_the_ranks_that_wait_for_them(analysis):
    found = analysis("synthetic_stuck_below_tp_ranks4_7")
    assert set(found.causes.values()) == {("stuck_below_pytorch", "in an op every member issued and none finished: NCCL, "
                                                                  "the network or a GPU")}
    assert found.evidence == ("completion recorded: every member issued it, ranks 4-7 never completed it",
                              "consequence: ranks 0-3,8-15 wait in other ops for ranks stuck below PyTorch")


def test_a_gloo_rank_in_no_collective_may_be_in_a_send_or_recv(analysis):
    assert analysis("skip_rank2").causes == {2: ("compute_or_data_stall", "in no collective: computing or loading data (or "
                                                                          "in a send or recv, which gloo does not record)")}
    assert analysis("synthetic_p2p_unmatched").causes == {3: ("compute_or_data_stall", "in no collective: computing or "
                                                                                       "loading data")}  # NCCL records p2p


def test_a_gpu_that_never_reached_the_op_is_said_in_the_headline_and_the_cause(analysis):
    found = analysis("synthetic_gpu_never_reached_rank3")
    assert found.headline == ("STUCK: rank 3 never started all_reduce #5 of default_pg, which every member issued and the "
                              "others started: its GPU never reached it (a kernel before it never ended)")
    assert found.causes == {3: ("gpu_never_reached", "its GPU never reached the op: a kernel before it never ended")}


def test_a_late_arrival_is_said_as_such(analysis):
    assert analysis("late_arrival_rank2").causes == {2: (
        "compute_or_data_stall", "issued the op after its peers had given up on it: it was computing or loading data while "
                                 "they waited")}


def test_a_clean_set_with_recorders_off_says_so_after_the_count(analysis):
    assert analysis("recorder_off_healthy").headline == (
        "CLEAN: 4 ranks, 4 groups, 19 collectives matched; no desync; ranks 2-3 recorded nothing (recorder off)")


def test_ranks_whose_recorder_was_off_are_noted_in_their_number():
    one = ("rank 5 recorded nothing: its dump holds a version and no entries, groups or status (TORCH_FR_BUFFER_SIZE=0: "
           "the recorder was off), so where it stood cannot be told; named for nothing")
    assert _moment_notes({}, frozenset({5})) == [one]
    assert _moment_notes({}, frozenset({6, 7})) == [
        "ranks 6-7 recorded nothing: their dumps hold a version and no entries, groups or status (TORCH_FR_BUFFER_SIZE=0: "
        "the recorder was off), so where they stood cannot be told; named for nothing"]


def test_up_to_three_stale_dumps_are_said_one_by_one_and_more_with_a_count():
    stale = {rank: SimpleNamespace(said=lambda rank=rank: f"rank {rank} is older") for rank in (1, 4, 9, 12)}
    three = {rank: stale[rank] for rank in (1, 4, 9)}
    assert _moment_notes(three, frozenset()) == ["rank 1 is older", "rank 4 is older", "rank 9 is older"]
    assert _moment_notes(stale, frozenset()) == ["rank 1 is older", "rank 4 is older", "rank 9 is older",
                                                 "and rank 12: dumps older than their peers' likewise (the JSON's "
                                                 "stale_ranks says why)"]


def test_a_rank_without_a_dump_whose_stack_shows_it_alive_computes_or_loads_data(tmp_path):
    # stacks_killed_rank3 with a stack for rank 3 beside the others (SYNTHETIC: faulthandler's format, as
    # the fixture's own stacks; the process was killed, so its stack is written here by hand)
    copied = tmp_path / "set"
    shutil.copytree(FIXTURES / "stacks_killed_rank3", copied)
    (copied / "nccl_trace_rank_3.stacks").write_text(
        'Current thread 0x00007f983468db80 (most recent call first):\n'
        '  File "train.py", line 41 in step\n'
        '  File "train.py", line 90 in main\n')
    found = frtrace.analyze_dumps(copied, jobs=1).analysis
    assert found.causes[3] == ("compute_or_data_stall", "left no dump, but its Python stack shows its process alive, in no "
                                                        "collective: computing or loading data (gloo dumps only from inside "
                                                        "a collective); its Python stack: at train.py:41 in step")


def test_ranks_whose_gpus_never_reached_the_op_are_said_in_the_plural():
    def world(seq, state):
        return entry(seq=seq, backend="nccl", state=state)

    raw = {r: [world(1, "completed"), world(2, "started" if r < 2 else "scheduled")] for r in range(4)}
    result = run({r: nccl(entries, {"0": ("default_pg", range(4))}) for r, entries in raw.items()})
    assert result.headline == ("STUCK: ranks 2-3 never started all_reduce #2 of default_pg, which every member issued and "
                               "the others started: their GPUs never reached it (a kernel before it never ended)")


def test_a_culprits_failed_checks_are_said_with_what_each_said():
    dumps = {r: make_dump(ops(2 if r == 2 else 3)) for r in range(4)}  # rank 2 never issued #3 and went on
    dumps[2]["health_check_results"] = {"gpu": {"status": "failed", "error": "Xid 48"},
                                        "nic0": {"status": "down", "error": "link flap"}, "nic1": "failed"}
    result = run(dumps)
    assert result.culprit_ranks == (2,)
    assert result.evidence[-1] == "health check: rank 2's gpu, nic0, nic1 checks failed (gpu: Xid 48; nic0: link flap)"


def test_a_stack_in_the_programs_own_line_cannot_tell_where_an_undecided_rank_waits(analysis):
    assert analysis("stacks_two_faults_hidden_ranks2_7").causes[2] == (
        "unknown", "in no op the dumps show: computing, loading data, or in a send or recv, which gloo does not record; its "
                   "Python stack, at generate_gloo.py:398 in prog_two_faults_hidden_ranks2_7, cannot tell: a wait on a "
                   "request (work.wait()) shows as the line that called it, as compute does")
