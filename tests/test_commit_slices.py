"""Survivors of the mutation run's `outputs/commit` slices (sessions 41-42), each test seen failing
on its mutant in the test's process: a staged output is its owner's alone (0600) from the moment it
exists, an unnamed O_TMPFILE as much as the temporary file made where there is none, and that
file, made beside its target, has a name for a moment that says whose output it is
(`.db.pkl.XXXXXXXX.tmp`, a stream's `.frtrace.XXXXXXXX.tmp`, a long target's cut to the folder's
limit exactly); a staged file copied into place where it cannot be linked is copied in the kernel,
from its first byte whatever its position, piece after piece; a dump URL kept whole when outputs
are checked against it; signals held by handlers alone where no thread can mask them; a database
the library writes on standard output is binary there too; text outputs UTF-8 in any locale; objects
put in a store before any file is renamed."""

from __future__ import annotations

import os
import stat
import sys
import tempfile

import pytest

from conftest import FIXTURES
from frtrace.outputs import commit
from remote_servers import s3_env, s3_server  # noqa: F401 - pytest fixtures


@pytest.fixture
def unlinked(monkeypatch) -> list[str]:
    """The paths commit unlinks, each unlinked as ever: a staged file's passing name."""
    paths, real_unlink = [], os.unlink
    monkeypatch.setattr(commit.os, "unlink", lambda path, *args, **kwargs: paths.append(path) or real_unlink(path, *args,
                                                                                                            **kwargs))
    return paths


@pytest.mark.parametrize("tmpfile", [True, False], ids=["O_TMPFILE", "unlinked temporary file"])
def test_a_staged_output_is_private_from_its_first_moment_and_its_passing_name_says_what_it_is(tmp_path, monkeypatch,
                                                                                               tmpfile, unlinked):
    if not tmpfile:
        monkeypatch.delattr(commit.os, "O_TMPFILE")
    outputs = commit.Outputs(commit.plan_outputs([("-o", str(tmp_path / "db.pkl"), "database", True)],
                                                 str(FIXTURES / "skip_rank2")))
    try:
        outputs.stage("-o", lambda handle: handle.write(b"staged"))
        (_, fd), = outputs.staged
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        if tmpfile:
            assert unlinked == []
        else:
            (path,) = unlinked  # made beside its target, so linked in where it lands
            folder, name = os.path.split(path)
            assert folder == str(tmp_path) and name.startswith(".db.pkl.") and name.endswith(".tmp"), path
            assert len(name) == len(".db.pkl.") + 8 + len(".tmp"), path
    finally:
        outputs.discard()
    assert os.listdir(tmp_path) == []


def test_a_passing_name_is_found_in_bounded_time_for_any_target_name(tmp_path):
    """Cutting a target's name to the room left is a short walk whatever the name (one of 300
    characters, past the room; one of 300 two-byte characters): done well within seconds, in a
    thread so that a walk that never ends fails here instead of hanging the suite
    (`_temp_prefix` 24 never ended on a name longer than the room)."""
    import threading

    for name in ("d" * 300, "é" * 300):
        plan = commit.PlannedOutput("-o", str(tmp_path / name), "database", True, str(tmp_path / name), None, None)
        found = []
        walk = threading.Thread(target=lambda: found.append(commit._temp_prefix(str(tmp_path), plan)), daemon=True)
        walk.start()
        walk.join(10)
        assert found, f"no passing name within 10 s for a target of {len(name)} characters"
        assert len(os.fsencode(found[0])) + 8 + len(".tmp") <= os.pathconf(tmp_path, "PC_NAME_MAX")


def test_a_long_targets_passing_name_keeps_as_much_of_its_name_as_the_folder_allows(tmp_path, monkeypatch, unlinked):
    """A target named with 249 characters (legal): its staged file's passing name is cut to the
    folder's limit exactly, the target's name kept as far as mkstemp's 8 characters and `.tmp`
    leave room (`_temp_prefix` 23 counted 9 and kept one character less)."""
    monkeypatch.delattr(commit.os, "O_TMPFILE")
    target = tmp_path / ("d" * 245 + ".pkl")
    outputs = commit.Outputs(commit.plan_outputs([("-o", str(target), "database", True)], str(FIXTURES / "skip_rank2")))
    try:
        outputs.stage("-o", lambda handle: handle.write(b"staged"))
    finally:
        outputs.discard()
    (path,) = unlinked
    name = os.path.basename(path)
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    assert len(name) == limit and name.startswith("." + target.name[:limit - 14] + "."), name


def test_a_database_the_api_writes_on_standard_output_is_the_bytes_of_its_file(tmp_path, monkeypatch):
    """The library takes `-` for standard output for every output (the command line refuses it for
    `-o` only, a pickle on a terminal being of no use): the database written there is a binary
    output as much as in a file, the same bytes (`plan_outputs` 18 planned standard output as text,
    and the pickle could not be written)."""
    import frtrace
    from test_commit_in_process import Pipe, on_stdout

    result = frtrace.analyze_dumps(str(FIXTURES / "skip_rank2"))
    result.write_database(str(tmp_path / "db.pkl"))
    stdout_pipe = on_stdout(monkeypatch, Pipe())
    result.write_database("-")
    sys.stdout.flush()
    assert stdout_pipe.close() == (tmp_path / "db.pkl").read_bytes()


def test_a_text_output_is_written_in_utf8_whatever_the_locales_encoding(tmp_path):
    """A text output is UTF-8 where the locale's encoding is another (LC_CTYPE "C" for the time of
    the test: ASCII): names read from dumps hold any character (`stage` 6, 9 and 18 opened the
    output in the locale's encoding)."""
    import locale

    said = "rank 2 never joined all_reduce #10 of «tp→dp» (3 ranks wait in it)\n"
    before = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")
        with commit.Outputs(commit.plan_outputs([("--markdown", str(tmp_path / "s.md"), "Markdown summary", False)],
                                                str(FIXTURES / "skip_rank2"))) as outputs:
            outputs.stage("--markdown", lambda handle: handle.write(said))
            outputs.commit()
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert (tmp_path / "s.md").read_bytes() == said.encode("utf-8")


@pytest.fixture
def staged(tmp_path):
    """(source, target, its bytes): a staged file of 3 MiB whose position its writer left at the
    end, and an empty file to copy it into; skipped where the kernel copies no file to another."""
    source = os.open(tmp_path / "staged", os.O_RDWR | os.O_CREAT, 0o600)
    target = os.open(tmp_path / "copy", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        written = os.urandom(3 << 20)
        os.write(source, written)
        try:
            os.copy_file_range(source, target, 0, 0)
        except (AttributeError, OSError) as exc:
            pytest.skip(f"no copy_file_range between files of {tmp_path} here ({exc})")
        yield source, target, written
    finally:
        os.close(source)
        os.close(target)


def test_an_output_copied_into_place_is_copied_in_the_kernel_from_its_first_byte(staged, monkeypatch):
    """A staged file is copied whole where it cannot be linked in, by copy_file_range from byte 0
    whatever its file position: read back by Python only where the kernel cannot copy."""
    source, target, written = staged
    read, real_pread = [], os.pread
    monkeypatch.setattr(commit.os, "pread", lambda *args: read.append(args) or real_pread(*args))
    commit._copy_between(source, target)
    monkeypatch.undo()
    assert read == []  # copied in the kernel
    assert os.pread(target, len(written) + 1, 0) == written


def test_a_copy_the_kernel_makes_in_pieces_goes_on_from_where_each_piece_ended(staged, monkeypatch):
    """copy_file_range may copy less than it is asked: each next piece starts where the last
    ended, and none is asked past the end."""
    source, target, written = staged
    asked, real_copy = [], os.copy_file_range

    def in_pieces(src, dst, count, offset_src=None, *args):
        asked.append(offset_src)
        assert len(asked) <= 4, asked  # three pieces of 1 MiB, then none
        return real_copy(src, dst, min(count, 1 << 20), offset_src, *args)

    monkeypatch.setattr(commit.os, "copy_file_range", in_pieces)
    commit._copy_between(source, target)
    monkeypatch.undo()
    assert asked == [0, 1 << 20, 2 << 20]
    assert os.pread(target, len(written) + 1, 0) == written


def test_an_output_named_as_a_dump_under_a_dump_url_is_refused_whatever_the_urls_last_letters(s3_env, capsys):
    """The dump URL loses only its trailing slashes when the outputs are checked against it: a set
    under `.../pod-X` keeps its X (`_planned_url` 15 stripped the X with the slash, and the check
    then looked under `.../pod-/`, letting a dump-named output through)."""
    pytest.importorskip("s3fs", reason="writing to S3 needs s3fs (the test extra installs it)")
    from frtrace.cli import main

    s3_env.upload(FIXTURES / "skip_goes_on", "safety", "jobs/pod-X")
    assert main(["-d", "s3://safety/jobs/pod-X", "--json", "s3://safety/jobs/pod-X/trace_host-node00_9", "--jobs", "1"]) == 2
    assert ("that is an object of the dump set s3://safety/jobs/pod-X; frtrace never writes over its input"
            in capsys.readouterr().err)


def test_an_object_the_store_refuses_leaves_every_file_as_it_was(s3_env, tmp_path, capsys):
    """Objects in a store are put before any file is renamed into place: the store is what
    refuses at that point (here a bucket that does not exist, on the S3 protocol server), and
    then no file was written either (`Outputs.commit` 9 renamed the files first, and said
    `-o db.pkl` written beside a report that was not)."""
    pytest.importorskip("s3fs", reason="writing to S3 needs s3fs (the test extra installs it)")
    from frtrace.cli import main

    assert main(["-d", str(FIXTURES / "skip_rank2"), "--json", "s3://nobucket/out/r.json",
                 "-o", str(tmp_path / "db.pkl")]) == 2
    assert os.listdir(tmp_path) == []
    assert capsys.readouterr().err.endswith("(the store refused it: FileNotFoundError: The specified bucket does not "
                                            "exist); no output file was written or changed\n")


def test_a_streams_staged_file_is_named_for_frtrace_in_the_systems_temporary_folder(monkeypatch, unlinked):
    """An output to standard output has no target to name its staged file for: where there is no
    O_TMPFILE, its passing name in the system's temporary folder says it is frtrace's."""
    monkeypatch.delattr(commit.os, "O_TMPFILE")
    outputs = commit.Outputs(commit.plan_outputs([("--json", "-", "JSON report", False)], str(FIXTURES / "skip_rank2")))
    try:
        outputs.stage("--json", lambda handle: handle.write("{}"))
    finally:
        outputs.discard()
    (path,) = unlinked
    folder, name = os.path.split(path)
    assert folder == tempfile.gettempdir() and name.startswith(".frtrace.") and name.endswith(".tmp"), path


def test_where_no_thread_can_mask_signals_they_are_held_by_handlers_alone(monkeypatch):
    """A platform without pthread_sigmask (or one refusing it): the signals are held by the main
    thread's handlers alone, and releasing them asks no mask back."""
    import signal

    def refused(*args):
        raise AttributeError("pthread_sigmask")

    before = {signum: signal.getsignal(signum) for signum in commit._HELD_SIGNALS}
    monkeypatch.setattr(commit.signal, "pthread_sigmask", refused)
    held = commit._hold_signals()
    assert all(signal.getsignal(signum) == held.record for signum in commit._HELD_SIGNALS)
    commit._release_signals(held)
    assert {signum: signal.getsignal(signum) for signum in commit._HELD_SIGNALS} == before
