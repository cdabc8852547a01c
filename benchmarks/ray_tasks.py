"""What a Ray task costs the caller's CPU, whatever it reads (issue 51: the floor on files a task),
and what connecting to the cluster and leaving it cost it once.

    python benchmarks/ray_tasks.py [--nodes 2] [--seconds 16] [--tasks 16 64 256] [--connects 2]

Starts a real Ray cluster of --nodes nodes of 1 CPU on this machine (tests/ray_cluster.py) and,
in a fresh driver process each, for about --seconds of wall: sits idle, then runs N tasks that
each sleep their share of the time on the cluster's CPUs and answer one list of 700-byte strings (frtrace's answers
are about that a dump), 4 in flight, waited for one at a time with ray.wait and taken with
ray.get, as reading.cluster does. The driver's CPU (its own getrusage: every thread, Ray's among
them) less the idle run's over the same wall, divided by N, is what one task costs the caller.
Then, --connects times in a fresh driver each, the fixed costs as reading.cluster meets them:
importing Ray, ray.init to the cluster, the first task (its function exported, a worker
started), ray.shutdown, and the whole process (the interpreter's start and end too, as this
process sees its child).
A benchmark, not a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from run import ENV, table  # benchmarks/run.py, beside this script
from timing import ANSWER_FD, children_cpu, reported_run  # benchmarks/timing.py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from ray_cluster import RayCluster  # noqa: E402

_CPU = ("import json, logging, os, resource, sys, time\n"
        "def cpu():\n"
        "    used = resource.getrusage(resource.RUSAGE_SELF)\n"
        "    return used.ru_utime + used.ru_stime\n")  # the driver's own CPU, every thread
DRIVER = (_CPU +
          "import ray\n"
          "def answer(items, seconds):\n"
          "    time.sleep(seconds)\n"
          "    return [b'x' * 700] * items\n"
          "address, tasks, seconds, cpus = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])\n"
          "ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)\n"
          "task = ray.remote(num_cpus=1, max_retries=0)(answer)\n"
          "ray.get([task.remote(1, 0) for _ in range(4)])  # Ray's workers started, the function exported\n"
          "start, began = cpu(), time.perf_counter()\n"
          "if tasks == 0:\n"
          "    time.sleep(seconds)\n"
          "todo, pending = tasks, set()\n"
          "while todo or pending:\n"
          "    while todo and len(pending) < 4:\n"
          "        todo -= 1\n"
          "        pending.add(task.remote(256, seconds * cpus / tasks))\n"
          "    done, _ = ray.wait(list(pending), num_returns=1, timeout=60)\n"
          "    for ref in done:\n"
          "        ray.get(ref)\n"
          "        pending.discard(ref)\n"
          "used, wall = cpu() - start, time.perf_counter() - began\n"
          "ray.shutdown()\n"
          f"os.write(int(os.environ['{ANSWER_FD}']), json.dumps([used, wall]).encode())\n")

CONNECT = (_CPU +
           "def one():\n"
           "    return 1\n"
           "spent, mark = {}, cpu()\n"
           "def took(name):\n"
           "    global mark\n"
           "    now = cpu()\n"
           "    spent[name], mark = now - mark, now\n"
           "import ray\n"
           "took('import')\n"
           "ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False, namespace='frtrace')\n"
           "took('init')\n"
           "ray.get(ray.remote(num_cpus=1, max_retries=0)(one).remote())\n"
           "took('first task')\n"
           "ray.shutdown()\n"
           "took('shutdown')\n"
           f"os.write(int(os.environ['{ANSWER_FD}']), json.dumps(spent).encode())\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=16.0)
    parser.add_argument("--tasks", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--connects", type=int, default=2)
    args = parser.parse_args(argv)
    rows, connects = [], []
    with RayCluster(nodes=args.nodes, cpus=1) as cluster:
        _, (idle, idle_wall) = reported_run(DRIVER, [cluster.address, "0", str(args.seconds), str(args.nodes)], ENV)
        rows.append(("idle", f"{idle_wall:.1f}", f"{idle * 1e3:.0f}", f"{idle / idle_wall * 1e3:.1f}", ""))
        for tasks in args.tasks:
            _, (used, wall) = reported_run(DRIVER, [cluster.address, str(tasks), str(args.seconds), str(args.nodes)], ENV)
            beyond = used - idle / idle_wall * wall
            rows.append((f"{tasks} tasks", f"{wall:.1f}", f"{used * 1e3:.0f}", f"{used / wall * 1e3:.1f}",
                         f"{beyond / tasks * 1e3:.2f}"))
        for count in range(args.connects):
            before = children_cpu()  # the cluster's processes still run: only the driver is waited for
            _, spent = reported_run(CONNECT, [cluster.address], ENV)
            whole = children_cpu() - before
            connects.append((f"connect {count + 1}", *(f"{spent[name] * 1e3:.0f}" for name in spent),
                             f"{whole * 1e3:.0f}"))
    print(f"{args.nodes} Ray nodes of 1 CPU; a driver's CPU (its getrusage, every thread) over about {args.seconds:g} s")
    table(("run", "wall s", "driver CPU ms", "ms a second", "ms a task beyond idle"), rows)
    if connects:
        print("\nOnce a run, ms of the driver's CPU (a fresh driver each; the whole process by its parent)")
        table(("run", "import ray", "ray.init", "first task", "ray.shutdown", "whole process"), connects)
    return 0


if __name__ == "__main__":
    sys.exit(main())
