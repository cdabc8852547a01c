"""A worker's CPU per file against pickle.load of the same file, file by file, in one process.

    python benchmarks/per_file.py [--ranks 256] [--entries 2000] [--files 64] [--repeat 5]
                                  [--data bench-data] [--shapes SHAPE ...]

For each shape of benchmarks/run.py's matrix (the same dump sets, made the same way), the first
--files files of the set are read --repeat times over. Each time, each file is read twice, one
right after the other (which goes first alternates): by pickle.load alone (json.load for a JSON
set, as run.py's floor), and as a worker reads it for `frtrace -d DIR -o DB` (read, checked,
made columns, packed for the pipe and pickled as the pipe sends it). Both with the garbage
collector off, as frtrace's workers run (run.py's floor leaves it on). The CPU of each (process
time) is compared file by file: the ratio shown is the median of the per-file ratios, so a burst
of load on the machine costs one pair, not the run. Whole runs (run.py --matrix) also count the
main process, start-up and the cores' sharing; this counts the part that spreads over cores.
A benchmark, not a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import statistics
import sys
import time
from pathlib import Path

from run import MATRIX, matrix_set, table  # benchmarks/run.py, beside this script

ROOT = Path(__file__).resolve().parent.parent


def cpu_of(read, path: Path) -> float:
    """Process time of read(path), in milliseconds."""
    start = time.process_time()
    read(path)
    return (time.process_time() - start) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--files", type=int, default=64, help="files of each set read (the first ones, by name)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default="bench-data")
    parser.add_argument("--shapes", nargs="+", choices=list(MATRIX), default=list(MATRIX))
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "src"))
    from multiprocessing.reduction import ForkingPickler

    from frtrace import loader

    def parse(path: Path) -> None:
        with open(path, "rb") as handle:
            (json if path.suffix == ".json" else pickle).load(handle)

    reader = loader._Reader(times=False)  # what each worker runs per file, times left out as `-o` leaves them

    def as_worker(path: Path) -> None:
        ForkingPickler.dumps(reader((str(path), 0)))

    gc.disable()
    rows = []
    for shape in args.shapes:
        files = sorted(matrix_set(Path(args.data), args.ranks, args.entries, shape).iterdir())[:args.files]
        loads, workers = [], []
        for turn in range(args.repeat):
            for path in files:
                pair = (parse, as_worker) if turn % 2 == 0 else (as_worker, parse)
                spent = {read: cpu_of(read, path) for read in pair}
                loads.append(spent[parse])
                workers.append(spent[as_worker])
        ratios = [worker / load for worker, load in zip(workers, loads) if load > 0]
        rows.append((shape, len(files), f"{statistics.median(loads):.2f}", f"{statistics.median(workers):.2f}",
                     f"{statistics.median(ratios):.2f}", f"{min(workers) / min(loads):.2f}"))
        print(*rows[-1], sep="  ", file=sys.stderr)
    table(("shape", "files", "load ms", "worker ms", "x load (median of files)", "fastest worker / fastest load"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
