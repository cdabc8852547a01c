"""Survivors of the mutation run's `outputs/commit` slices (session 41), each test seen failing on
its mutant in the test's process: a staged output is its owner's alone (0600) from the moment it
exists, an unnamed O_TMPFILE as much as the temporary file made where there is none, and that
file's name, for the moment it has one, says whose output it is (`.db.pkl.XXXXXXXX.tmp`)."""

from __future__ import annotations

import os
import stat

import pytest

from conftest import FIXTURES
from frtrace.outputs import commit


@pytest.mark.parametrize("tmpfile", [True, False], ids=["O_TMPFILE", "unlinked temporary file"])
def test_a_staged_output_is_private_from_its_first_moment_and_its_passing_name_says_what_it_is(tmp_path, monkeypatch,
                                                                                               tmpfile):
    if not tmpfile:
        monkeypatch.delattr(commit.os, "O_TMPFILE")
    unlinked, real_unlink = [], os.unlink

    def unlink(path, *args, **kwargs):
        unlinked.append(os.path.basename(path))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(commit.os, "unlink", unlink)
    outputs = commit.Outputs(commit.plan_outputs([("-o", str(tmp_path / "db.pkl"), "database", True)],
                                                 str(FIXTURES / "skip_rank2")))
    try:
        outputs.stage("-o", lambda handle: handle.write(b"staged"))
        (_, fd), = outputs.staged
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        if tmpfile:
            assert unlinked == []
        else:
            (name,) = unlinked
            assert name.startswith(".db.pkl.") and name.endswith(".tmp") and len(name) == len(".db.pkl.") + 8 + 4, name
    finally:
        outputs.discard()
    assert os.listdir(tmp_path) == []


def test_an_output_copied_into_place_is_copied_in_the_kernel_from_its_first_byte(tmp_path, monkeypatch):
    """A staged file is copied whole where it cannot be linked in, by copy_file_range from byte 0
    whatever its file position (its writer left that at the end): read back by Python only
    where the kernel cannot copy."""
    source = os.open(tmp_path / "staged", os.O_RDWR | os.O_CREAT, 0o600)
    target = os.open(tmp_path / "copy", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        written = os.urandom(3 << 20)
        os.write(source, written)  # its position now at the end, as a staged file's is
        try:
            os.copy_file_range(source, target, 0, 0)
        except (AttributeError, OSError) as exc:
            pytest.skip(f"no copy_file_range between files of {tmp_path} here ({exc})")
        read, real_pread = [], os.pread
        monkeypatch.setattr(commit.os, "pread", lambda *args: read.append(args) or real_pread(*args))
        commit._copy_between(source, target)
        monkeypatch.undo()
        assert read == []  # copied in the kernel
        assert os.pread(target, len(written) + 1, 0) == written
    finally:
        os.close(source)
        os.close(target)
