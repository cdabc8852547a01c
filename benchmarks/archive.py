"""Reading a dump set from a .tar.gz (and a plain .tar) against the same files in a folder.

    python benchmarks/archive.py [--ranks 256] [--repeat 5] [--data bench-data]

Generates the set once (benchmarks/generate.py), packs it, then runs frtrace on the folder and the
archives, interleaved, and prints the median wall and CPU time and the median ratio to the folder
measured pair by pair. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from timing import timed_frtrace  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default=str(HERE.parent / "bench-data"))
    args = parser.parse_args(argv)
    folder = Path(args.data) / f"archive-{args.ranks}"
    if not folder.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), str(folder), "--ranks", str(args.ranks)], check=True)
    inputs = {"folder": folder}
    for suffix, mode in ((".tar.gz", "w:gz"), (".tar", "w")):
        packed = folder.with_name(folder.name + suffix)
        if not packed.exists():
            with tarfile.open(packed, mode) as archive:
                archive.add(folder, arcname=folder.name)
        inputs[suffix.lstrip(".")] = packed
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in inputs}
    for _ in range(args.repeat):
        for name, path in inputs.items():
            runs[name].append(timed_frtrace("-d", str(path)))
    print(f"{args.ranks} ranks, {args.repeat} interleaved runs each; {os.cpu_count()} cores")
    for name, times in runs.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        wall_ratio = statistics.median(a[0] / b[0] for a, b in zip(times, runs["folder"]))
        cpu_ratio = statistics.median(a[1] / b[1] for a, b in zip(times, runs["folder"]))
        print(f"{name:8} wall {wall:.2f} s  cpu {cpu:.2f} s  vs folder: wall {wall_ratio:.2f}x  cpu {cpu_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
