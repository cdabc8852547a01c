"""Time as evidence (analysis/moments.py, reading/progress.py): dumps taken at different moments,
recorders that were off, and members that issued an op after their peers had given up.

Synthetic dumps in gloo's layout (entries `scheduled`, completion only in `retired`), built
with conftest's factory; the real gloo sets of each class are fixtures (test_scenarios.py)."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from conftest import entry, make_dump, write_dumps
from test_matcher import p2p
from frtrace.analysis.moments import stale_ranks
from frtrace.cli import main
from frtrace.loader import normalize
from frtrace.matcher import analyze
from frtrace.reading.groups import resolve_groups
from frtrace.reading.progress import group_moments, recorder_off

SECOND = 1_000_000_000
STEP = ("all_reduce", "broadcast", "reduce")  # one training step: three kinds of op


def _op(seq, at_s, op="all_reduce", retired=True, timeout_ms=4000, pg="0", desc="default_pg"):
    raw = entry(seq=seq, op=op, sizes=((2, 2),), pg=pg, desc=desc)
    raw.update(time_created_ns=int(at_s * SECOND) + 1, retired=retired, timeout_ms=timeout_ms)
    return raw


def _steps(count, gap_s=0.01, start_s=0.0, retired=True):
    """`count` steps of STEP in the world group, one op every `gap_s` seconds."""
    return [_op(i + 1, start_s + i * gap_s, STEP[i % len(STEP)], retired=retired) for i in range(count * len(STEP))]


def _run(raw_dumps):
    dumps = {r: normalize(copy.deepcopy(raw), r, f"nccl_trace_rank_{r}", "pickle") for r, raw in raw_dumps.items()}
    table = resolve_groups(dumps, frozenset(raw_dumps))
    return analyze(dumps, table)


# ---------------------------------------------------------------------------- what a dump says of its moment
def test_a_gloo_op_retired_more_than_its_timeout_before_the_ranks_newest_op_is_read_as_finished():
    raw = make_dump([_op(1, 0), _op(2, 1), _op(3, 5.5), _op(4, 5.6)])
    dump = normalize(raw, 0, "r0", "pickle")
    (moment,) = dump.moments
    assert (moment.pg_name, moment.joined_through, moment.last_seq, moment.last_timeout_ms) == ("0", 2, 4, 4000)
    assert moment.last_created_ns == int(5.6 * SECOND) + 1


@pytest.mark.parametrize("why, changed", [
    ("not retired: in flight, or gloo never retired it", {"retired": False}),
    ("created within its timeout of the newest op", {"time_created_ns": int(3 * SECOND)}),
    ("no timeout recorded", {"timeout_ms": None}),
    ("a timeout no one set", {"timeout_ms": 10**13}),
    ("a bool for a timeout", {"timeout_ms": True}),
])
def test_an_op_is_not_read_as_finished_without_the_evidence(why, changed):
    ops = [_op(1, 0, timeout_ms=4000), _op(2, 5.5)]
    ops[0].update(changed)
    if "timeout_ms" in changed:
        ops[1]["timeout_ms"] = changed["timeout_ms"]
    (moment,) = normalize(make_dump(ops), 0, "r0", "pickle").moments
    assert moment.joined_through == 0, why


def test_pg_status_counts_are_read_from_pickle_ints_and_json_strings_and_odd_values_are_ignored():
    ops = [_op(1, 0), _op(2, 0.1)]
    for status, expected in [({"0": {"last_enqueued_collective": 4}}, 4), ({"0": {"last_enqueued_collective": "4"}}, 4),
                             ({"0": {"last_enqueued_collective": "x" * 100}}, -1), ({"0": {"last_enqueued_collective": True}}, -1),
                             ({"0": "nonsense"}, -1), ([1, 2], -1), ({"0": {"last_enqueued_collective": 2**70}}, -1)]:
        raw = make_dump(ops)
        raw["pg_status"] = status
        (moment,) = normalize(raw, 0, "r0", "pickle").moments
        assert moment.status_enqueued == expected, status


def test_a_dump_with_a_version_and_nothing_else_is_a_recorder_that_was_off():
    off = {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}
    assert recorder_off(off) and recorder_off({"version": "2.10"})
    assert normalize(off, 2, "r2", "pickle").recorder_off
    # a rank that issued nothing still lists its groups (gloo's placeholder included), or their status
    assert not recorder_off(make_dump([]))
    assert not recorder_off({"version": "2.10", "entries": [], "pg_status": {"0": {}}})
    assert not recorder_off([])


def test_group_moments_need_the_entries_the_columns_were_made_of():
    dump = normalize(make_dump([_op(1, 0), _op(2, 5)]), 0, "r0", "pickle")
    assert group_moments(dump.entries, [], None) == ()


# ---------------------------------------------------------------------------- stale dumps
def test_a_dump_older_than_an_op_its_peers_finished_is_stale_and_the_real_culprit_is_named():
    # ranks 0, 2, 3 ran 40 ops 0.15 s apart (6 s: past the 4 s timeout) and rank 3 stopped before
    # the last; rank 1's file is its dump from the start
    full = _steps(14, gap_s=0.15)[:40]
    raw = {0: make_dump(full), 1: make_dump(full[:4]), 2: make_dump(full), 3: make_dump(full[:39])}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks) == ("desync", (3,))
    assert list(result.stale) == [1]
    assert "rank 1's dump is older than its peers': it ends at #4 of default_pg" in result.stale[1]
    assert "retired, and its rank issued ops past its timeout" in result.stale[1]
    assert "where rank 1 was at the end cannot be told" in result.stale[1]


def test_without_evidence_of_a_finished_op_a_rank_behind_is_a_culprit_not_a_stale_dump():
    # the same shape in 0.6 s: nothing was retired a timeout before the newest op, and one step
    # after rank 1's last op is no proof
    full = _steps(14, gap_s=0.015)[:40]
    raw = {0: make_dump(full), 1: make_dump(full[:36]), 2: make_dump(full), 3: make_dump(full)}
    result = _run(raw)
    assert result.stale == {}
    assert 1 in result.culprit_ranks


def test_two_whole_steps_after_a_ranks_last_op_show_the_op_was_waited_for():
    full = _steps(14, gap_s=0.001)
    raw = {0: make_dump(full), 1: make_dump(full[:30]), 2: make_dump(full), 3: make_dump(full)}
    result = _run(raw)
    assert (result.verdict, list(result.stale)) == ("clean", [1])
    assert "its rank went through whole steps after it" in result.stale[1]
    assert "the dumps were taken at different moments" in result.headline


def test_the_same_op_again_and_again_is_no_step_an_op_was_waited_for_in():
    # DDP's bucket all_reduces are issued async and waited for together: a run of one kind of op
    # after a rank's last one says nothing of whether it finished
    full = [_op(s, s * 0.001) for s in range(1, 41)]
    raw = {0: make_dump(full), 1: make_dump(full[:30]), 2: make_dump(full), 3: make_dump(full)}
    result = _run(raw)
    assert result.stale == {}
    assert result.culprit_ranks == (1,)


def test_every_rank_at_a_different_step_of_a_healthy_job_is_clean_with_a_note():
    full = _steps(30, gap_s=0.001)
    raw = {r: make_dump(full[:30 + 15 * r]) for r in range(4)}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks, sorted(result.stale)) == ("clean", (), [0, 1, 2])
    assert sum("dump is older than its peers'" in note for note in result.warnings) == 3


def test_stale_ranks_are_found_from_the_tracks_alone():
    full = _steps(14, gap_s=0.001)
    raw = {0: make_dump(full), 1: make_dump(full[:30])}
    dumps = {r: normalize(copy.deepcopy(d), r, f"r{r}", "pickle") for r, d in raw.items()}
    table = resolve_groups(dumps, frozenset(dumps))
    from frtrace.analysis.align import Codes, build_tracks
    from frtrace.analysis.moments import moments_by_name

    codes = Codes(dumps)
    tracks = {r: build_tracks(d, table, codes)[0] for r, d in dumps.items()}
    found = stale_ranks(dumps, tracks, table, moments_by_name(dumps))
    assert list(found) == [1] and (found[1].last, found[1].witness) == (30, 0)
    assert found[1].joined > 30


# ---------------------------------------------------------------------------- late arrivals
def test_a_member_that_issued_an_op_after_its_peers_timeout_is_the_culprit_alone():
    head = _steps(2, gap_s=0.01)
    last = len(head) + 1
    raw = {r: make_dump(head + [_op(last, 1.0 if r != 2 else 8.0)]) for r in range(4)}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks, result.cause) == ("desync", (2,), "compute_or_data_stall")
    (root,) = [f for f in result.findings if f.root_cause]
    assert (root.kind, root.collective_seq_id, root.ranks) == ("late_arrival", last, (2,))
    assert "rank 2 issued it 7.0 s after rank 0, past its timeout of 4 s" in root.detail
    # one group with a late arrival: no "(+0 more ...)"
    assert result.headline == (f"DESYNC: rank 2 issued all_reduce #{last} of default_pg 7.0 s after rank 0, past its timeout "
                               "of 4 s: the others had given up on it by then")


@pytest.mark.parametrize("late_s", [3.0, 4.8])  # within the timeout; past it by less than the clocks may differ
def test_a_member_late_within_the_timeout_and_the_clocks_margin_is_no_late_arrival(late_s):
    head = _steps(2, gap_s=0.01)
    raw = {r: make_dump(head + [_op(len(head) + 1, 1.0 if r != 2 else 1.0 + late_s)]) for r in range(4)}
    result = _run(raw)
    assert all(f.kind != "late_arrival" for f in result.findings)
    assert result.verdict == "clean"


# ---------------------------------------------------------------------------- recorder off
def test_ranks_whose_recorder_was_off_are_named_for_nothing_and_the_culprit_is_still_found():
    full = _steps(3, gap_s=0.01)
    off = {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}
    raw = {0: make_dump(full[:-1]), 1: make_dump(full), 2: make_dump(full), 3: off, 4: off}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks, result.no_evidence) == ("desync", (0,), (3, 4))
    assert result.evidence[0].startswith("majority: 2 of 3 members whose dumps show the end (of 5) issued reduce #9")
    assert any(n.startswith("ranks 3-4 recorded nothing") and "the recorder was off" in n for n in result.warnings)


def test_a_healthy_job_with_a_recorder_off_is_clean_and_says_so():
    full = _steps(3, gap_s=0.01)
    raw = {0: make_dump(full), 1: make_dump(full), 2: {"version": "2.10"}}
    result = _run(raw)
    assert (result.verdict, result.no_evidence) == ("clean", (2,))
    assert result.headline.endswith("rank 2 recorded nothing (recorder off)")


def test_the_json_report_lists_stale_and_recorder_off_ranks(tmp_path):
    full = _steps(30, gap_s=0.001)
    raw = {0: make_dump(full[:30]), 1: make_dump(full), 2: {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}}
    folder = write_dumps(tmp_path / "d", raw)
    assert main(["-d", str(folder), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [s["rank"] for s in report["stale_ranks"]] == [0]
    assert report["stale_ranks"][0]["said"].startswith("rank 0's dump is older than its peers'")
    assert report["no_evidence_ranks"] == [2]
    assert pickle.loads((folder / "nccl_trace_rank_2").read_bytes())["version"] == "2.10"  # read, never changed


# ---------------------------------------------------------------------------- membership per group, not per desc
def _gathered(pg, members, seq):
    """An all_gather in group `pg` (desc io) whose shapes say it has `members` members."""
    return entry(seq=seq, op="all_gather", pg=pg, desc="io", sizes=((1,),), out=((members,),))


@pytest.mark.parametrize("culprit", [None, 6])
def test_groups_sharing_a_desc_keep_their_own_sizes_and_the_world_the_files_show(culprit):
    # two io groups of 3 and 5 ranks (object collectives gather their sizes), in gloo's layout
    raw = {}
    for rank in range(8):
        pg, size = ("7", 3) if rank < 3 else ("8", 5)
        ops = [_gathered(pg, size, 1), _gathered(pg, size, 2)][:1 if rank == culprit else 2]
        raw[rank] = make_dump(ops + [entry(seq=1, op="barrier", sizes=())])
    result = _run(raw)
    assert sorted(len(g.ranks) for g in result.groups if g.desc == "io") == [3, 5]
    assert (result.ranks_loaded, result.ranks_missing) == (tuple(range(8)), ())
    assert result.culprit_ranks == (() if culprit is None else (culprit,))


# ---------------------------------------------------------------------------- ops the recorder never logs
def _stack(*innermost_first: tuple[str, int, str]) -> str:
    lines = [f'  File "{path}", line {line} in {function}' for path, line, function in innermost_first]
    return "Current thread 0x00007f0 (most recent call first):\n" + "\n".join(lines) + "\n"


IN_BARRIER = _stack(("/venv/site-packages/torch/distributed/distributed_c10d.py", 4800, "monitored_barrier"),
                    ("/job/train.py", 40, "step"), ("/job/train.py", 90, "<module>"))
IN_REDUCE = _stack(("/venv/site-packages/torch/distributed/distributed_c10d.py", 3245, "reduce"),
                   ("/job/train.py", 38, "step"), ("/job/train.py", 90, "<module>"))
COMPUTING = _stack(("/job/model.py", 12, "forward"), ("/job/train.py", 35, "step"), ("/job/train.py", 90, "<module>"))


@pytest.mark.parametrize("stacks, verdict, culprits", [
    ((IN_BARRIER, IN_BARRIER, IN_BARRIER, COMPUTING), "desync", [3]),  # the odd one out computes
    ((IN_BARRIER, IN_BARRIER, COMPUTING, COMPUTING), "inconclusive", []),  # as many elsewhere: undecided
    ((IN_BARRIER,) * 4, "inconclusive", []),  # everyone in it: nothing says who holds it
    ((IN_REDUCE, IN_REDUCE, IN_REDUCE, COMPUTING), "clean", []),  # the op their dumps end in: no news
    ((COMPUTING,) * 4, "clean", []),
])
def test_stacks_in_a_distributed_call_the_dumps_do_not_show_are_no_clean_set(stacks, verdict, culprits, tmp_path):
    folder = write_dumps(tmp_path / "d", {r: make_dump(_steps(3, gap_s=0.01)) for r in range(4)})
    for rank, text in enumerate(stacks):
        (folder / f"nccl_trace_rank_{rank}.stacks").write_text(text)
    main(["-d", str(folder), "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["verdict"], report["culprit_ranks"]) == (verdict, culprits), report["headline"]
    if verdict == "inconclusive":  # the headline says why, in the words of the finding
        assert report["headline"].startswith("INCONCLUSIVE: the dumps show nobody waiting, but ranks 0-")
        assert report["headline"].endswith(report["findings"][0]["detail"])
    if verdict != "clean":
        (root,) = [f for f in report["findings"] if f["root_cause"]]
        assert (root["kind"], root["op"], root["pg_desc"]) == ("unrecorded_op", "monitored_barrier", "default_pg")
        assert "which their dumps do not record" in root["detail"]


def test_pg_status_counting_past_a_gloo_buffers_last_op_is_said_as_ops_the_recorder_did_not_log():
    raw = {r: make_dump(_steps(2, gap_s=0.01)) for r in range(3)}
    raw[0]["pg_status"] = {"0": {"last_enqueued_collective": 8, "last_completed_collective": 8}}  # a barrier's root
    result = _run(raw)
    assert result.verdict == "clean"
    assert ("rank 0: pg_status counts 8 collectives enqueued in default_pg, but its buffer ends at #6: ops the recorder "
            "did not log (gloo logs no send or recv, and no monitored_barrier)") in result.warnings
    raw[0]["pg_status"]["0"]["last_enqueued_collective"] = 6
    assert not any("pg_status counts" in w for w in _run(raw).warnings)


# ---------------------------------------------------------------------------- a rank with stacks and no dump
IN_LOADER = _stack(("/venv/site-packages/torch/utils/data/dataloader.py", 700, "__next__"),
                   ("/job/train.py", 30, "step"), ("/job/train.py", 90, "<module>"))


def test_a_rank_that_never_dumped_but_wrote_its_stacks_is_alive_where_they_show(tmp_path, capsys):
    # gloo dumps only from inside a collective: rank 3, stalled in its data loader, never dumped
    folder = write_dumps(tmp_path / "d", {r: make_dump(_steps(3, gap_s=0.01)) for r in range(3)})
    for rank, text in enumerate([IN_REDUCE, IN_REDUCE, IN_REDUCE, IN_LOADER]):
        (folder / f"nccl_trace_rank_{rank}.stacks").write_text(text)
    (folder / "nccl_trace_rank_9.stacks").write_text(IN_LOADER)  # another job's: far past the world
    main(["-d", str(folder), "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["verdict"], report["culprit_ranks"], report["ranks_missing"]) == ("desync", [3], [3])
    assert report["causes"]["3"]["cause"] == "compute_or_data_stall"
    assert "loading data (torch's DataLoader)" in report["causes"]["3"]["said"]
    assert report["culprit_stacks"]["3"]["python"][0]["function"] == "__next__"
    assert any("rank 9, which is not a rank of this dump set" in n for n in report["notes"])
    assert not any("rank 3, which is not a rank" in n for n in report["notes"])


def test_a_rank_whose_only_missing_peer_had_its_recorder_off_may_wait_for_it_and_is_not_named():
    # group pair = {0, 3}: rank 0 completed world #1-#2 and pair #1 and sits in pair #2; rank 3's
    # recorder was off; ranks 1-2 wait for rank 0 in the world's #3. Whether rank 0 waits for
    # rank 3 in pair #2 cannot be told
    groups = {"0": ("default_pg", range(4)), "1": ("pair", (0, 3))}

    def op(seq, state="completed", pg="0", desc="default_pg"):
        return entry(seq=seq, pg=pg, desc=desc, backend="nccl", state=state)
    config = {name: {"name": name, "desc": desc, "ranks": str(list(ranks))} for name, (desc, ranks) in groups.items()}
    raw = {0: make_dump([op(1), op(1, pg="1", desc="pair"), op(2), op(2, "started", "1", "pair")], pg_config=config),
           1: make_dump([op(1), op(2), op(3, "started")], pg_config=config),
           2: make_dump([op(1), op(2), op(3, "started")], pg_config=config),
           3: {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks) == ("inconclusive", ())  # rank 0 was named
    assert "rank 3 (recorder off)" in result.headline and "rank 0" in result.headline


def test_a_send_to_a_rank_whose_recorder_was_off_is_no_evidence_against_it():
    from test_matcher import nccl, p2p

    world = {"0": ("default_pg", range(4))}
    done = [entry(seq=1, backend="nccl", state="completed")]
    raw = {0: nccl(done + [p2p("send", 0, 1, 1, state="scheduled")], world), 2: nccl(done, world), 3: nccl(done, world),
           1: {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}}
    result = _run(raw)
    assert not [f for f in result.findings if f.kind == "p2p_unmatched"]  # was: "no matching recv on rank 1"
    assert 1 not in result.culprit_ranks


def test_a_stuck_send_and_recv_whose_one_end_dumped_long_before_the_hang_is_undecided_not_stuck():
    """SYNTHETIC (NCCL: gloo records no send or recv). Ranks 0, 2, 3 ran 40 ops past the timeout
    and rank 0 is in a send to rank 1, started; rank 1's file is its dump from the start, ending in
    that recv: it may have finished the pair long ago, so the pair is not said to be stuck."""
    def nccl_ops(ops):
        return [{**op, "state": "completed", "backend": "nccl"} for op in ops]

    def posted(kind, me, peer, at_s):
        return {**p2p(kind, me, peer, 1, state="started"), "time_created_ns": int(at_s * SECOND) + 1, "timeout_ms": 4000}

    full = _steps(14, gap_s=0.15)[:40]
    raw = {0: make_dump(nccl_ops(full) + [posted("send", 0, 1, 6.1)]),
           1: make_dump(nccl_ops(full[:4]) + [posted("recv", 1, 0, 0.7)]),
           2: make_dump(nccl_ops(full)), 3: make_dump(nccl_ops(full))}
    result = _run(raw)
    assert (result.verdict, result.culprit_ranks, list(result.stale)) == ("inconclusive", (), [1])
    assert result.headline == ("INCONCLUSIVE: send 0->1 (p2p #1) of default_pg never completed on ranks 0-1, but rank 1's "
                               "dump is older than the end: whether they wait for them cannot be told")
