"""Mutation testing, part by part: does breaking a rule make a test fail?

    python tests/mutation.py [--part NAME ...] [--module PATH ...] [--slice K/N] [--max-children N] [--keep]

Runs mutmut (the `mutation` extra) over the modules [tool.mutmut] in pyproject.toml names, grouped
in PARTS below: the size and op rules, alignment, the wait-for graph and its rules, the verdict
and causes, the moments of the dumps, the stacks reader, the live snapshot, and safe reading and
writing. Each mutant (one small change: an operator, a constant, a condition) runs against the
in-process tests that cover its function. `--part` runs only the parts named, `--module` only
the modules named (`analysis/order.py`: a share of a part); without either, every part.
`--slice K/N` (N 2, 5 or 10) runs the K-th of N slices of each module named: the mutants whose
number ends in the slice's digits, about 1/N of each function's (a part too large for an hour on 2
cores, run an hour at a time; with --keep a slice after the first reuses mutmut's map of tests).
Prints the survivors, a line per part or module (`killed/mutants (percent)`), then, as its last line,
`N killed, M survived` over the parts run: every mutant not killed counts as survived (not
covered, crashed the tool, timed out: its tests ran past 5 times their unmutated wall or 10 times
their CPU, [tool.mutmut] timeout_multiplier; on cores other work shares, a slow mutant is not
told from a hung one). A part's run leaves out the test files of the other side of the tool
(LEFT_OUT). docs/testing.md lists the survivors with the reason each is left. Not a test: CI does
not run it.
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

# the test files a part's run leaves out: files of the other side of the tool (the analysis's rules
# are not reached by reading from a store or a live job, nor writing outputs safely by the
# accuracy run's random jobs). A survivor runs every test reaching its function, so each second
# of such tests is paid again by every survivor of the part (tests/conftest.py deselects them).
_INPUT_OUTPUT_TESTS = ("test_remote.py", "test_live.py", "test_live_answers.py", "test_live_survivors.py",
                       "test_safety_survivors.py")
_ANALYSIS_TESTS = ("test_accuracy.py", "test_accuracy_moments.py", "test_headline.py")
LEFT_OUT = {part: _INPUT_OUTPUT_TESTS for part in ("rules", "align", "waitgraph", "verdict", "moments")}
LEFT_OUT.update({part: _ANALYSIS_TESTS for part in ("stacks", "live", "safety")})


def dotted(module: str) -> str:
    """`analysis/align.py` as the prefix of its mutants' names: `frtrace.analysis.align.`"""
    return "frtrace." + module.removesuffix(".py").replace("/", ".") + "."


def module_of(mutant: str) -> str | None:
    return next((module for modules in PARTS.values() for module in modules if mutant.startswith(dotted(module))), None)


def part_of(mutant: str) -> str | None:
    module = module_of(mutant)
    return next((part for part, modules in PARTS.items() if module in modules), None)


def slice_digits(index: int, count: int) -> str:
    """The last digits of the mutants in slice `index` of `count` (which divides 10): mutmut numbers
    each function's mutants 1, 2, 3, ..., so every slice holds about 1/count of each function's."""
    return "".join(str(digit) for digit in range(10) if digit % count == index - 1)


def slice_patterns(module: str, index: int, count: int) -> list[str]:
    """The names mutmut is given for slice `index` of `count` of `module`: its mutants whose number
    ends in the slice's digits, and its functions by name (a name ending in a letter: mutmut picks
    the tests of the clean run by the function names a pattern matches, and a mutant's name ends in
    a digit, so this pattern adds tests, not mutants)."""
    if count == 1:
        return [dotted(module) + "*"]
    return [f"{dotted(module)}*__mutmut_*[{slice_digits(index, count)}]", f"{dotted(module)}*[!0-9]"]


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
    parser.add_argument("--slice", help="K/N: the K-th of N (2, 5 or 10) slices of each module's mutants")
    parser.add_argument("--max-children", type=int, help="mutants run at once (default: the CPUs)")
    parser.add_argument("--keep", action="store_true", help="keep mutmut's work folder (mutants/) from an earlier run")
    args = parser.parse_args(argv)
    index, count = 1, 1
    if args.slice:
        index, _, count = (int(n) if n.isdigit() else 0 for n in args.slice.partition("/"))
        if count not in (2, 5, 10) or not 1 <= index <= count:
            parser.error(f"--slice {args.slice}: K/N with N 2, 5 or 10 and 1 <= K <= N")
    if args.module:  # reported a module a line, once where a part named holds it too
        groups, group_of = list(dict.fromkeys(args.module + [m for part in args.part or () for m in PARTS[part]])), module_of
    else:
        groups, group_of = args.part or list(PARTS), part_of
    modules = [m for group in groups for m in PARTS.get(group, (group,))]  # a part's modules, or the module
    # a test file is left out only where every part run leaves it out
    parts = [part for part, members in PARTS.items() if set(members) & set(modules)]
    left_out = set.intersection(*(set(LEFT_OUT[part]) for part in parts))
    if not args.keep:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    run = ["run"] + (["--max-children", str(args.max_children)] if args.max_children else [])
    names = [pattern for module in modules for pattern in slice_patterns(module, index, count)]
    digits = slice_digits(index, count)
    started = time.monotonic()
    # FRTRACE_MUTATION: conftest.py leaves out the tests that run frtrace as a process (see there)
    env = {**os.environ, "FRTRACE_MUTATION": "1", "FRTRACE_MUTATION_LEAVE_OUT": ",".join(sorted(left_out))}
    done = subprocess.run([sys.executable, "-m", "mutmut", *run, *names], check=False, cwd=ROOT, text=True, env=env)
    if done.returncode != 0:
        print(f"mutmut run exited {done.returncode}", file=sys.stderr)
        return 1
    minutes = (time.monotonic() - started) / 60
    by_group: dict[str, list[tuple[str, str]]] = {group: [] for group in groups}
    for name, status in statuses().items():
        group = group_of(name)
        if group in by_group and name[-1:] in digits:
            by_group[group].append((name, status))
    survivors = sorted((name, status) for found in by_group.values() for name, status in found if status != "killed")
    if survivors:
        print("not killed (`python -m mutmut show NAME` shows one):")
        for name, status in survivors:
            print(f"  {name}: {status}")
    said = f" (slice {index} of {count})" if count > 1 else ""
    print(f"{', '.join(groups)}{said}: {minutes:.0f} min")
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
