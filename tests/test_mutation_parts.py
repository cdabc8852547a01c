"""tests/mutation.py runs mutmut part by part: every module pyproject.toml gives mutmut is in
exactly one part, and every part's module exists."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from mutation import PARTS, dotted, module_of, part_of

ROOT = Path(__file__).resolve().parents[1]


def only_mutate() -> list[str]:
    """[tool.mutmut] only_mutate of pyproject.toml (read by hand: tomllib is 3.11's)."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = re.search(r"^only_mutate = \[(.*?)\]", text, re.S | re.M)
    assert listed, "pyproject.toml has no [tool.mutmut] only_mutate list"
    return re.findall(r'"([^"]+)"', listed.group(1))


def test_every_mutated_module_is_in_one_part():
    in_parts = Counter("src/frtrace/" + module for modules in PARTS.values() for module in modules)
    assert [path for path, count in in_parts.items() if count > 1] == []
    assert sorted(in_parts) == sorted(only_mutate())


def test_every_part_names_a_module_that_exists():
    missing = [module for modules in PARTS.values() for module in modules if not (ROOT / "src/frtrace" / module).is_file()]
    assert missing == []


def test_a_mutant_is_counted_in_the_part_of_its_module():
    assert dotted("analysis/align.py") == "frtrace.analysis.align."
    assert part_of("frtrace.analysis.align.x_build_tracks__mutmut_3") == "align"
    assert part_of("frtrace.analysis.waitgraph.xǁWaitGraphǁculprits__mutmut_1") == "waitgraph"
    assert part_of("frtrace.analysis.alignment.x_f__mutmut_1") is None  # a prefix of a name is not its module
    assert part_of("frtrace.reading.workers.x_in_workers__mutmut_1") is None


def test_a_mutant_is_counted_in_its_module_when_modules_are_run_alone():
    assert module_of("frtrace.analysis.order.xǁProgramOrderǁ_position__mutmut_2") == "analysis/order.py"
    assert module_of("frtrace.live.session.x_live_snapshot__mutmut_7") == "live/session.py"
    assert module_of("frtrace.analysis.orderly.x_f__mutmut_1") is None


def test_every_part_leaves_out_only_test_files_that_exist():
    from mutation import LEFT_OUT

    assert sorted(LEFT_OUT) == sorted(PARTS)
    missing = [name for names in LEFT_OUT.values() for name in names if not (ROOT / "tests" / name).is_file()]
    assert missing == []


def test_the_files_a_part_leaves_out_are_deselected_under_mutation():
    import os
    import subprocess
    import sys

    env = {**os.environ, "FRTRACE_MUTATION": "1", "FRTRACE_MUTATION_LEAVE_OUT": "test_mutation_parts.py,test_tar.py"}
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "tests/test_mutation_parts.py", "tests/test_tar.py", "tests/test_wire.py"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert ids and all(line.startswith("tests/test_wire.py::") for line in ids)


def test_the_slices_of_a_module_hold_each_mutant_once_and_pick_tests_by_function_name():
    from fnmatch import fnmatch

    from mutation import slice_digits, slice_patterns

    mutants = [f"frtrace.analysis.align.x_build_tracks__mutmut_{n}" for n in range(1, 41)]
    mutants += [f"frtrace.analysis.align.xǁGroupViewǁalike__mutmut_{n}" for n in (7, 10, 123)]
    functions = ["frtrace.analysis.align.x_build_tracks", "frtrace.analysis.align.xǁGroupViewǁalike"]
    for count in (2, 5, 10):
        chosen = [[m for m in mutants if any(fnmatch(m, p) for p in slice_patterns("analysis/align.py", k, count))]
                  for k in range(1, count + 1)]
        assert sorted(m for found in chosen for m in found) == sorted(mutants)  # each in exactly one slice
        assert all(len(found) >= 40 // count for found in chosen)
        assert all(m[-1] in slice_digits(k, count) for k, found in enumerate(chosen, 1) for m in found)
        for k in range(1, count + 1):
            patterns = slice_patterns("analysis/align.py", k, count)
            assert all(any(fnmatch(f, p) for p in patterns) for f in functions)  # the clean run's tests
            assert not any(fnmatch("frtrace.analysis.alignment.x_f__mutmut_1", p) for p in patterns)
    assert slice_patterns("analysis/align.py", 1, 1) == ["frtrace.analysis.align.*"]
