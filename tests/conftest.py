"""Factories for dump entries and dump files, shared by the tests."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# Hypothesis: in CI (CI set) the same examples every run, so a red build is the change's doing;
# locally new ones each run; HYPOTHESIS_PROFILE=long tries ten times as many (a few minutes)
_SCALE = {"ci": 1, "dev": 1, "long": 10, "mutation": 0.25}
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("long", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# tests/mutation.py: each of thousands of mutants runs the tests, so the same few examples each time
settings.register_profile("mutation", derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
PROFILE = (os.environ.get("HYPOTHESIS_PROFILE") or ("mutation" if os.environ.get("FRTRACE_MUTATION") else None)
           or ("ci" if os.environ.get("CI") else "dev"))
settings.load_profile(PROFILE)


def pytest_collection_modifyitems(config, items):
    """Under tests/mutation.py (FRTRACE_MUTATION set) the tests that start frtrace as a process are
    left out: that process imports the installed code, never the mutant, so they could only pass.
    So are the test files FRTRACE_MUTATION_LEAVE_OUT names (comma-separated): the part being run
    is not reached by them (tests/mutation.py's LEFT_OUT)."""
    if os.environ.get("FRTRACE_MUTATION"):
        files = set(filter(None, os.environ.get("FRTRACE_MUTATION_LEAVE_OUT", "").split(",")))

        def left(item) -> bool:
            return item.get_closest_marker("process") is not None or item.path.name in files

        config.hook.pytest_deselected(items=[item for item in items if left(item)])
        items[:] = [item for item in items if not left(item)]


@pytest.fixture(autouse=True)
def _read_in_process_under_mutation(monkeypatch):
    """Under tests/mutation.py, dumps are read in the test's own process: mutmut learns which tests
    reach a function by watching this process, and a worker's calls would go unseen (its mutants
    never tried). Tests of the worker processes themselves are marked `process` and left out."""
    if os.environ.get("FRTRACE_MUTATION"):
        from frtrace import loader

        monkeypatch.setattr(loader.worker_processes, "in_workers", lambda work, jobs, count: map(work, jobs))


@pytest.fixture
def ctrl_c_as_in_a_terminal():
    """SIGINT raising KeyboardInterrupt in this process, and not ignored in the processes it starts,
    as for a terminal's foreground command: a shell's background job (`.ci/run &`) starts with it
    ignored, and Python then installs no handler. Given back after the test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def examples(count: int) -> int:
    """A property test's number of examples under the profile in use."""
    return max(1, int(count * _SCALE[PROFILE]))


def generated_job(directory: Path, ranks: int, entries: int = 2000) -> Path:
    """A large synthetic job written by benchmarks/generate.py: big enough to interrupt mid-run."""
    generator = FIXTURES.parent / "benchmarks" / "generate.py"
    subprocess.run([sys.executable, str(generator), str(directory), "--ranks", str(ranks), "--entries", str(entries)],
                   check=True, capture_output=True, timeout=120)
    return directory


_PROBE = ("import pickle, resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True); "
          "sys.stdout.buffer.write(pickle.dumps((done.returncode, done.stdout, done.stderr, "
          "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)))")


def peak_of_run(argv: list[str], timeout: float = 300) -> tuple[subprocess.CompletedProcess, int]:
    """Run `argv` (bytes out) and return it with the peak resident memory, in bytes, of its largest
    process or descendant. Measured from a fresh intermediate process: the test process's own
    RUSAGE_CHILDREN keeps the largest child it ever had, whatever test started it."""
    import pickle

    probe = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, timeout=timeout, check=True)
    code, out, err, peak_kb = pickle.loads(probe.stdout)
    return subprocess.CompletedProcess(argv, code, out, err), peak_kb * 1024


def scenario_dirs() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.glob("*/expected.json"))


def entry(pg="0", desc="default_pg", seq=1, op="all_reduce", sizes=((3, 4),), out=None, dtype="Float",
          state="scheduled", backend="gloo", p2p_seq=0, record_id=None, is_p2p=False, **extra) -> dict:
    """One raw entry in the 2.10 layout; record_id is filled in by make_dump when None."""
    sizes = [list(s) for s in sizes]
    out_sizes = sizes if out is None else [list(s) for s in out]
    raw = {
        "record_id": record_id,
        "pg_id": int(pg) if pg.isdigit() else 0,
        "process_group": (pg, desc),
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": seq,
        "profiling_name": f"{backend}:{op}" if backend else op,
        "time_created_ns": 1_000_000 * seq,
        "input_sizes": sizes,
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": out_sizes,
        "output_dtypes": [dtype] * len(out_sizes),
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "timeout_ms": 1000,
        "is_p2p": is_p2p,
    }
    raw.update(extra)
    return raw


def ops(n, start=1, **kw) -> list[dict]:
    """n consecutive collectives of one group, seq ids start..start+n-1."""
    return [entry(seq=s, **kw) for s in range(start, start + n)]


def make_dump(entries: list[dict], version="2.10", pg_config=None, first_record=0) -> dict:
    """A raw 2.10 dump; record ids count from first_record (above 0 = the buffer wrapped)."""
    numbered = []
    for i, raw in enumerate(entries):
        raw = dict(raw)
        if raw["record_id"] is None:
            raw["record_id"] = first_record + i
        numbered.append(raw)
    return {
        "version": version,
        "pg_config": pg_config if pg_config is not None else {"": {"name": "", "desc": "", "ranks": "[]"}},
        "pg_status": {},
        "entries": numbered,
    }


def write_dumps(directory: Path, dumps: dict[int, object], fmt="pickle", prefix="nccl_trace_rank_") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rank, dump in dumps.items():
        if fmt == "json":
            (directory / f"{prefix}{rank}.json").write_text(json.dumps(dump))
        else:
            (directory / f"{prefix}{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    return directory


@pytest.fixture
def dump_dir(tmp_path):
    """Write {rank: raw dump} into a fresh directory and return its path."""

    def write(dumps: dict[int, object], **kw) -> Path:
        return write_dumps(tmp_path / "dumps", dumps, **kw)

    return write
