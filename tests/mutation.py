"""Mutation testing of the core: does breaking a rule make a test fail?

    python tests/mutation.py [--max-children N]

Runs mutmut (the `mutation` extra) over the modules [tool.mutmut] in pyproject.toml names: the
size and op rules, the mismatch comparison, alignment, the wait-for graph and verdict, safe file
reading and output writing. Each mutant (one small change: an operator, a constant, a condition)
runs against the in-process tests that cover its line. Prints the surviving mutants, then, as its
last line, `N killed, M survived`: every mutant not killed counts as survived (timed out, not
covered, crashed the tool). docs/testing.md lists the survivors with the reason each is left.
Not a test: it takes about an hour on 2 cores, and CI does not run it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mutmut(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=ROOT, text=True, capture_output=True, check=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, help="mutants run at once (default: the CPUs)")
    parser.add_argument("--keep", action="store_true", help="keep mutmut's work folder (mutants/) from an earlier run")
    args = parser.parse_args(argv)
    if not args.keep:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    run = ["run"] + (["--max-children", str(args.max_children)] if args.max_children else [])
    # FRTRACE_MUTATION: conftest.py leaves out the tests that run frtrace as a process (see there)
    done = subprocess.run([sys.executable, "-m", "mutmut", *run], cwd=ROOT, text=True,
                          env={**os.environ, "FRTRACE_MUTATION": "1"})
    if done.returncode != 0:
        print(f"mutmut run exited {done.returncode}", file=sys.stderr)
        return 1
    mutmut("export-cicd-stats")
    stats = json.loads((ROOT / "mutants" / "mutmut-cicd-stats.json").read_text())
    survivors = [line.strip() for line in mutmut("results").stdout.splitlines() if line.strip()]
    if survivors:
        print("not killed (`python -m mutmut show NAME` shows one):")
        for line in survivors:
            print(f"  {line}")
    killed, total = stats["killed"], stats["total"]
    print(f"{killed} killed, {total - killed} survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
