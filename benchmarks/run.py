"""Time frtrace, the pickle-load floor and (when installed) torchfrtrace on the same dump sets.

    python benchmarks/run.py --ranks 256 4096 [--repeat 3] [--torchfrtrace PATH] [--data bench-data]
    python benchmarks/run.py --matrix [--ranks 256] [--repeat 5] [--shapes base timing ...]

Generates each dump set once (benchmarks/generate.py, into --data), then runs every tool --repeat
times, interleaved so that load from the rest of the machine falls on all alike, and prints the
median wall time, the peak RSS of the largest process, and the ratio to the floor measured in the
same run: a single process that pickle.loads every file and does nothing else. A benchmark, not
a test: it asserts nothing, it reports.

--matrix runs frtrace against the floor on one dump set per shape of dump (MATRIX: timing on and
off, timestamps unique or repeated, stacks shared, own or off, p2p, coalesced groups, wrapped
buffers, JSON dumps), as interleaved pairs, and prints per shape the median of the pairs' wall
and CPU ratios (CPU: user + system of the whole process tree), and frtrace's peak RSS. With
--baseline (another frtrace command, e.g. a script running an older checkout with
PYTHONPATH=old/src python -m frtrace) each repeat runs floor, baseline and frtrace in alternating
order, and the table adds frtrace's wall and CPU ratios to the baseline's, pair by pair.

Every tool runs as an installed one would: with its modules' bytecode cached (see installed_env),
each command once untimed first.
"""

from __future__ import annotations

import argparse
import atexit
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLOOR = ("import json, os, pickle, sys\nd = sys.argv[1]\nfor n in sorted(os.listdir(d)):\n"
         "    with open(os.path.join(d, n), 'rb') as f:\n        (json if n.endswith('.json') else pickle).load(f)\n")
# shape -> generate.py arguments, on top of a TP=8 job; "worst" stacks the costly ones
MATRIX = {
    "base": [],
    "timing": ["--timing"],
    "repeated-times": ["--repeated-times"],
    "timing, repeated": ["--timing", "--repeated-times"],
    "stacks off": ["--stacks", "off"],
    "own stacks": ["--stacks", "own"],
    "own values": ["--stacks", "own", "--own-values"],
    "timing, own stacks": ["--timing", "--stacks", "own"],  # what NCCL writes with timing on (issue 33)
    "p2p (pp 2)": ["--pp", "2"],
    "coalesced": ["--coalesced"],
    "wrapped": ["--wrap"],
    "json": ["--json"],
    "worst": ["--timing", "--stacks", "own", "--own-values", "--pp", "2", "--coalesced", "--wrap"],
}


def installed_env() -> dict[str, str]:
    """The environment for the timed commands: Python caches the bytecode of the modules it
    imports, in a folder of this run's own, as an installed frtrace has it (pip compiles a
    package's modules when it installs it). Without it, an editable install where
    PYTHONDONTWRITEBYTECODE is set (this machine sets it) compiles every module of frtrace from
    source in every run: 60 ms of CPU a run here, 6% of a 256-rank set's floor. A command's first
    run fills the cache: each is run once untimed before it is timed (see warm_up)."""
    cache = tempfile.mkdtemp(prefix="frtrace-bench-pycache-")
    atexit.register(shutil.rmtree, cache, True)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


ENV = installed_env()


def warm_up(commands: list[list[str]]) -> None:
    """Each command once, untimed: its bytecode cached, the files it reads in the page cache."""
    for argv in commands:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)


def measure(argv: list[str]) -> tuple[float, float, int, float]:
    """Wall seconds, peak RSS in MiB (largest process of the tree), exit code, CPU seconds (user
    + system of the process and the children it waited for)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


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
    parser.add_argument("--matrix", action="store_true", help="frtrace against the floor on every shape of dump")
    parser.add_argument("--shapes", nargs="+", choices=list(MATRIX), default=list(MATRIX), help="with --matrix: these shapes only")
    parser.add_argument("--baseline", help="with --matrix: another frtrace command to compare with, run interleaved")
    args = parser.parse_args(argv)

    print(f"machine: {machine()}")
    if args.matrix:
        return matrix(args)
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
        runs: dict[str, list[tuple[float, float, int, float]]] = {name: [] for name in tools}
        warm_up(list(tools.values()))
        for _ in range(args.repeat):
            for name, command in tools.items():
                runs[name].append(measure(command))
        floor = statistics.median(t for t, *_ in runs["pickle.load floor"])
        entries = ranks * args.entries
        for name, results in runs.items():
            seconds = statistics.median(t for t, *_ in results)
            peak = max(m for _, m, *_ in results)
            codes = sorted({c for _, _, c, _ in results})
            rows.append((ranks, f"{size:.0f} MiB", name, f"{seconds:.2f}", f"{peak:.0f}", f"{seconds / floor:.2f}",
                         f"{seconds / entries * 1e6:.2f}", ",".join(map(str, codes))))
    table(("ranks", "dumps", "tool", "median s", "peak RSS MiB", "x floor", "us/entry", "exit"), rows)
    return 0


def matrix(args) -> int:
    rows = []
    for ranks in args.ranks:
        for shape in args.shapes:
            data = matrix_set(Path(args.data), ranks, args.entries, shape)
            size = sum(f.stat().st_size for f in data.iterdir()) / 2**20
            commands = {"floor": [sys.executable, "-c", FLOOR, str(data)], "frtrace": [args.frtrace, "-d", str(data), "-o", os.devnull]}
            if args.baseline:
                commands["baseline"] = [args.baseline, "-d", str(data), "-o", os.devnull]
            results: dict[str, list] = {name: [] for name in commands}
            warm_up(list(commands.values()))
            for i in range(args.repeat):
                for name in list(commands)[:: 1 if i % 2 == 0 else -1]:  # alternating order: neither always runs first
                    results[name].append(measure(commands[name]))
            floor_runs, runs = results["floor"], results["frtrace"]
            wall = statistics.median(run[0] / floor[0] for run, floor in zip(runs, floor_runs))
            cpu = statistics.median(run[3] / floor[3] for run, floor in zip(runs, floor_runs))
            row = (ranks, shape, f"{size:.0f} MiB", f"{statistics.median(f[0] for f in floor_runs):.2f}",
                   f"{statistics.median(f[3] for f in floor_runs):.2f}", f"{statistics.median(r[0] for r in runs):.2f}",
                   f"{statistics.median(r[3] for r in runs):.2f}", f"{wall:.2f}", f"{cpu:.2f}",
                   f"{max(r[1] for r in runs):.0f}", ",".join(map(str, sorted({r[2] for r in runs}))))
            if args.baseline:
                base = results["baseline"]
                row += (f"{statistics.median(r[0] / b[0] for r, b in zip(runs, base)):.3f}",
                        f"{statistics.median(r[3] / b[3] for r, b in zip(runs, base)):.3f}", f"{max(b[1] for b in base):.0f}",
                        ",".join(map(str, sorted({b[2] for b in base}))))
            rows.append(row)
            print(*rows[-1], sep="  ", file=sys.stderr)
    table(("ranks", "shape", "dumps", "floor wall s", "floor CPU s", "frtrace wall s", "frtrace CPU s", "wall x floor",
           "CPU x floor", "peak RSS MiB", "exit") + (("wall x baseline", "CPU x baseline", "baseline RSS MiB", "baseline exit")
                                                    if args.baseline else ()), rows)
    return 0


def matrix_set(root: Path, ranks: int, entries: int, shape: str) -> Path:
    """The folder of one shape's dump set under `root`, generated the first time it is asked for."""
    slug = "_".join("".join(c for c in shape if c.isalnum() or c in " -").split())  # "p2p (pp 2)" -> p2p_pp_2
    data = root / f"matrix-r{ranks}_e{entries}-{slug}"
    if not data.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), str(data), "--ranks", str(ranks), "--entries",
                        str(entries), "--tp", "8", *MATRIX[shape]], check=True)
    return data


def table(headers: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)))


if __name__ == "__main__":
    sys.exit(main())
