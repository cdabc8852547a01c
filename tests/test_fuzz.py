"""Mutated real dumps never crash frtrace, never print a traceback, stay within the memory cap
and never change the dump folder (tests/fuzz_dumps.py; 10,000 iterations: see the README)."""

from __future__ import annotations

import os

import pytest

import fuzz_dumps


@pytest.mark.process
def test_fuzzed_real_dumps_are_handled_within_the_caps(tmp_path):
    iterations = int(os.environ.get("FRTRACE_FUZZ_ITERATIONS", "2000"))
    counts = fuzz_dumps.fuzz(iterations, seed=20261121, work=tmp_path, report=None, archives=0.5)
    assert counts["iterations"] == iterations and sum(counts["by_archive_mutation"].values()) > iterations // 3
    assert counts["peak_mib"] < fuzz_dumps.MEMORY_CAP_MIB
    assert sum(counts["exit"].values()) == iterations and counts["exit"][2] + counts["exit"][1] > 0


@pytest.mark.process
@pytest.mark.parametrize("kind", fuzz_dumps.MUTATIONS)
def test_each_mutation_changes_the_file(kind):
    import random
    data = (fuzz_dumps.real_fixtures()[0] / "nccl_trace_rank_0").read_bytes()
    rng = random.Random(3)
    assert all(fuzz_dumps.mutate(data, data[::-1], kind, rng) != data for _ in range(20))


@pytest.mark.process
def test_the_fuzzer_notices_an_internal_error(tmp_path, monkeypatch):
    """The oracle can fail: a loader bug is reported, not counted as a handled file."""
    from frtrace import loader

    def broken(path):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(loader, "read_raw", broken)
    with pytest.raises(AssertionError, match="exit status 3; traceback or internal error on stderr"):
        fuzz_dumps.fuzz(3, seed=1, work=tmp_path, report=None)


@pytest.mark.process
def test_the_fuzzer_notices_a_temporary_file_left_behind(tmp_path, monkeypatch):
    from frtrace.reading import archive

    monkeypatch.setattr(archive.shutil, "rmtree", lambda *a, **k: None)  # the unpacked copies never removed
    with pytest.raises(AssertionError, match="left behind in the temporary folder: frtrace-archive-"):
        fuzz_dumps.fuzz(6, seed=1, work=tmp_path, report=None, archives=1.0)


@pytest.mark.process
@pytest.mark.parametrize("kind", fuzz_dumps.ARCHIVE_MUTATIONS)
def test_each_archive_mutation_makes_a_readable_or_damaged_archive(tmp_path, kind):
    import random
    folder = fuzz_dumps.real_fixtures()[0]
    archive = fuzz_dumps.archived(folder, tmp_path / "dumps", kind, random.Random(5))
    assert archive.exists() and archive.name.startswith("dumps.") and archive.stat().st_size > 0


@pytest.mark.process
def test_the_fuzzer_notices_a_crash_signal(tmp_path, monkeypatch):
    from frtrace import api

    monkeypatch.setattr(api, "analyze", lambda *a, **k: os.kill(os.getpid(), 11))
    with pytest.raises(AssertionError, match="killed by signal SIGSEGV"):
        fuzz_dumps.fuzz(3, seed=1, work=tmp_path, report=None)
