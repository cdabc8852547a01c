"""--ray against the local workers on the same files: wall, the caller's CPU and RSS.

    python benchmarks/ray.py [--ranks 4096] [--entries 2000] [--nodes 2] [--cpus 1] [--repeat 2]
                             [--generate-args "--tp 8 --timing --stacks own"] [--data bench-data]
                             [--modes local shared node-local] [--out -o /dev/null]

Generates the set once (benchmarks/generate.py), starts a real Ray cluster of --nodes nodes of
--cpus CPUs on this machine (tests/ray_cluster.py; node-local: each node in a mount namespace of
its own that shows its share of the set, hard links, at one path the caller does not have; needs
root), and runs `frtrace -d SET -o /dev/null` as a whole process in each mode, interleaved:
`local` (--jobs = the cluster's CPUs), `shared` (--ray, the set's own folder, which every node
sees) and `node-local` (--ray --node-local). Each run's caller reports its own CPU (user +
system, getrusage of itself: not its workers', not the cluster's) and peak RSS before it exits.
Prints the median of each, the caller's CPU per dump, and each mode's wall against local's,
measured pair by pair. A benchmark, not a test: it asserts nothing, it reports.
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
RUN = ("import json, os, resource, sys\n"
       "from frtrace.cli import main\n"
       "code = main(sys.argv[1:])\n"
       "me = resource.getrusage(resource.RUSAGE_SELF)\n"
       f"os.write(int(os.environ['{ANSWER_FD}']), json.dumps([code, me.ru_utime + me.ru_stime, me.ru_maxrss]).encode())\n")


def measure(args: list[str]) -> tuple[float, float, float, int]:
    """Wall seconds, the caller's CPU seconds, its peak RSS in MiB, and the exit code of one run."""
    wall, (code, cpu, rss_kib) = reported_run(RUN, args, {**ENV, "PYTHONPATH": str(ROOT / "src")})
    return wall, cpu, rss_kib / 1024, code


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
    parser.add_argument("--modes", nargs="+", default=["local", "shared", "node-local"])
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
    cpus = args.nodes * args.cpus
    with RayCluster(nodes=args.nodes, cpus=args.cpus, views=views, path=NODE_PATH if views else None) as cluster:
        commands = {"local": ["-d", str(data), "--jobs", str(cpus)],
                    "shared": ["-d", str(data), "--ray", cluster.address],
                    "node-local": ["-d", NODE_PATH, "--ray", cluster.address, "--node-local"]}
        runs: dict[str, list] = {mode: [] for mode in modes}
        for mode in modes:  # untimed: bytecode cached, the set in the page cache, Ray's workers started
            measure([*commands[mode], *args.out])
        for _ in range(args.repeat):
            for mode in modes:
                runs[mode].append(measure([*commands[mode], *args.out]))
    rows = []
    for mode in modes:
        wall = statistics.median(r[0] for r in runs[mode])
        cpu = statistics.median(r[1] for r in runs[mode])
        rss = statistics.median(r[2] for r in runs[mode])
        ratio = statistics.median(a[0] / b[0] for a, b in zip(runs[mode], runs[modes[0]]))
        codes = ",".join(sorted({str(r[3]) for r in runs[mode]}))
        rows.append((mode, f"{wall:.2f}", f"{cpu:.2f}", f"{cpu / args.ranks * 1e3:.3f}", f"{rss:.0f}",
                     f"{ratio:.2f}x", codes))
    print(f"{args.ranks} ranks x {args.entries} entries ({args.generate_args}); {args.nodes} Ray nodes of {args.cpus} "
          f"CPU; local --jobs {cpus}; {args.repeat} interleaved runs each, medians; outputs: {' '.join(args.out)}")
    table(("mode", "wall s", "caller CPU s", "caller ms/dump", "caller RSS MiB", f"wall vs {modes[0]}", "exit"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
