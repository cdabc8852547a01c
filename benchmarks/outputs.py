"""What the optional outputs cost: --html, --stats, --sqlite, --chrome-trace against a plain run.

    python benchmarks/outputs.py [--ranks 256] [--entries 2000] [--repeat 5] [--data bench-data]

Generates a faulty set once (benchmarks/generate.py --fault skip), then runs frtrace plain and with
each output (--chrome-trace with its default limits, and with every rank), interleaved; prints
the median wall and CPU time, the median extra time over the plain run measured pair by pair, and
each output's size. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from timing import timed_frtrace  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default=str(HERE.parent / "bench-data"))
    args = parser.parse_args(argv)
    folder = Path(args.data) / f"outputs-{args.ranks}x{args.entries}"
    if not folder.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), str(folder), "--ranks", str(args.ranks), "--entries",
                        str(args.entries), "--tp", "8", "--pp", "2", "--fault", "skip"], check=True)
    out = Path(tempfile.mkdtemp())
    variants = {
        "plain": [],
        "--html": ["--html", str(out / "report.html")],
        "--stats": ["--stats"],
        "--sqlite": ["--sqlite", str(out / "hang.db")],
        "--chrome-trace": ["--chrome-trace", str(out / "trace.json")],
        "--trace-ranks all": ["--chrome-trace", str(out / "all.json"), "--trace-ranks", "all"],
    }
    files = {"--html": out / "report.html", "--sqlite": out / "hang.db", "--chrome-trace": out / "trace.json",
             "--trace-ranks all": out / "all.json"}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, extra in variants.items():
            runs[name].append(timed_frtrace("-d", str(folder), *extra))
    print(f"{args.ranks} ranks x {args.entries} entries, {args.repeat} interleaved runs each; {os.cpu_count()} cores")
    for name, times in runs.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        extra_wall = statistics.median(a[0] - b[0] for a, b in zip(times, runs["plain"]))
        extra_cpu = statistics.median(a[1] - b[1] for a, b in zip(times, runs["plain"]))
        size = f"  {files[name].stat().st_size / 1e6:.2f} MB" if name in files else ""
        print(f"{name:15} wall {wall:.2f} s  cpu {cpu:.2f} s  over plain: wall {extra_wall:+.2f} s  cpu {extra_cpu:+.2f} s{size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
