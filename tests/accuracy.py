"""How often frtrace names the rank a random job's injected fault is in (tests/jobgen.py).

    python tests/accuracy.py --jobs 3000 [--seed 0]

About 40% of the jobs without pipeline p2p are written in the gloo layout (no completion states,
placeholder pg_config: membership inferred), 30% with a torchcomms recorder's process-wide seq ids. Prints, per fault kind, how many jobs frtrace got right (culprits = the faulted rank), called
inconclusive, missed (CLEAN: the fault left no desync in the dumps) or got wrong (named an innocent
rank); exits 1 when any is wrong, listing the first few with their seeds. Healthy jobs (midrun,
unrecorded: the truth is nobody) are right when CLEAN and wrong when anyone is named. Where the
faulted rank's recorder was off (recorder_off), nothing can show it: CLEAN and INCONCLUSIVE are
fine, any rank named is wrong. Stale and mid-run dumps always carry what shows them older
(jobgen.shown_older), so a rank named for what such a dump lacks is wrong too.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import jobgen  # noqa: E402
from frtrace.reading.anchor import anchor_relative_seqs  # noqa: E402
from frtrace.reading.groups import resolve_groups  # noqa: E402
from frtrace.loader import normalize  # noqa: E402
from frtrace.matcher import analyze  # noqa: E402

OUTCOMES = ("right", "inconclusive", "missed", "wrong")


def run_job(seed: int, fault: str):
    """(outcome, job, analysis) of one random job."""
    rng = random.Random(seed)
    job = jobgen.make_job(rng, fault)
    layout = rng.random()
    if fault == "pipeline_skip":
        job.gloo = layout < 0.6  # its sends and recvs are left out of the dumps
    else:
        job.gloo = not job.p2p and layout < 0.4 and fault not in jobgen.STATE_FAULTS  # gloo records no send/recv, no states
    # not for unrecorded (monitored_barrier: c10d's), nor for dumps taken at different moments: a
    # torchcomms recorder's wrapped groups are lined up by their completed ops, as of one moment
    job.torchcomms = not job.p2p and 0.4 <= layout < 0.7 and fault not in ("unrecorded", "midrun", "stale_dump")
    issued = jobgen.simulate(job)
    if job.changes:
        job.culprits = jobgen.shown_faults(job, issued)
    elif fault in jobgen.PIPELINE_FAULTS:
        job.culprits = jobgen.pipeline_truth(job, issued)
    if fault in jobgen.MOMENT_FAULTS:  # timed ops; dumps taken at their own moments
        issued = jobgen.moments(job, issued, rng)
    raw = jobgen.dumps_of(job, issued, rng, gloo=job.gloo, torchcomms=job.torchcomms)
    dumps = {rank: normalize(d, rank, f"nccl_trace_rank_{rank}", "pickle") for rank, d in sorted(raw.items())}
    table = resolve_groups(dumps, frozenset(dumps))
    anchoring = anchor_relative_seqs(dumps, table)
    analysis = analyze(dumps, table, anchoring=anchoring)
    culprits = set(analysis.culprit_ranks)
    undecided_part = any(e.startswith("undecided") for e in analysis.evidence)
    if not job.truth:  # a healthy job (jobgen.HEALTHY_FAULTS): CLEAN is right; naming anyone, or a fault, is wrong
        outcome = "right" if analysis.verdict == "clean" else \
            "inconclusive" if analysis.verdict == "inconclusive" and not culprits else "wrong"
    elif analysis.verdict == "inconclusive" or (undecided_part and culprits < job.truth):
        outcome = "inconclusive"  # or partly: the culprits it names are right, and it says it cannot decide the rest
    elif analysis.verdict == "clean":
        outcome = "missed"
    elif culprits == job.truth:
        outcome = "right"
    else:
        outcome = "wrong"
    return outcome, job, analysis


def measure(jobs: int, seed: int) -> tuple[dict[str, Counter], list[str]]:
    counts = {fault: Counter() for fault in jobgen.FAULTS}
    wrong = []
    for i in range(jobs):
        fault = jobgen.FAULTS[i % len(jobgen.FAULTS)]
        job_seed = seed * 1_000_003 + i
        outcome, job, analysis = run_job(job_seed, fault)
        counts[fault][outcome] += 1
        counts[fault]["gloo"] += job.gloo
        counts[fault]["torchcomms"] += job.torchcomms
        counts[fault][f"torchcomms {outcome}"] += job.torchcomms
        named = set(analysis.culprit_ranks)
        counts[fault]["off named"] += bool(named & job.off)  # a rank whose recorder was off (recorder_off)
        counts[fault]["stale named"] += bool(named & job.stale)  # the innocent rank whose dump is older (stale_dump)
        if outcome == "wrong" and len(wrong) < 10:
            variant = f", {job.variant}" if fault in jobgen.MOMENT_FAULTS else ""
            wrong.append(f"seed {job_seed} ({fault}{variant}, ranks {sorted(job.truth)} of {job.world}): {analysis.headline}")
    return counts, wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started, cpu = time.monotonic(), time.process_time()
    counts, wrong = measure(args.jobs, args.seed)
    print(f"| fault | jobs (gloo, torchcomms layout) | {' | '.join(OUTCOMES)} |")
    print(f"|---|---|{'---|' * len(OUTCOMES)}")
    for fault, c in counts.items():
        print(f"| {fault} | {sum(c[o] for o in OUTCOMES)} ({c['gloo']}, {c['torchcomms']}) | {' | '.join(str(c[o]) for o in OUTCOMES)} |")
    total = sum(counts.values(), Counter())
    print(f"| all | {sum(total[o] for o in OUTCOMES)} ({total['gloo']}, {total['torchcomms']}) | {' | '.join(str(total[o]) for o in OUTCOMES)} |")
    print(f"\n{args.jobs} jobs, seed {args.seed}, {time.monotonic() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU")
    for line in wrong:
        print("WRONG:", line)
    return 1 if total["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
