"""The caller's work per dump in instructions executed, phase by phase: a count the machine's load does not move (issue 51).

    python benchmarks/caller_instructions.py SET [--src SRC]

Timings on these shared 2-core machines move 1.5x within minutes, more than a cut of a tenth in
one phase; the instructions a process executes do not (valgrind's cachegrind without its cache
model counts them; a few thousand a dump move with the hash seed). The answers to SET's files are
made once by 2 local workers (times not asked, as `-o` alone asks), natively, as a Ray task sends
them; then this script runs itself under cachegrind, taking those answers as the caller takes a
task's (api.load_dumps: pickle.loads, wire.Unpacker), then groups, the analysis, the database built
and written, each phase stopped after, once and three times: the difference of the two, halved,
is one pass without start-up, and each phase's the difference from the phase before. --src counts
another checkout's frtrace (a git worktree of an older commit): one count needs no pairs.

Instructions are not time: a dict look-up that misses the cache costs more than its count says,
and Ray's own threads are not here (caller_phases.py times them). A benchmark, not a test: it
asserts nothing, it reports; it needs valgrind.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("load", "groups", "analysis", "database built", "database written")


def run_phases(src: str, answers_file: str, stop: str, passes: int) -> None:
    """Under valgrind: `passes` runs of the caller's phases up to `stop`, on the stored answers."""
    sys.path.insert(0, src)
    from frtrace import api

    with open(answers_file, "rb") as handle:
        trace_dir, answers = pickle.load(handle)
    gc.disable()  # as the caller runs
    discovery = api.find_dump_files(trace_dir)
    for _ in range(passes):
        loaded = api.load_dumps(discovery, times=False, read=lambda jobs, times: map(pickle.loads, answers))
        if stop == "load":
            continue
        table = api.resolve_groups(loaded.dumps, loaded.ranks_named, None)
        if stop == "groups":
            continue
        analysis = api.analysis_of(loaded, table)
        if stop == "analysis":
            continue
        database = api.build_database(analysis, loaded.dumps, table)
        if stop == "database built":
            continue
        with open(os.devnull, "wb") as handle:
            api.write_database(database, handle)
        del database, analysis, table, loaded
        gc.collect()


def instructions(src: str, answers_file: str, stop: str, passes: int) -> int:
    """The instructions a whole process running `passes` passes up to `stop` executes."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
               __file__, "--child", stop, str(passes), answers_file, "--src", src]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr).group(1).replace(",", ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", nargs="?", help="a dump folder (benchmarks/generate.py makes one)")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the frtrace sources to count")
    parser.add_argument("--child", nargs=3, metavar=("STOP", "PASSES", "ANSWERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        stop, passes, answers_file = args.child
        run_phases(args.src, answers_file, stop, int(passes))
        return 0
    if args.set is None or shutil.which("valgrind") is None:
        parser.error("give a dump folder, and install valgrind")
    sys.path.insert(0, args.src)
    from frtrace import loader
    from frtrace.reading import discover

    files = discover.find_dump_files(args.set).files
    answers = list(loader.read_pickled([(f.path, f.rank) for f in files], 2, False))
    with tempfile.TemporaryDirectory() as folder:
        answers_file = os.path.join(folder, "answers.pkl")
        with open(answers_file, "wb") as handle:
            pickle.dump((args.set, answers), handle, protocol=pickle.HIGHEST_PROTOCOL)
        print(f"{args.src}: {len(files)} dumps; instructions a dump of one pass, by phase")
        before = 0
        for stop in PHASES:
            once, thrice = (instructions(args.src, answers_file, stop, passes) for passes in (1, 3))
            through = (thrice - once) / 2 / len(files)
            print(f"  {stop:18s} {through - before:10,.0f}")
            before = through
        print(f"  {'all':18s} {before:10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
