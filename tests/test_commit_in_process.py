"""Outputs on standard output and signals held while committing (outputs/commit.py), asked in the
test's own process: the tests of test_hostile.py that check them start frtrace as a process (a
real terminal, pipe or signal), where the mutation run sees no mutant, so these are their
in-process twins (and a stop signalled while committing lands after it, the message saying every
output was written; an output copied in beside its target where it cannot be linked in is private
until settled and takes no existing file's name). Standard output is a real pipe here (os.pipe, sys.stdout written into it), and
a path naming it is a link to its /proc/self/fd entry, as /dev/stdout is to /proc/self/fd/1.

Real fixtures (fixtures/skip_rank2: rank 2 skipped an all_reduce, DESYNC, exit 1)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import stat
import sys
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES
from frtrace.cli import main
from frtrace.outputs import commit

SKIP = FIXTURES / "skip_rank2"
HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Pipe:
    """An os.pipe of 1 MiB, read once its write end is closed (no thread: frtrace forks its
    readers), or whose read end is closed at once (a reader gone)."""

    def __init__(self, read: bool = True) -> None:
        self.read_fd, self.write_fd = os.pipe()
        fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # room for every output of a small fixture
        if not read:
            os.close(self.read_fd)
            self.read_fd = None

    def stream(self) -> io.TextIOWrapper:
        """A text stream on the write end, as sys.stdout is on descriptor 1."""
        return io.TextIOWrapper(io.BufferedWriter(io.FileIO(self.write_fd, "w", closefd=False)), encoding="utf-8")

    def link(self, folder: Path) -> Path:
        """A path to the write end, as /dev/stdout is a link to /proc/self/fd/1."""
        link = folder / f"pipe{self.write_fd}"
        os.symlink(f"/proc/self/fd/{self.write_fd}", link)
        return link

    def close(self) -> bytes:
        """What was written into the pipe."""
        os.close(self.write_fd)
        received = bytearray()
        if self.read_fd is not None:
            while chunk := os.read(self.read_fd, 1 << 16):
                received += chunk
            os.close(self.read_fd)
        return bytes(received)


def on_stdout(monkeypatch, pipe: Pipe) -> Pipe:
    """`pipe` as sys.stdout for the rest of the test (set in the test's body: pytest puts its own
    capture back between a fixture's setup and the test)."""
    monkeypatch.setattr(sys, "stdout", pipe.stream())
    return pipe


def kept_stderr(monkeypatch) -> io.StringIO:
    kept = io.StringIO()
    monkeypatch.setattr(sys, "stderr", kept)
    return kept


def test_a_json_report_to_a_path_naming_standard_output_goes_to_it_and_the_link_stays(monkeypatch, tmp_path):
    stdout_pipe = on_stdout(monkeypatch, Pipe())
    err = kept_stderr(monkeypatch)
    link = stdout_pipe.link(tmp_path)
    assert main(["-d", str(SKIP), "--json", str(link)]) == 1
    sys.stdout.flush()
    received = stdout_pipe.close()
    assert link.is_symlink()
    report, _ = json.JSONDecoder().raw_decode(received[received.index(b'{\n  "schema_version"'):].decode())
    assert report["culprit_ranks"] == [2]


def test_two_outputs_on_standard_output_by_dash_and_by_path_are_refused(monkeypatch, tmp_path):
    stdout_pipe = on_stdout(monkeypatch, Pipe())
    err = kept_stderr(monkeypatch)
    link = stdout_pipe.link(tmp_path)
    assert main(["-d", str(SKIP), "--json", str(link), "--markdown", "-"]) == 2
    assert main(["-d", str(SKIP), "--json", "-", "--markdown", str(link)]) == 2
    assert err.getvalue().splitlines() == [f"frtrace: --json {link} and --markdown both name -; give them different files",
                                           f"frtrace: --json - and --markdown both name {link}; give them different files"]
    stdout_pipe.close()


def test_a_pipe_that_is_not_standard_output_is_another_output_than_dash(monkeypatch, tmp_path):
    stdout_pipe = on_stdout(monkeypatch, Pipe())
    err = kept_stderr(monkeypatch)
    other = Pipe()
    link = other.link(tmp_path)
    assert main(["-d", str(SKIP), "--json", str(link), "--markdown", "-"]) == 1, err.getvalue()
    sys.stdout.flush()
    markdown = stdout_pipe.close()
    assert json.loads(other.close())["culprit_ranks"] == [2]
    assert markdown.startswith(b"#") and b"rank 2" in markdown and b'"culprit_ranks"' not in markdown


def test_a_device_that_is_standard_output_takes_a_second_output(monkeypatch, capsys):
    """A terminal (a character device) takes every output written to it, in turn: standard output
    on /dev/zero, a device that takes anything, and --json naming it too is no clash."""
    with open("/dev/zero", "w") as zero:
        monkeypatch.setattr(sys, "stdout", zero)
        assert main(["-d", str(SKIP), "--json", "/dev/zero", "--markdown", "-"]) == 1
    assert "both name" not in capsys.readouterr().err


@pytest.mark.parametrize("flag, what", [("--markdown", "Markdown summary"), ("--json", "JSON report"), ("-o", "database")])
def test_an_output_naming_the_file_standard_output_is_redirected_to_is_refused(monkeypatch, tmp_path, flag, what):
    """`frtrace ... --markdown F > F`: the shell made F standard output; replacing F by rename
    would leave what is printed after (the report) in F's old, unlinked inode, lost. Refused
    before any work, F as the shell left it; another file beside it is written, and the report
    printed lands in F."""
    err = kept_stderr(monkeypatch)
    redirected = tmp_path / "F"
    with open(redirected, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        assert main(["-d", str(SKIP), flag, str(redirected)]) == 2
        out.flush()
        assert redirected.read_bytes() == b""
        assert main(["-d", str(SKIP), flag, str(tmp_path / "G")]) == 1
    assert err.getvalue().splitlines()[0] == (f"frtrace: {flag} {redirected}: standard output is redirected to that file, and "
                                              f"what is printed there would be lost; give the {what} another file, or "
                                              "redirect elsewhere")
    assert (tmp_path / "G").stat().st_size > 0
    assert b"rank 2" in redirected.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["F", "G"]


def test_a_json_report_on_standard_output_is_the_file_written_elsewhere(monkeypatch, tmp_path):
    assert main(["-d", str(SKIP), "--json", str(tmp_path / "r.json")]) == 1
    stdout_pipe = on_stdout(monkeypatch, Pipe())
    assert main(["-d", str(SKIP), "--json", "-"]) == 1
    sys.stdout.flush()
    assert stdout_pipe.close() == (tmp_path / "r.json").read_bytes()


def test_a_full_standard_output_is_the_outputs_failure_in_one_line(monkeypatch, tmp_path):
    err = kept_stderr(monkeypatch)
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        assert main(["-d", str(SKIP), "--json", "-", "-o", str(tmp_path / "db.pkl")]) == 2
    assert err.getvalue() == ("frtrace: -: cannot write the JSON report (No space left on device); no output file was "
                              "written or changed\n")
    assert os.listdir(tmp_path) == []


def test_a_reader_gone_from_standard_output_keeps_the_verdicts_status_and_the_files(monkeypatch, tmp_path, capsys):
    gone = Pipe(read=False)
    monkeypatch.setattr(sys, "stdout", gone.stream())
    assert main(["-d", str(SKIP), "--json", "-", "-o", str(tmp_path / "db.pkl")]) == 1
    err = capsys.readouterr().err
    assert "cannot write" not in err and f"wrote {tmp_path / 'db.pkl'}" in err
    assert (tmp_path / "db.pkl").stat().st_size > 1000
    sys.stdout.write("after")  # standard output now leads to /dev/null: nothing more fails
    sys.stdout.flush()
    gone.close()


def test_a_reader_gone_from_a_named_pipe_is_that_outputs_failure_and_nothing_else_is_written(tmp_path, capsys):
    gone = Pipe(read=False)
    link = gone.link(tmp_path)
    assert main(["-d", str(SKIP), "--json", str(link), "-o", str(tmp_path / "db.pkl")]) == 2
    assert capsys.readouterr().err.strip() == (f"frtrace: {link}: cannot write the JSON report (Broken pipe); "
                                               "no output file was written or changed")
    assert not (tmp_path / "db.pkl").exists()
    gone.close()


def _mask() -> set:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.mark.parametrize("tmpfile", [True, False], ids=["O_TMPFILE", "unlinked temporary file"])
def test_signals_are_held_while_a_file_is_staged_and_committed_and_released_after(tmp_path, monkeypatch, tmpfile):
    """SIGINT, SIGTERM and SIGHUP wait while an unnamed file is made (recorded before a stop can
    leave it behind) and while the outputs are renamed over their targets, so a stop lands before
    or after; after the run the signal mask is the one it found."""
    if not tmpfile:
        monkeypatch.delattr(commit.os, "O_TMPFILE")
    seen: dict[str, set] = {}
    real_replace, real_mkstemp, real_open = os.replace, commit.tempfile.mkstemp, os.open

    def replace(source, target):
        seen["replace"] = _mask()
        return real_replace(source, target)

    def mkstemp(*args, **kwargs):
        seen.setdefault("staged", _mask())
        return real_mkstemp(*args, **kwargs)

    def opened(path, flags, *args, **kwargs):
        if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
            seen.setdefault("staged", _mask())
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(commit.os, "replace", replace)
    monkeypatch.setattr(commit.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(commit.os, "open", opened)
    before = _mask()
    assert not HELD & before
    assert main(["-d", str(SKIP), "-o", str(tmp_path / "db.pkl")]) == 1
    assert HELD <= seen["staged"] and HELD <= seen["replace"]
    assert _mask() == before
    assert (tmp_path / "db.pkl").stat().st_size > 1000


def test_signals_are_held_while_staged_files_are_closed_unwritten(tmp_path, monkeypatch):
    """A run stopped before its commit closes every staged file, signals held meanwhile, and
    leaves the mask as it found it."""
    seen = []
    real_close = os.close

    def close(fd):
        seen.append(_mask())
        return real_close(fd)

    before = _mask()
    outputs = commit.Outputs(commit.plan_outputs([("-o", str(tmp_path / "db.pkl"), "database", True)], str(SKIP)))
    outputs.stage("-o", lambda handle: handle.write(b"staged"))
    monkeypatch.setattr(commit.os, "close", close)
    outputs.discard()
    assert seen and all(HELD <= mask for mask in seen)
    assert outputs.staged == [] and _mask() == before
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("threads", ["alone", "beside another thread"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signalled_while_committing_lands_after_every_output_is_written(tmp_path, monkeypatch, signum, threads):
    """The signal arrives as the first output is renamed over its target: held off, it lands once
    the commit is over, and the message says every output was written. Beside another thread
    the signal reaches that thread (the main thread blocks it), and Python runs its handler in
    the main thread all the same: held off by the mask alone, it stopped the commit halfway. (The
    thread is started once the readers were forked, as tqdm's monitor, fsspec's event loop or
    Ray's driver threads run beside a commit.)"""
    real_replace = os.replace
    targets = []
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="another", daemon=True)

    real_commit = commit.Outputs.commit

    def started_then_committed(self):
        if threads != "alone":
            other.start()  # before the signals are held: a thread inherits its creator's mask
        real_commit(self)

    def replace(source, target):
        if not targets:
            os.kill(os.getpid(), signum)
        targets.append(target)
        return real_replace(source, target)

    monkeypatch.setattr(commit.os, "replace", replace)
    monkeypatch.setattr(commit.Outputs, "commit", started_then_committed)
    err = kept_stderr(monkeypatch)
    db, report = tmp_path / "db.pkl", tmp_path / "r.json"
    try:
        assert main(["-d", str(SKIP), "-o", str(db), "--json", str(report)]) == 128 + signum
    finally:
        stop.set()
    assert err.getvalue() == f"frtrace: interrupted by {signal.Signals(signum).name}; written: -o {db}, --json {report}\n"
    assert targets == [str(db), str(report)]
    assert json.loads(report.read_text())["culprit_ranks"] == [2] and db.stat().st_size > 1000
    assert sorted(os.listdir(tmp_path)) == ["db.pkl", "r.json"]


def test_an_output_copied_beside_its_target_is_private_until_settled_and_never_takes_a_files_name(tmp_path, monkeypatch):
    """Where the staged file cannot be linked in (a file unlinked after opening, another mount's
    /proc), its bytes are copied into a new file beside the target: made for its owner alone
    until its mode is settled, and never opened over a file that already has the name chosen."""
    import errno

    def refused(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    names = iter([b"\x00\x00\x00\x01", b"\x00\x00\x00\x02"])
    monkeypatch.setattr(commit.os, "link", refused)
    monkeypatch.setattr(commit.os, "urandom", lambda count: next(names))
    taken = tmp_path / ".db.pkl.00000001.tmp"
    taken.write_bytes(b"another program's file")
    modes = []
    real_settle = commit._settle_mode

    def settle(temp, plan, new_mode):
        modes.append((os.path.basename(temp), stat.S_IMODE(os.stat(temp).st_mode)))
        real_settle(temp, plan, new_mode)

    monkeypatch.setattr(commit, "_settle_mode", settle)
    assert main(["-d", str(SKIP), "-o", str(tmp_path / "db.pkl")]) == 1
    assert modes == [(".db.pkl.00000002.tmp", 0o600)]
    assert taken.read_bytes() == b"another program's file"
    assert sorted(os.listdir(tmp_path)) == [".db.pkl.00000001.tmp", "db.pkl"]
    assert stat.S_IMODE((tmp_path / "db.pkl").stat().st_mode) == 0o666 & ~commit._umask()
