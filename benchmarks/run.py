"""Time frtrace, the pickle-load floor and (when installed) torchfrtrace on the same dump sets.

    python benchmarks/run.py --ranks 256 4096 [--repeat 3] [--torchfrtrace PATH] [--data bench-data]

Generates each dump set once (benchmarks/generate.py, into --data), then runs every tool --repeat
times, interleaved so that load from the rest of the machine falls on all alike, and prints the
median wall time, the peak RSS of the largest process, and the ratio to the floor measured in the
same run: a single process that pickle.loads every file and does nothing else. A benchmark, not
a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLOOR = "import os, pickle, sys\nd = sys.argv[1]\nfor n in sorted(os.listdir(d)):\n    with open(os.path.join(d, n), 'rb') as f:\n        pickle.load(f)\n"


def measure(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MiB (largest process of the tree), exit code."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[256])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data")
    parser.add_argument("--generate-args", default="--tp 8", help="extra arguments for generate.py")
    parser.add_argument("--torchfrtrace", default=shutil.which("torchfrtrace"), help="path of torchfrtrace (default: PATH)")
    parser.add_argument("--torchfrtrace-max-ranks", type=int, default=256, help="skip torchfrtrace above this (it is slow)")
    parser.add_argument("--frtrace", default=shutil.which("frtrace") or "frtrace")
    args = parser.parse_args(argv)

    print(f"machine: {machine()}")
    rows = []
    for ranks in args.ranks:
        data = Path(args.data) / f"r{ranks}_e{args.entries}"
        if not data.exists():
            generate = [sys.executable, str(HERE / "generate.py"), str(data), "--ranks", str(ranks), "--entries", str(args.entries), *args.generate_args.split()]
            subprocess.run(generate, check=True)
        size = sum(f.stat().st_size for f in data.iterdir()) / 2**20
        tools = {
            "pickle.load floor": [sys.executable, "-c", FLOOR, str(data)],
            "frtrace": [args.frtrace, "-d", str(data), "-o", os.devnull],
        }
        if args.torchfrtrace and ranks <= args.torchfrtrace_max_ranks:
            tools["torchfrtrace"] = [args.torchfrtrace, str(data), "-o", os.devnull]
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in tools}
        for _ in range(args.repeat):
            for name, command in tools.items():
                runs[name].append(measure(command))
        floor = statistics.median(t for t, _, _ in runs["pickle.load floor"])
        entries = ranks * args.entries
        for name, results in runs.items():
            seconds = statistics.median(t for t, _, _ in results)
            peak = max(m for _, m, _ in results)
            codes = sorted({c for _, _, c in results})
            rows.append((ranks, f"{size:.0f} MiB", name, f"{seconds:.2f}", f"{peak:.0f}", f"{seconds / floor:.2f}",
                         f"{seconds / entries * 1e6:.2f}", ",".join(map(str, codes))))
    headers = ("ranks", "dumps", "tool", "median s", "peak RSS MiB", "x floor", "us/entry", "exit")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
