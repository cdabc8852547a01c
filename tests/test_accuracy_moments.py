"""The accuracy run's jobs whose dumps were taken at different moments (jobgen.MOMENT_FAULTS):
each job's dumps show what its truth says, by construction, read from the dumps themselves (never
from frtrace); and the older fault kinds' jobs are unchanged byte for byte."""

from __future__ import annotations

import hashlib
import random

import pytest

import accuracy
import jobgen

SEEDS = range(60)
OLD_FAULTS = ("skip", "reorder", "extra_op", "wrong_size", "dropped_recv", "missing_dump", "gpu_hang", "stuck_group",
              "two_faults", "pipeline_drop", "pipeline_skip")
OLD_JOBS_SHA256 = "05f3d1fc3c73022aeb6e183ee6eb81c3dbb3c3cd7a7af9b816469a411ec5b71f"  # the HEAD generator before them


def _job(seed: int, fault: str):
    """run_job's job and raw dumps, without the analysis."""
    seen = {}
    real = jobgen.dumps_of

    def keep(job, issued, rng, **kw):
        seen["raw"], seen["issued"] = real(job, issued, rng, **kw), issued
        return seen["raw"]

    jobgen.dumps_of = keep
    try:
        _, job, analysis = accuracy.run_job(seed, fault)
    finally:
        jobgen.dumps_of = real
    return job, seen["raw"], seen["issued"], analysis


def _collectives(dump: dict, group: str) -> list[dict]:
    return [e for e in dump["entries"] if str(e["pg_id"]) == group and not e["is_p2p"] and "coalesced" not in e["profiling_name"]]


def _check_times(job, raw):
    """Creation times rise in each buffer; no op that finished waited past its timeout."""
    for dump in raw.values():
        times = [e["time_created_ns"] for e in dump["entries"]]
        assert times == sorted(times)
        for e in dump["entries"]:
            assert e["timeout_ms"] == job.timeout_ms
            if e["time_discovered_completed_ns"]:
                assert 0 < e["time_discovered_completed_ns"] - e["time_created_ns"] < e["timeout_ms"] * 1_000_000


@pytest.mark.parametrize("seed", SEEDS)
def test_a_stale_dump_is_an_earlier_moment_of_an_innocent_rank(seed):
    job, raw, issued, _ = _job(seed, "stale_dump")
    _check_times(job, raw)
    (stale,) = job.stale  # (jobgen's fallback "none", a run too short to show one, is not among these seeds)
    assert stale not in job.truth and stale != job.faulted and job.truth == {job.faulted}
    kept, full = issued[stale], job.programs[stale]
    assert len(kept) <= len(full) and [op for op, _ in kept] == full[:len(kept)]
    others = [max(e["time_created_ns"] for e in d["entries"]) for r, d in raw.items() if r != stale and d["entries"]]
    newest = job.created[stale][len(kept) - 1]
    timeout = job.timeout_ms * 1_000_000
    if ", long:" in job.variant:
        assert newest + timeout + jobgen.CLOCKS_NS < min(others)
    elif ", short:" in job.variant:
        assert newest > max(others) - timeout
    assert jobgen.shown_older(job, raw, stale)  # a peer finished an op past its end (gloo: long before its newest)
    # states as they were at that moment: all finished but the last, which may be in flight
    states = [e["retired"] if job.gloo else e["state"] == "completed" for e in raw[stale]["entries"]]
    assert all(states[:-1])


def test_stale_dumps_come_long_in_every_layout_and_short_where_states_show_them():
    """Short (the stale rank's newest op within the timeout of the latest dump's): in gloo's layout
    a peer's op past its end is then hardly ever created its timeout before that peer's newest, so
    nothing shows the dump older and jobgen draws a longer one; NCCL's "completed" shows it."""
    kinds = set()
    for seed in range(300):
        job, *_ = _job(seed, "stale_dump")
        kind = next(k for k in ("long", "short", "between", "none") if f", {k}:" in job.variant)
        kinds.add((kind, "gloo" if job.gloo else "nccl" if not job.torchcomms else "torchcomms"))
    wanted = {("long", "gloo"), ("long", "nccl"), ("short", "nccl")}  # never torchcomms (accuracy.run_job says why)
    assert not {layout for _, layout in kinds} & {"torchcomms"}, kinds
    assert wanted <= kinds, kinds
    assert not {kind for kind, _ in kinds} & {"none"}, kinds


EVIDENCE_SEEDS = range(300)


@pytest.mark.parametrize("fault", ["stale_dump", "midrun"])
def test_every_earlier_dump_is_shown_older_by_the_dumps_themselves(fault):
    """The issue asks for no wrong outcome where the dumps show the truth, so the generator makes
    only stale and mid-run dumps whose moment the dumps show (jobgen.shown_older, read from the
    dumps as written, wraps and torchcomms' seq ids included): the stale rank's dump, and in
    midrun every rank's that lacks an op another rank's cut holds (jobgen.behind), is shown older
    than a peer's. Without it such a dump reads exactly like a rank that stalled there."""
    lagging, variants = 0, set()
    for seed in EVIDENCE_SEEDS:
        job, raw, issued, _ = _job(seed, fault)
        if fault == "stale_dump":
            late = sorted(job.stale)
            assert len(late) == 1, (seed, job.variant)
        else:
            late = jobgen.behind(job, issued)
            variants.add(job.variant.split(" ")[0].rstrip(":"))
        for rank in late:
            assert jobgen.shown_older(job, raw, rank), (seed, fault, rank, job.variant)
        lagging += bool(late)
    assert lagging > len(EVIDENCE_SEEDS) // 3, lagging  # not vacuous: many jobs hold a rank behind the others
    if fault == "midrun":
        assert {"spread", "close", "long"} <= variants, variants


def _entry(group: str, seq: int, created_s: float, state: str = "completed", retired: bool = True, record: int = 0,
           gloo: bool = False) -> dict:
    return {"record_id": record, "pg_id": int(group), "collective_seq_id": seq, "is_p2p": False,
            "profiling_name": f"{'gloo' if gloo else 'nccl'}:all_reduce", "state": "scheduled" if gloo else state,
            "retired": retired, "time_created_ns": jobgen.T0 + int(created_s * jobgen.SECOND), "timeout_ms": 10_000}


def test_shown_older_asks_for_an_op_past_the_end_shown_finished():
    """jobgen.shown_older by hand: a peer's op past the rank's last one of a group they share,
    "completed" (NCCL), or retired and created its timeout before the peer's newest (gloo); not
    the same op completed on the peer and open on the rank (what an op stuck below PyTorch leaves
    too); none of a group counts only in a buffer that did not wrap; torchcomms' seq ids only by
    place in a whole buffer."""
    world = jobgen.Group("0", "default_pg", (0, 1))
    tp = jobgen.Group("1", "tp", (0, 1))
    job = jobgen.Job(2, [world, tp], {0: [], 1: []}, 0, "midrun")

    def older(mine: list[dict], theirs: list[dict], **layout) -> bool:
        job.torchcomms = layout.get("torchcomms", False)
        return bool(jobgen.shown_older(job, {0: {"entries": mine}, 1: {"entries": theirs}}, 0))

    assert older([_entry("0", 1, 0)], [_entry("0", 1, 0), _entry("0", 2, 5)])  # NCCL: #2 completed on the peer
    assert not older([_entry("0", 1, 0)], [_entry("0", 1, 0), _entry("0", 2, 5, "started", False)])  # in flight
    assert not older([_entry("0", 2, 5, "started", False)], [_entry("0", 2, 5)])  # the same op, open here: stuck?
    assert not older([_entry("0", 2, 5, retired=False, gloo=True)], [_entry("0", 2, 5, gloo=True)])
    g = {"gloo": True}
    assert not older([_entry("0", 1, 0, **g)], [_entry("0", 2, 5, **g), _entry("0", 3, 14, **g)])  # 9 s: not its timeout
    assert older([_entry("0", 1, 0, **g)], [_entry("0", 2, 5, **g), _entry("0", 3, 15, **g)])  # 10 s before its newest
    assert not older([_entry("0", 1, 0, **g)], [_entry("0", 2, 5, retired=False, **g), _entry("0", 3, 15, **g)])
    # none of tp held: 0 only in a whole buffer that holds a finished op of another group
    assert older([_entry("0", 1, 0)], [_entry("1", 1, 1)])
    assert not older([_entry("0", 1, 0, record=7)], [_entry("1", 1, 1)])  # wrapped: tp's ops may have fallen out
    assert not older([_entry("0", 1, 0, "started", False)], [_entry("1", 1, 1)])  # nothing finished here
    assert not older([], [_entry("0", 5, 1)])  # an empty buffer (a recorder off) shows nothing
    # torchcomms: the k-th op of a group in a whole buffer is its k-th, whatever its process-wide seq id
    assert older([_entry("0", 4, 0)], [_entry("0", 1, 0), _entry("0", 2, 5)], torchcomms=True)
    assert not older([_entry("0", 1, 0)], [_entry("0", 9, 0, record=3), _entry("0", 12, 5, record=4)], torchcomms=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_midrun_job_is_healthy_and_each_rank_is_cut_in_its_own_history(seed):
    job, raw, issued, analysis = _job(seed, "midrun")
    _check_times(job, raw)
    assert job.truth == set() and job.healthy and job.live == frozenset(job.programs)
    for rank, kept in issued.items():
        assert kept and [op for op, _ in kept] == job.programs[rank][:len(kept)]
        assert all(state == "completed" for _, state in kept[:-1])
    outcome = accuracy.run_job(seed, "midrun")[0]  # a healthy job: CLEAN is right, a rank named wrong
    assert (outcome == "right") == (analysis.verdict == "clean")
    assert outcome == "wrong" or not analysis.culprit_ranks


@pytest.mark.parametrize("seed", SEEDS)
def test_recorder_off_dumps_hold_a_version_and_nothing_else(seed):
    job, raw, _, analysis = _job(seed, "recorder_off")
    assert job.off and all(raw[r] == jobgen.RECORDER_OFF for r in job.off)
    assert job.truth == {job.faulted} and not job.off & job.dead
    assert (job.faulted in job.off) == ("off: the faulted rank" in job.variant)
    if job.faulted not in job.off:
        assert 1 <= len(job.off) <= 2
    outcome = accuracy.run_job(seed, "recorder_off")[0]
    if job.faulted in job.off:  # nothing can show it: naming nobody is fine, anyone else wrong
        assert outcome in ("missed", "inconclusive", "wrong", "right")
        assert (outcome == "wrong") == bool(set(analysis.culprit_ranks) - {job.faulted})


@pytest.mark.parametrize("seed", SEEDS)
def test_a_late_arrival_issued_the_last_world_op_past_its_peers_deadline(seed):
    job, raw, _, _ = _job(seed, "late_arrival")
    world = job.groups[0].name
    last = {r: _collectives(d, world)[-1] for r, d in raw.items()}
    assert len({e["collective_seq_id"] for e in last.values()}) == 1 or job.torchcomms
    assert not any(e["state"] == "completed" for e in last.values())
    if job.gloo:
        assert all(e["retired"] for e in last.values())
    late = last[job.faulted]["time_created_ns"]
    peers = max(e["time_created_ns"] for r, e in last.items() if r != job.faulted)
    assert late > peers + job.timeout_ms * 1_000_000 + 2 * jobgen.SECOND
    assert job.truth == {job.faulted}


def test_late_arrivals_are_named_where_seq_ids_count_per_group():
    """NCCL's and gloo's layouts; torchcomms' process-wide seq ids apart (see the accuracy run)."""
    outcomes = {}
    for seed in range(80):
        outcome, job, _ = accuracy.run_job(seed, "late_arrival")
        if not job.torchcomms:
            outcomes[seed] = outcome
    assert len(outcomes) > 40 and set(outcomes.values()) == {"right"}, outcomes


@pytest.mark.parametrize("seed", SEEDS)
def test_an_unrecorded_barrier_moves_every_members_seq_ids_on_by_two(seed):
    job, raw, _, analysis = _job(seed, "unrecorded")
    assert job.truth == set() and not job.torchcomms and job.seq_jumps
    (k,) = {k for _, k in job.seq_jumps}
    for name, _ in job.seq_jumps:
        group = next(g for g in job.groups if g.name == name)
        for rank in group.ranks:
            seqs = [e["collective_seq_id"] for e in _collectives(raw[rank], name)]
            if raw[rank]["entries"][0]["record_id"] == 0:  # whole buffer: from 1, one jump of 2 before the k-th
                assert seqs == [i + 1 + 2 * (i + 1 >= k) for i in range(len(seqs))]
            if "after the last collective" in job.variant:
                assert raw[rank]["pg_status"][name]["last_enqueued_collective"] == seqs[-1] + 2
    assert analysis.verdict == "clean" and not analysis.culprit_ranks, analysis.headline


def _old_jobs_digest() -> str:
    """The older fault kinds' jobs, dumps and truths, as run_job makes them, for 60 seeds each."""
    digest = hashlib.sha256()
    for fault in OLD_FAULTS:
        for seed in SEEDS:
            rng = random.Random(seed)
            job = jobgen.make_job(rng, fault)
            layout = rng.random()
            job.gloo = layout < 0.6 if fault == "pipeline_skip" else (
                not job.p2p and layout < 0.4 and fault not in jobgen.STATE_FAULTS)
            job.torchcomms = not job.p2p and 0.4 <= layout < 0.7
            issued = jobgen.simulate(job)
            if job.changes:
                job.culprits = jobgen.shown_faults(job, issued)
            elif fault in jobgen.PIPELINE_FAULTS:
                job.culprits = jobgen.pipeline_truth(job, issued)
            raw = jobgen.dumps_of(job, issued, rng, gloo=job.gloo, torchcomms=job.torchcomms)
            digest.update(repr((sorted(job.truth), sorted(raw.items()), rng.random())).encode())
    return digest.hexdigest()


def test_the_older_fault_kinds_jobs_are_unchanged():
    """Pinned when the moment kinds were added: a change here changes every older kind's job
    (update the digest only where that is meant)."""
    assert _old_jobs_digest() == OLD_JOBS_SHA256


def test_behind_takes_an_op_in_flight_on_every_member_for_a_wait():
    """jobgen.behind by hand: a rank that lacks an op a member holds, and a rank in flight in an op
    every member issued (which reads like an op stuck below PyTorch); not one whose op waits for a
    member that has not issued it (that member is the one behind)."""
    world = jobgen.Group("0", "default_pg", (0, 1, 2))
    job = jobgen.Job(3, [world], {r: [] for r in range(3)}, 0, "midrun")
    op = jobgen.Op(world, "coll", "all_reduce", [[32]], [[32]])
    done, open_ = (op, "completed"), (op, "started")
    assert jobgen.behind(job, {0: [done, open_], 1: [done], 2: [done]}) == [1, 2]
    assert jobgen.behind(job, {0: [done, open_], 1: [done, open_], 2: [done, open_]}) == [0, 1, 2]
    assert jobgen.behind(job, {0: [done, done], 1: [done, open_], 2: [done, done]}) == [1]
    assert jobgen.behind(job, {0: [done], 1: [done], 2: [done]}) == []


@pytest.mark.parametrize("seed", range(20))
def test_where_no_moment_shows_the_fallbacks_show_nothing_to_explain(seed, monkeypatch):
    """With no draw allowed (TRIES = 0): midrun falls back to every rank dumped just after the same
    world all_reduce (nobody behind), stale_dump to no stale rank at all (every dump at the hang)."""
    monkeypatch.setattr(jobgen, "TRIES", 0)
    job, raw, issued, analysis = _job(seed, "midrun")
    assert job.variant.startswith("aligned:") and jobgen.behind(job, issued) == []
    assert all(state == "completed" for ops in issued.values() for _, state in ops)
    job, raw, issued, _ = _job(seed, "stale_dump")
    assert ", none:" in job.variant and not job.stale and not job.live
    assert all(len(issued[r]) == len(jobgen.simulate(job)[r]) for r in issued)
