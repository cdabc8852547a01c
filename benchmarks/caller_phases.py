"""Where the caller's CPU goes, phase by phase, for `frtrace -d SET -o /dev/null` (issue 51).

    python benchmarks/caller_phases.py SET [--ray ADDRESS [--node-local]] [--jobs 2] [--repeat 2] [--steps]
    python benchmarks/caller_phases.py --cluster 2 SET   # a local Ray cluster of 2 nodes (tests/ray_cluster.py)

Runs the command --repeat times in this process (the first run untimed: bytecode, page cache and
Ray's workers warm) with each phase wrapped by two timers: of the process's CPU (time.process_time:
every thread of the caller, none of its workers', its Ray driver process's or its tasks') and of the
main thread's (time.thread_time: frtrace's own work; a phase that waits counts under the process the
CPU other threads spent meanwhile). It prints each phase's CPU per dump of the last run by both, in
ms: listing the folder (with --ray, by a task on this machine's node where it can), reading (load:
receiving each dump and making it, which with --ray holds waiting for the Ray driver process's
answers and taking them), groups, the analysis, the database built and written, and the rest; then
its children's CPU (the local workers', or the Ray driver process's). With --steps also the load's
unpacking and the analysis's steps (tracks, group views, blockers, ...): several of them run once a
dump, and their timers' own cost (four clock reads, 3 us a call here) then swells the phases around
them by 0.015-0.02 ms a dump; without it, no timer runs more than a few times a run. With --ray it
also says the CPU of a Ray driver that sits idle for 5 s (a cost of the run's wall, not of its dumps,
now borne by the driver process; benchmarks/ray_tasks.py measures Ray's other costs to a driver:
importing it, connecting, each task).
A benchmark, not a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from run import table  # benchmarks/run.py, beside this script
from timing import children_cpu  # benchmarks/timing.py

from frtrace import api, cli, matcher
from frtrace.reading import cluster, discover, wire

sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]  # its ray.py is not Ray

ANALYSIS_STEPS = ("Codes", "build_tracks", "moments_by_name", "unlogged_notes", "stale_ranks", "GroupView",
                  "late_arrivals", "match_p2p", "blocker_of", "WaitGraph", "conclude")


def clocks() -> tuple[float, float]:
    """The process's CPU seconds (every thread) and the main thread's."""
    return time.process_time(), time.thread_time()


class Phases:
    """CPU seconds by phase, (process, main thread), added up by the wrappers `wrap` puts around
    the functions named (all called in the main thread)."""

    def __init__(self) -> None:
        self.spent: dict[str, tuple[float, float]] = {}
        self.labels: list[str] = []  # in the order wrapped: each phase before its parts

    def wrap(self, owner, name: str, label: str) -> None:
        function = getattr(owner, name)
        self.labels.append(label)

        def timed(*args, **kwargs):
            start = clocks()
            try:
                return function(*args, **kwargs)
            finally:
                spent = self.spent.get(label, (0.0, 0.0))
                self.spent[label] = tuple(was + now - then for was, now, then in zip(spent, clocks(), start))

        setattr(owner, name, timed)


def instrumented(steps: bool = False) -> Phases:
    phases = Phases()
    phases.wrap(discover, "walked", "listing (walk)")
    # Ray's driver: a process of the caller's own (DriverProcess), else the caller itself (older checkouts)
    driver = getattr(cluster, "DriverProcess", cluster.Cluster)
    if hasattr(driver, "discover_shared"):  # an older checkout (this script copied into it) lists without it
        phases.wrap(driver, "discover_shared", "listing (a task on this node)")
    phases.wrap(api, "load_dumps", "load")
    if driver is cluster.Cluster:
        phases.wrap(cluster.Cluster, "_step", "  load: Ray wait + get")
    else:
        phases.wrap(driver, "_next", "  load: the driver's answers awaited and taken")
    if steps:
        phases.wrap(wire.Unpacker, "dump", "  load: unpack")
    phases.wrap(api, "resolve_groups", "groups")
    phases.wrap(api, "analyze", "analysis")
    for step in ANALYSIS_STEPS if steps else ():
        phases.wrap(matcher, step, f"  analysis: {step}")
    phases.wrap(api, "build_database", "database built")
    phases.wrap(api, "write_database", "database written")
    return phases


def idle_cpu(address: str, seconds: float = 5.0) -> float:
    """The caller's CPU per second while connected to Ray and doing nothing."""
    import ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        start = time.process_time()
        time.sleep(seconds)
        return (time.process_time() - start) / seconds
    finally:
        ray.shutdown()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", help="a dump folder (benchmarks/generate.py makes one)")
    parser.add_argument("--ray", help="a Ray cluster's address")
    parser.add_argument("--node-local", action="store_true")
    parser.add_argument("--cluster", type=int, help="start a local Ray cluster of this many nodes of 1 CPU for the run")
    parser.add_argument("--jobs", type=int, default=2, help="local reading processes (without --ray)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", action="store_true", help="time the load's unpacking and the analysis's steps too")
    args = parser.parse_args(argv)
    dumps = sum(1 for name in os.listdir(args.set) if name[-1:].isdigit())
    with contextlib.ExitStack() as stack:
        address = args.ray
        if args.cluster:
            sys.path.insert(0, str(ROOT / "tests"))
            from ray_cluster import RayCluster

            address = stack.enter_context(RayCluster(nodes=args.cluster, cpus=1)).address
        command = ["-d", args.set, "-o", os.devnull]
        command += ["--ray", address, *(["--node-local"] if args.node_local else [])] if address else ["--jobs", str(args.jobs)]
        phases = instrumented(args.steps)
        for _ in range(args.repeat):
            phases.spent.clear()
            start, started, children = clocks(), time.perf_counter(), children_cpu()
            with contextlib.redirect_stdout(io.StringIO()):
                cli.main(command)
            total, wall = tuple(now - then for now, then in zip(clocks(), start)), time.perf_counter() - started
            children = children_cpu() - children
        idle = idle_cpu(address) if address else None
    said = [sum(cpu[i] for label, cpu in phases.spent.items() if not label.startswith(" ")) for i in (0, 1)]

    def row(label: str, cpu: tuple) -> tuple:
        return (label, *(f"{seconds / dumps * 1e3:.4f}" for seconds in cpu))

    rows = [row("all", total)]
    rows += [row(label, phases.spent[label]) for label in phases.labels if label in phases.spent]
    rows.append(row("the rest", [spent - part for spent, part in zip(total, said)]))
    print(f"{dumps} dumps; frtrace {' '.join(command[:1] + ['SET'] + command[2:])}; the caller's CPU, run {args.repeat} "
          f"of {args.repeat}: {wall:.1f} s wall")
    table(("phase", "process ms/dump", "main thread ms/dump"), rows)
    print(f"its children (the local workers, or the Ray driver process): {children / dumps * 1e3:.4f} ms a dump")
    if idle is not None:
        print(f"Ray's driver, idle: {idle * 1e3:.1f} ms of its process's CPU a second, {idle * wall / dumps * 1e3:.4f} ms "
              "a dump over this run's wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
