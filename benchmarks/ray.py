"""--ray against the local workers on the same files: wall, the caller's CPU and RSS.

    python benchmarks/ray.py [--ranks 4096] [--entries 2000] [--nodes 2] [--cpus 1] [--repeat 2]
                             [--generate-args "--tp 8 --timing --stacks own"] [--data bench-data]
                             [--modes local shared node-local floor] [--out -o /dev/null]

Generates the set once (benchmarks/generate.py), starts a real Ray cluster of --nodes nodes of
--cpus CPUs on this machine (tests/ray_cluster.py; node-local: each node in a mount namespace of
its own that shows its share of the set, hard links, at one path the caller does not have; needs
root), and runs `frtrace -d SET -o /dev/null` as a whole process in each mode, interleaved:
`local` (--jobs = the cluster's CPUs), `shared` (--ray, the set's own folder, which every node
sees) and `node-local` (--ray --node-local). Each run's caller reports its own CPU (user +
system, getrusage of itself: not its workers', not the cluster's), its peak RSS, and its children's
CPU (the local workers'; with --ray, its Ray driver process's, reading.cluster.DriverProcess)
before it exits.
`floor`, after a --ray mode, is Ray's part alone of such a run: a driver that asks of Ray what
reading.cluster asks and does nothing of frtrace's (Ray imported and connected, as many tasks of as
many files as the run's, each sleeping its share of the run's wall and answering 700 bytes a file,
about what a task's answers hold, waited for and taken one at a time, Ray shut down; the sleep
shortened by how much longer than it the untimed pass's floor took, so that its wall is the run's),
measured as a whole process the same way: no Ray driver on this cluster and machine spends less
(frtrace's is a process of the caller's own, reading.cluster.DriverProcess: compare the floor with
a run's children's CPU). Prints the median of each, the caller's CPU per dump, and each mode's wall against the first
mode's, measured pair by pair. A benchmark, not a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from run import ENV, table  # benchmarks/run.py, beside this script
from timing import ANSWER_FD, reported_run  # benchmarks/timing.py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from ray_cluster import RayCluster, namespaces_available  # noqa: E402

NODE_PATH = "/frtrace-bench-node-local"
RAY_MODES = ("shared", "node-local")  # the modes that run --ray, whose wall a floor after them matches
RUN = ("import json, os, resource, sys\n"
       "from frtrace.cli import main\n"
       "code = main(sys.argv[1:])\n"
       "me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
       f"os.write(int(os.environ['{ANSWER_FD}']), json.dumps([code, me.ru_utime + me.ru_stime, me.ru_maxrss, "
       "kids.ru_utime + kids.ru_stime]).encode())\n")


FLOOR = ("import json, logging, os, resource, sys, time\n"
         "import ray\n"
         "from frtrace import __version__\n"
         "from frtrace.reading.cluster import _IN_FLIGHT_PER_CPU, task_size\n"
         "def answer(files, seconds):\n"
         "    time.sleep(seconds)\n"
         "    return __version__, bytes(700 * files)\n"
         "address, files, cpus, wall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])\n"
         "ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=True, "
         "namespace='frtrace')\n"
         "task = ray.remote(num_cpus=1, max_retries=0)(answer)\n"
         "size = task_size(files, cpus)\n"
         "todo = [min(size, files - start) for start in range(0, files, size)][::-1]\n"
         "pending = {}\n"
         "while todo or pending:\n"
         "    while todo and len(pending) < cpus * _IN_FLIGHT_PER_CPU:\n"
         "        count = todo.pop()\n"
         "        pending[task.remote(count, wall * cpus * count / files)] = count\n"
         "    done, _ = ray.wait(list(pending), num_returns=1)\n"
         "    for ref in done:\n"
         "        ray.get(ref)\n"
         "        del pending[ref]\n"
         "ray.shutdown()\n"
         "me = resource.getrusage(resource.RUSAGE_SELF)\n"
         f"os.write(int(os.environ['{ANSWER_FD}']), json.dumps([0, me.ru_utime + me.ru_stime, me.ru_maxrss, 0]).encode())\n")


def measure(args: list[str], script: str = RUN) -> tuple[float, float, float, int, float]:
    """Wall seconds, the caller's CPU seconds, its peak RSS in MiB, the exit code of one run, and
    its children's CPU seconds (the local workers', or the Ray driver process's)."""
    wall, (code, cpu, rss_kib, children) = reported_run(script, args, {**ENV, "PYTHONPATH": str(ROOT / "src")})
    return wall, cpu, rss_kib / 1024, code, children


def split(data: Path, nodes: int) -> dict[str, str]:
    """The set's files shared out over node folders (hard links, round-robin by rank)."""
    views = {}
    files = sorted(p for p in data.iterdir() if p.is_file() and p.name[-1].isdigit())
    for index in range(nodes):
        name = f"node-{chr(ord('a') + index)}"
        folder = data.parent / f"{data.name}-{nodes}nodes" / name
        if not folder.exists():
            folder.mkdir(parents=True)
            for path in files[index::nodes]:
                os.link(path, folder / path.name)
        views[name] = str(folder)
    return views


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=1, help="CPUs each node offers")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--data", default=str(ROOT / "bench-data"))
    parser.add_argument("--generate-args", default="--tp 8 --timing --stacks own")
    parser.add_argument("--modes", nargs="+", default=["local", "shared", "node-local"],
                        choices=["local", "shared", "node-local", "floor"])
    parser.add_argument("--out", nargs="*", default=["-o", os.devnull], help="the outputs each run writes")
    args = parser.parse_args(argv)

    slug = "_".join(args.generate_args.replace("-", "").split())
    data = Path(args.data) / f"ray-r{args.ranks}_e{args.entries}-{slug}"
    if not data.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), str(data), "--ranks", str(args.ranks), "--entries",
                        str(args.entries), *args.generate_args.split()], check=True)
    modes = list(args.modes)
    views = None
    if "node-local" in modes:
        if namespaces_available() is not None:
            print(f"node-local left out: {namespaces_available()}")
            modes.remove("node-local")
        else:
            views = split(data, args.nodes)
    if "floor" in modes and not any(mode in RAY_MODES for mode in modes[:modes.index("floor")]):
        parser.error("floor comes after a --ray mode (shared or node-local), whose wall it matches")
    cpus = args.nodes * args.cpus
    with RayCluster(nodes=args.nodes, cpus=args.cpus, views=views, path=NODE_PATH if views else None) as cluster:
        commands = {"local": ["-d", str(data), "--jobs", str(cpus)],
                    "shared": ["-d", str(data), "--ray", cluster.address],
                    "node-local": ["-d", NODE_PATH, "--ray", cluster.address, "--node-local"]}
        runs: dict[str, list] = {mode: [] for mode in modes}
        slack = 0.0  # how much longer than its tasks' sleep the floor's wall is (start, end, scheduling)
        # the first pass untimed: bytecode cached, the set in the page cache, Ray's workers started
        for timed in [False] + [True] * args.repeat:
            ray_wall = 0.0  # the last --ray run's
            for mode in modes:
                if mode == "floor":
                    sleep = max(0.0, ray_wall - slack)
                    measured = measure([cluster.address, str(args.ranks), str(cpus), f"{sleep:.3f}"], FLOOR)
                    if not timed:
                        slack = measured[0] - sleep
                else:
                    measured = measure([*commands[mode], *args.out])
                if mode in RAY_MODES:
                    ray_wall = measured[0]
                if timed:
                    runs[mode].append(measured)
    rows = []
    for mode in modes:
        wall = statistics.median(r[0] for r in runs[mode])
        cpu = statistics.median(r[1] for r in runs[mode])
        rss = statistics.median(r[2] for r in runs[mode])
        ratio = statistics.median(a[0] / b[0] for a, b in zip(runs[mode], runs[modes[0]]))
        codes = ",".join(sorted({str(r[3]) for r in runs[mode]}))
        children = statistics.median(r[4] for r in runs[mode])
        rows.append((mode, f"{wall:.2f}", f"{cpu:.2f}", f"{cpu / args.ranks * 1e3:.3f}", f"{rss:.0f}",
                     f"{children:.2f}", f"{(cpu + children) / args.ranks * 1e3:.3f}", f"{ratio:.2f}x", codes))
    print(f"{args.ranks} ranks x {args.entries} entries ({args.generate_args}); {args.nodes} Ray nodes of {args.cpus} "
          f"CPU; local --jobs {cpus}; {args.repeat} interleaved runs each, medians; outputs: {' '.join(args.out)}")
    table(("mode", "wall s", "caller CPU s", "caller ms/dump", "caller RSS MiB", "children CPU s", "with children ms/dump",
           f"wall vs {modes[0]}", "exit"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
