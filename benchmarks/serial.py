"""The serial share: CPU of frtrace's main process per dump, against its workers', and how --jobs scales.

    python benchmarks/serial.py --ranks 256 4096 16384 [--entries 2000] [--small 200] [--data bench-data]
                                [--generate-args "--tp 8 --timing --stacks own"] [--jobs 1 2] [--repeat 3]

Runs `frtrace -d SET -o /dev/null --jobs J` as a whole process, --repeat times per set and jobs,
and prints the median wall time, the main process's CPU (user + system of the process itself,
from its own getrusage before it exits) and the workers' (its children's), each per dump. The
main process is all that does not spread over cores: the projection to a bigger job on more
cores is main CPU per dump x ranks + worker CPU per dump x ranks / cores. Sets of more than
--big-at ranks have --small entries a rank (16,384 ranks of 2,000 entries are 8 GB of dumps).
A benchmark, not a test: it asserts nothing, it reports.
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
RUN = ("import json, os, resource, sys\n"
       "from frtrace.cli import main\n"
       "code = main(sys.argv[1:])\n"
       "me, them = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
       f"os.write(int(os.environ['{ANSWER_FD}']), json.dumps([code, me.ru_utime + me.ru_stime, them.ru_utime + them.ru_stime]).encode())\n")


def measure(data: Path, jobs: int) -> tuple[float, float, float, int]:
    """Wall seconds, main-process CPU seconds, workers' CPU seconds, exit code of one run."""
    env = {**ENV, "PYTHONPATH": str(ROOT / "src")}  # bytecode cached, as installed
    wall, (code, main_cpu, workers_cpu) = reported_run(RUN, ["-d", str(data), "-o", os.devnull, "--jobs", str(jobs)], env)
    return wall, main_cpu, workers_cpu, code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 4096, 16384])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--small", type=int, default=200, help="entries a rank in sets past --big-at ranks")
    parser.add_argument("--big-at", type=int, default=4096)
    parser.add_argument("--jobs", type=int, nargs="+", default=[2])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data")
    parser.add_argument("--generate-args", default="--tp 8 --timing --stacks own")
    args = parser.parse_args(argv)

    rows = []
    for ranks in args.ranks:
        entries = args.entries if ranks <= args.big_at else args.small
        slug = "_".join(args.generate_args.replace("-", "").split())
        data = Path(args.data) / f"serial-r{ranks}_e{entries}-{slug}"
        if not data.exists():
            subprocess.run([sys.executable, str(HERE / "generate.py"), str(data), "--ranks", str(ranks), "--entries",
                            str(entries), *args.generate_args.split()], check=True)
        for jobs in args.jobs:
            measure(data, jobs)  # untimed: the bytecode cached, the set in the page cache
            runs = [measure(data, jobs) for _ in range(args.repeat)]
            wall = statistics.median(r[0] for r in runs)
            main_cpu = statistics.median(r[1] for r in runs)
            workers_cpu = statistics.median(r[2] for r in runs)
            rows.append((ranks, entries, jobs, f"{wall:.2f}", f"{main_cpu:.2f}", f"{main_cpu / ranks * 1e3:.3f}",
                         f"{workers_cpu:.2f}", f"{workers_cpu / ranks * 1e3:.2f}", ",".join(sorted({str(r[3]) for r in runs}))))
            print(*rows[-1], sep="  ", file=sys.stderr)
    table(("ranks", "entries", "jobs", "wall s", "main CPU s", "main ms/dump", "workers CPU s", "workers ms/dump", "exit"),
          rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
