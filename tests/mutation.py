"""Mutation testing, part by part: does breaking a rule make a test fail?

    python tests/mutation.py [--part NAME ...] [--module PATH ...] [--max-children N] [--keep]

Runs mutmut (the `mutation` extra) over the modules [tool.mutmut] in pyproject.toml names, grouped
in PARTS below: the size and op rules, alignment, the wait-for graph and its rules, the verdict
and causes, the moments of the dumps, the stacks reader, the live snapshot, and safe reading and
writing. Each mutant (one small change: an operator, a constant, a condition) runs against the
in-process tests that cover its function. `--part` runs only the parts named, `--module` only
the modules named (`analysis/order.py`: a share of a part); without either, every part. Prints
the survivors, a line per part or module (`killed/mutants (percent)`), then, as its last line,
`N killed, M survived` over the parts run: every mutant not killed counts as survived (timed out,
not covered, crashed the tool). docs/testing.md lists the survivors with the reason each is left.
Not a test: CI does not run it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# part -> the modules it mutates (under src/frtrace); tests/test_mutation_parts.py checks that
# these and pyproject.toml's only_mutate name the same files, each in one part
PARTS = {
    "rules": ("analysis/size_rules.py", "analysis/collective_check.py"),
    "align": ("analysis/align.py",),
    "waitgraph": ("analysis/waitgraph.py", "analysis/p2p.py", "analysis/steps.py", "analysis/order.py"),
    "verdict": ("analysis/verdict.py",),
    "moments": ("analysis/moments.py",),
    "stacks": ("reading/stacks.py",),
    "live": ("live/fetch.py", "live/session.py"),
    "safety": ("reading/safe_read.py", "outputs/commit.py"),
}
TARGET = 0.95  # the share of a part's mutants its tests must kill


def dotted(module: str) -> str:
    """`analysis/align.py` as the prefix of its mutants' names: `frtrace.analysis.align.`"""
    return "frtrace." + module.removesuffix(".py").replace("/", ".") + "."


def module_of(mutant: str) -> str | None:
    return next((module for modules in PARTS.values() for module in modules if mutant.startswith(dotted(module))), None)


def part_of(mutant: str) -> str | None:
    module = module_of(mutant)
    return next((part for part, modules in PARTS.items() if module in modules), None)


def statuses() -> dict[str, str]:
    """Every mutant mutmut has made, and its status ("killed", "survived", "no tests", ...)."""
    done = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=ROOT, text=True,
                          capture_output=True, check=True)
    found = {}
    for line in done.stdout.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            found[name] = status
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", action="append", choices=sorted(PARTS), help="a part to run (repeatable; default: all)")
    parser.add_argument("--module", action="append", choices=sorted(m for ms in PARTS.values() for m in ms),
                        help="a module to run, under src/frtrace (repeatable)")
    parser.add_argument("--max-children", type=int, help="mutants run at once (default: the CPUs)")
    parser.add_argument("--keep", action="store_true", help="keep mutmut's work folder (mutants/) from an earlier run")
    args = parser.parse_args(argv)
    if args.module:  # reported a module a line
        groups, group_of = args.module + [m for part in args.part or () for m in PARTS[part]], module_of
    else:
        groups, group_of = args.part or list(PARTS), part_of
    modules = [m for group in groups for m in PARTS.get(group, (group,))]  # a part's modules, or the module
    if not args.keep:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    run = ["run"] + (["--max-children", str(args.max_children)] if args.max_children else [])
    names = [dotted(module) + "*" for module in modules]
    started = time.monotonic()
    # FRTRACE_MUTATION: conftest.py leaves out the tests that run frtrace as a process (see there)
    done = subprocess.run([sys.executable, "-m", "mutmut", *run, *names], cwd=ROOT, text=True,
                          env={**os.environ, "FRTRACE_MUTATION": "1"})
    if done.returncode != 0:
        print(f"mutmut run exited {done.returncode}", file=sys.stderr)
        return 1
    minutes = (time.monotonic() - started) / 60
    by_group: dict[str, list[tuple[str, str]]] = {group: [] for group in groups}
    for name, status in statuses().items():
        group = group_of(name)
        if group in by_group:
            by_group[group].append((name, status))
    survivors = sorted((name, status) for found in by_group.values() for name, status in found if status != "killed")
    if survivors:
        print("not killed (`python -m mutmut show NAME` shows one):")
        for name, status in survivors:
            print(f"  {name}: {status}")
    print(f"{', '.join(groups)}: {minutes:.0f} min")
    for group in groups:
        killed = sum(status == "killed" for _, status in by_group[group])
        total = len(by_group[group])
        share = killed / total if total else 1.0
        mark = "" if share >= TARGET else f"  (under {TARGET:.0%})"
        print(f"{group}: {killed}/{total} killed ({share:.1%}){mark}")
    total = sum(map(len, by_group.values()))
    print(f"{total - len(survivors)} killed, {len(survivors)} survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
