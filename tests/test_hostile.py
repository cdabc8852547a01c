"""Hostile input and output, round 2 (issue 9): one test per way a messy folder, a careless
option or a crafted file could lose data, inject text or name a wrong culprit."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, generated_job, make_dump, ops, peak_of_run, write_dumps
from frtrace import api, cli
from frtrace.cli import main

HEALTHY = FIXTURES / "healthy"
SKIP = FIXTURES / "skip_rank2"
TP_DP = FIXTURES / "synthetic_tp4_dp4_rank5"


def copy_fixture(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def json_report(argv: list[str], tmp_path: Path) -> dict:
    target = tmp_path / "report.json"
    main([*argv, "--json", str(target)])
    return json.loads(target.read_text())


def run_frtrace(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frtrace", *args], capture_output=True, timeout=120, **kw)


# ---------------------------------------------------------------------------- data destroyed
def test_an_output_that_is_a_dump_of_the_folder_is_refused_and_the_dump_kept(tmp_path, capsys):
    dumps = copy_fixture(SKIP, tmp_path)
    before = snapshot(dumps)
    assert main(["-d", str(dumps), "-o", str(dumps / "nccl_trace_rank_3")]) == 2
    err = capsys.readouterr().err
    assert "nccl_trace_rank_3: that is a file of the dump folder" in err and len(err.strip().splitlines()) == 1
    assert snapshot(dumps) == before


def test_an_output_reaching_a_dump_through_a_link_or_another_spelling_is_refused(tmp_path, capsys):
    dumps = copy_fixture(SKIP, tmp_path)
    before = snapshot(dumps)
    os.symlink(dumps / "expected.json", tmp_path / "looks_harmless.json")
    assert main(["-d", str(dumps), "--json", str(tmp_path / "looks_harmless.json")]) == 2
    assert main(["-d", str(dumps), "-o", f"{dumps}/../{dumps.name}/nccl_trace_rank_0"]) == 2
    assert snapshot(dumps) == before


def test_a_new_output_named_like_a_dump_in_the_dump_folder_is_refused(tmp_path, capsys):
    dumps = copy_fixture(SKIP, tmp_path)
    assert main(["-d", str(dumps), "-o", str(dumps / "nccl_trace_rank_4")]) == 2
    assert "would be read as one next time" in capsys.readouterr().err
    assert not (dumps / "nccl_trace_rank_4").exists()
    assert main(["-d", str(dumps), "-o", str(dumps / "analysis.db")]) == 1  # a name no run reads as a dump


@pytest.mark.parametrize("second", ["./x.db", "x.db", "sub/../x.db"])
def test_two_outputs_naming_one_file_in_different_spellings_are_refused(tmp_path, monkeypatch, capsys, second):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert main(["-d", str(SKIP), "-o", "x.db", "--json", second]) == 2
    assert "both name" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()


def test_two_outputs_through_a_hard_link_are_refused(tmp_path, capsys):
    (tmp_path / "a.json").write_text("{}")
    os.link(tmp_path / "a.json", tmp_path / "b.json")
    assert main(["-d", str(SKIP), "--json", str(tmp_path / "a.json"), "--chrome-trace", str(tmp_path / "b.json")]) == 2
    assert (tmp_path / "a.json").read_text() == "{}"


def test_a_link_to_a_device_is_written_through_and_stays_a_link(tmp_path):
    link = tmp_path / "sink"
    os.symlink(os.devnull, link)  # as /dev/stdout is a link; a broken writer only breaks this one
    assert main(["-d", str(SKIP), "-o", str(link), "--json", str(link)]) == 1  # /dev/null takes any number
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


def _let_go(reader, fifo):
    """Waits for a FIFO's reader to take what was written; if nothing was, opens the writing end
    once so the reader sees the end (a reader that left meanwhile makes that open fail: ENXIO)."""
    reader.join(10)
    if reader.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)


def test_a_fifo_output_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "report.pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    time.sleep(0.1)
    try:
        assert main(["-d", str(SKIP), "--json", str(fifo)]) == 1
    finally:
        _let_go(reader, fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(received[0])["culprit_ranks"] == [2]


def test_a_fifo_output_waits_for_a_slow_reader(tmp_path):
    """The FIFO is opened without blocking (nobody reading: an error at once), then written to as
    a blocking file: a reader slower than frtrace must get the whole output, not a failed write."""
    from conftest import generated_job

    job = generated_job(tmp_path / "job", ranks=8, entries=200)
    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)
    received = []

    def slow_reader():
        with open(fifo, "rb") as pipe:
            time.sleep(0.5)  # the writer fills the pipe's 64 KiB meanwhile
            received.append(pipe.read())

    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()
    time.sleep(0.1)
    try:
        assert main(["-d", str(job), "--chrome-trace", str(fifo)]) == 0
    finally:
        _let_go(reader, fifo)
    assert len(received[0]) > 1 << 16
    assert json.loads(received[0])["traceEvents"]


@pytest.mark.process
def test_json_to_dev_stdout_goes_to_standard_output(tmp_path):
    stdout = tmp_path / "stdout"
    os.symlink("/proc/self/fd/1", stdout)  # what /dev/stdout is; code that replaced it damages only this link
    result = run_frtrace("-d", str(SKIP), "--json", str(stdout))
    assert stdout.is_symlink()
    assert result.returncode == 1
    assert b'"culprit_ranks": [\n    2\n  ]' in result.stdout and b"DESYNC" in result.stdout


@pytest.mark.process
def test_an_output_on_the_file_the_shell_redirects_standard_output_to_is_refused(tmp_path):
    """`frtrace -d SET --json - --markdown F > F`, through a real shell: the JSON printed would
    have gone to F's old inode once the Markdown replaced F. Refused, F as the shell made it."""
    redirected = tmp_path / "F"
    result = subprocess.run(f'"{sys.executable}" -m frtrace -d "{SKIP}" --json - --markdown "{redirected}" > "{redirected}"',
                            shell=True, stderr=subprocess.PIPE, timeout=120)
    assert result.returncode == 2
    assert b"standard output is redirected to that file" in result.stderr
    assert redirected.read_bytes() == b""


def test_a_socket_or_other_special_file_is_never_replaced(tmp_path, capsys):
    import socket
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        assert main(["-d", str(SKIP), "-o", str(tmp_path / "sock")]) == 2
    finally:
        server.close()
    assert "not a regular file" in capsys.readouterr().err
    assert stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)


def test_new_outputs_get_the_umask_mode_and_replaced_ones_keep_theirs(tmp_path):
    old = os.umask(0o022)
    try:
        kept = tmp_path / "kept.json"
        kept.write_text("{}")
        os.chmod(kept, 0o640)
        assert main(["-d", str(SKIP), "-o", str(tmp_path / "new.db"), "--json", str(kept)]) == 1
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.db").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o640 and json.loads(kept.read_text())["verdict"] == "desync"


# ---------------------------------------------------------------------------- a wrong culprit without a word
def test_stray_files_with_digits_change_nothing(tmp_path):
    dumps = copy_fixture(HEALTHY, tmp_path)
    (dumps / "core.100").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(200))
    (dumps / "notes_20240521").write_bytes(b"todo")
    (dumps / "nccl_trace_rank_9999999999999999999999").write_bytes(pickle.dumps(make_dump(ops(1))))
    (dumps / "backup_7").write_bytes(b"")
    report = json_report(["-d", str(dumps)], tmp_path)
    assert report["verdict"] == "clean" and report["ranks_loaded"] == [0, 1, 2, 3] and report["ranks_missing"] == []
    reasons = {Path(i["path"]).name: i["reason"] for i in report["ignored_files"]}
    assert "not those of a pickle or JSON dump" in reasons["core.100"]
    assert "too large for a rank" in reasons["notes_20240521"]
    assert "too large for a rank" in reasons["nccl_trace_rank_9999999999999999999999"]
    assert "empty, and no dump beside it shares its name" in reasons["backup_7"]


def test_a_rank_beyond_the_configured_world_is_ignored(tmp_path):
    dumps = copy_fixture(TP_DP, tmp_path)
    shutil.copy(dumps / "nccl_trace_rank_3", dumps / "nccl_trace_rank_40")  # a stray copy, renamed
    report = json_report(["-d", str(dumps)], tmp_path)
    assert report["culprit_ranks"] == [5] and 40 not in report["ranks_loaded"] + report["ranks_missing"]
    assert any("rank 40 is outside the 16 ranks" in i["reason"] for i in report["ignored_files"])


def test_rank_3_and_rank_03_side_by_side_is_an_input_error(tmp_path, capsys):
    dumps = copy_fixture(HEALTHY, tmp_path)
    shutil.copy(dumps / "nccl_trace_rank_3", dumps / "nccl_trace_rank_03")
    assert main(["-d", str(dumps)]) == 2
    err = capsys.readouterr().err
    assert "two dump files claim rank 3" in err and "nccl_trace_rank_03" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("broken", [None, {}, {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, oops"}}, "garbage"],
                         ids=["missing", "empty", "unparsable", "not-a-dict"])
def test_a_rank_with_a_broken_pg_config_takes_its_membership_from_the_others(tmp_path, broken):
    dumps = copy_fixture(TP_DP, tmp_path)
    victim = dumps / "nccl_trace_rank_6"  # an innocent member of tp group 1 and dp group 6
    raw = pickle.loads(victim.read_bytes())
    if broken is None:
        del raw["pg_config"]
    else:
        raw["pg_config"] = broken
    victim.write_bytes(pickle.dumps(raw))
    report = json_report(["-d", str(dumps)], tmp_path)
    baseline = json_report(["-d", str(TP_DP)], tmp_path)
    assert report["verdict"] == "desync" and report["culprit_ranks"] == [5]
    assert report["findings"] == baseline["findings"]  # rank 6 sits in no invented one-member group


def test_a_nan_timestamp_costs_the_field_not_the_rank(tmp_path):
    raw = {r: make_dump(ops(3)) for r in range(4)}
    raw[1]["entries"][1]["time_created_ns"] = float("nan")
    raw[2]["entries"][0]["time_discovered_completed_ns"] = float("inf")
    dumps = write_dumps(tmp_path / "d", raw, fmt="json")
    report = json_report(["-d", str(dumps)], tmp_path)
    assert report["verdict"] == "clean" and report["ranks_loaded"] == [0, 1, 2, 3] and report["skipped_files"] == []


# ---------------------------------------------------------------------------- crashes and exhaustion from tiny files
def _with_raw_value(dump: dict, marker: str, opcodes: bytes) -> bytes:
    """A protocol-2 pickle of `dump` whose string `marker` is replaced by the object `opcodes` build."""
    data = pickle.dumps(dump, protocol=2)
    encoded = marker.encode()
    token = b"X" + len(encoded).to_bytes(4, "little") + encoded
    assert data.count(token) == 1
    return data.replace(token, opcodes)


def _load_in_subprocess(folder: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run frtrace on `folder`; the peak RSS (MiB) of its largest process."""
    result, peak = peak_of_run([sys.executable, "-m", "frtrace", "-d", str(folder), *extra], timeout=60)
    return result, peak / (1 << 20)


NESTED = b"N" + b"\x85" * 200_000  # None in a tuple in a tuple ... 200,000 deep: hashing it recurses in C


@pytest.mark.process
@pytest.mark.parametrize("place", ["frame_name", "input_sizes", "dict_key"])
def test_a_deeply_nested_tuple_costs_the_rank_not_the_process(tmp_path, place):
    raw = {r: make_dump(ops(3)) for r in range(4)}
    bad = make_dump(ops(3))
    if place == "frame_name":
        bad["entries"][0]["frames"] = [{"name": "DEEP", "filename": "x.py", "line": 1}]
        data = _with_raw_value(bad, "DEEP", NESTED)
    elif place == "input_sizes":  # marshalled into the entry's kind key on the fast path
        bad["entries"][0]["input_sizes"] = "DEEP"
        data = _with_raw_value(bad, "DEEP", NESTED)
    else:  # the unpickler itself hashes a dict key
        bad["DEEP"] = 1
        data = _with_raw_value(bad, "DEEP", NESTED)
    dumps = write_dumps(tmp_path / "d", raw)
    (dumps / "nccl_trace_rank_1").write_bytes(data)
    result, _ = _load_in_subprocess(dumps)
    assert result.returncode in (0, 1) and b"Traceback" not in result.stderr
    assert result.stdout.startswith(b"CLEAN") or b"rank 1" in result.stdout.splitlines()[0]


@pytest.mark.process
def test_shared_references_cannot_multiply_work(tmp_path):
    level = [1] * 10
    for _ in range(9):  # 10**10 ints when expanded; a few hundred bytes pickled
        level = [level] * 10
    raw = {r: make_dump(ops(3)) for r in range(4)}
    for spot in ("input_sizes", "frames", "input_dtypes", "process_group"):
        raw[1]["entries"][0][spot] = level
    raw[1]["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": level}}
    dumps = write_dumps(tmp_path / "d", raw)
    assert (dumps / "nccl_trace_rank_1").stat().st_size < 20_000
    result, peak = _load_in_subprocess(dumps)
    assert result.returncode == 1 and b"Traceback" not in result.stderr and peak < 500
    assert b"nccl_trace_rank_1" in result.stderr  # skipped with its reason, in seconds


@pytest.mark.process
def test_a_huge_memo_index_is_refused_without_allocating_it(tmp_path):
    dumps = write_dumps(tmp_path / "d", {r: make_dump(ops(2)) for r in range(3)})
    (dumps / "nccl_trace_rank_1").write_bytes(b"\x80\x02}r\xff\xff\xff\x3f.")  # LONG_BINPUT 2**30: 8 GiB of memo
    result, peak = _load_in_subprocess(dumps)
    assert peak < 500, peak
    assert b"far more memory than a 9-byte dump can" in result.stderr and b"Traceback" not in result.stderr


def _long4(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8b" + len(body).to_bytes(4, "little") + body


def test_huge_integers_cost_the_field_or_the_rank_with_a_reason(tmp_path):
    raw = {r: make_dump(ops(3)) for r in range(4)}
    raw[1]["entries"][0]["record_id"] = "BIG"
    raw[2]["entries"][0]["collective_seq_id"] = "BIG"
    dumps = write_dumps(tmp_path / "d", raw)
    for rank in (1, 2):
        path = dumps / f"nccl_trace_rank_{rank}"
        path.write_bytes(_with_raw_value(raw[rank], "BIG", _long4(10 ** 240_000)))  # a 100-KB integer
    report = json_report(["-d", str(dumps), "--sqlite", str(tmp_path / "x.db")], tmp_path)
    assert 1 in report["ranks_loaded"]
    (skipped,) = report["skipped_files"]
    assert skipped["path"].endswith("nccl_trace_rank_2") and "-bit integer, beyond a 64-bit integer" in skipped["reason"]


def test_a_value_over_64_bits_reaches_no_output(tmp_path):
    raw = {r: make_dump(ops(3)) for r in range(2)}
    raw[0]["entries"][1]["record_id"] = 2 ** 70
    raw[1]["entries"][2]["time_created_ns"] = -(2 ** 64)
    dumps = write_dumps(tmp_path / "d", raw, fmt="json")
    code = main(["-d", str(dumps), "--sqlite", str(tmp_path / "x.db"), "-o", str(tmp_path / "x.pkl"),
                 "--chrome-trace", str(tmp_path / "t.json")])
    assert code == 0 and (tmp_path / "x.db").exists()


def test_a_long_json_integer_costs_the_field(tmp_path):
    raw = {r: make_dump(ops(3)) for r in range(2)}
    dumps = write_dumps(tmp_path / "d", raw, fmt="json")
    path = dumps / "nccl_trace_rank_1.json"
    path.write_text(path.read_text().replace('"time_created_ns": 1000000,', '"time_created_ns": ' + "9" * 100_000 + ",", 1))
    report = json_report(["-d", str(dumps)], tmp_path)
    assert report["verdict"] == "clean" and report["skipped_files"] == []


def test_a_lone_surrogate_reaches_every_output_escaped(tmp_path, capsys):
    raw = {r: make_dump(ops(3, op="all_reduce\ud800")) for r in range(2)}
    raw[1]["entries"][2]["profiling_name"] = "gloo:broadcast\ud800"  # a mismatch, so the name is shown
    dumps = write_dumps(tmp_path / "d", raw, fmt="json")
    assert main(["-d", str(dumps), "--sqlite", str(tmp_path / "x.db"), "--chrome-trace", str(tmp_path / "t.json")]) == 1
    out = capsys.readouterr().out
    assert "broadcast\\ud800" in out
    out.encode("utf-8")


def test_a_json_dump_with_a_byte_order_mark_is_read(tmp_path):
    dumps = write_dumps(tmp_path / "d", {r: make_dump(ops(2)) for r in range(2)}, fmt="json")
    path = dumps / "nccl_trace_rank_1.json"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert json_report(["-d", str(dumps)], tmp_path)["ranks_loaded"] == [0, 1]


@pytest.mark.process
def test_a_multi_gigabyte_file_is_never_read_whole(tmp_path):
    dumps = copy_fixture(HEALTHY, tmp_path)
    with open(dumps / "core.4", "wb") as core:  # sparse: no disk used
        core.write(b"\x7fELF")
        core.truncate(3 << 30)
    with open(dumps / "nccl_trace_rank_9", "wb") as huge:
        huge.write(b"\x80\x02")
        huge.truncate(2 << 30)
    result, peak = _load_in_subprocess(dumps, "--jobs", "1")
    assert peak < 300, peak
    assert b"more than the 1024 MiB a Flight Recorder dump can hold" in result.stderr


def test_a_full_disk_is_one_line_and_changes_nothing(tmp_path, capsys):
    kept = tmp_path / "db.pkl"
    kept.write_bytes(b"old")
    full = tmp_path / "full"
    os.symlink("/dev/full", full)  # a device that is always full; never name /dev/full itself in a test
    assert main(["-d", str(SKIP), "-o", str(kept), "--json", str(full)]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("full: cannot write the JSON report (No space left on device); no output file was written or changed")
    assert len(err.strip().splitlines()) == 1
    assert kept.read_bytes() == b"old" and full.is_symlink()


@pytest.mark.process
def test_a_full_standard_output_is_one_line_not_a_traceback():
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "frtrace", "-d", str(SKIP)], stdout=full,
                                stderr=subprocess.PIPE, timeout=60)
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert b"cannot write the report to standard output (No space left on device)" in result.stderr


def test_an_internal_error_exits_3_with_one_line_and_a_traceback_file(monkeypatch, capsys):
    def broken(*args, **kw):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(api, "analyze", broken)
    assert main(["-d", str(SKIP)]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error: ZeroDivisionError: a bug; please report this" in err
    trace_file = err.rsplit("with the traceback in ", 1)[1]
    assert "ZeroDivisionError" in Path(trace_file).read_text()
    os.unlink(trace_file)


def test_a_bug_while_reading_one_rank_is_an_internal_error_not_a_blamed_rank(monkeypatch, capsys):
    from frtrace import loader

    real = loader.compact

    def broken(raw, rank, path, file_format):
        if rank == 2:
            raise KeyError("oops")
        return real(raw, rank, path, file_format)

    monkeypatch.setattr(loader, "compact", broken)
    assert main(["-d", str(HEALTHY), "--jobs", "1"]) == 3
    err = capsys.readouterr().err
    assert "internal error: while reading" in err and "nccl_trace_rank_2: KeyError" in err
    os.unlink(err.strip().rsplit("with the traceback in ", 1)[1])


# ---------------------------------------------------------------------------- terminal injection
def test_control_sequences_in_a_dump_never_reach_the_terminal(tmp_path, capsys):
    evil = "all_reduce\x1b]0;pwned\x07\x1b[2J\rCLEAN: all good"
    raw = {r: make_dump(ops(3)) for r in range(3)}
    raw[1]["entries"][2]["profiling_name"] = f"gloo:{evil}"
    raw[1]["entries"][2]["frames"] = [{"name": "\x1b[31mred", "filename": "a\rb.py", "line": 3}]
    dumps = write_dumps(tmp_path / "d", raw)
    assert main(["-d", str(dumps), "--print-stack-trace", "-v"]) == 1
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        assert not any(c in stream for c in "\x1b\x07\r")
    assert captured.out.startswith("DESYNC") and "\\x1b]0;pwned\\x07" in captured.out


def test_a_file_name_with_a_newline_makes_a_one_line_message(tmp_path, capsys):
    dumps = write_dumps(tmp_path / "d", {0: make_dump(ops(2)), 1: make_dump(ops(2))})
    (dumps / "x\n\x1b[2J").mkdir()  # a host folder with a newline in its name
    (dumps / "x\n\x1b[2J" / "nccl_trace_rank_2").write_bytes(b"\x80\x02broken")
    main(["-d", str(dumps)])
    err = capsys.readouterr().err
    (line,) = [said for said in err.splitlines() if "skipped" in said]
    assert "x\\x0a\\x1b[2J/nccl_trace_rank_2" in line and "\x1b" not in err


# ---------------------------------------------------------------------------- signals and several outputs
def wait_until_staging(process: subprocess.Popen, folder: Path, timeout: float = 60) -> None:
    """Wait until `process` holds a file open in `folder` (an output being written, named or not:
    /proc/PID/fd shows an unnamed one as `folder/#inode (deleted)`), or has ended."""
    deadline = time.time() + timeout
    prefix = str(folder) + os.sep
    while process.poll() is None and time.time() < deadline:
        try:
            targets = [os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.pid}/fd")]
        except OSError:  # an fd closed while listed
            continue
        if any(target.startswith(prefix) for target in targets):
            return
        time.sleep(0.002)


@pytest.mark.process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_leave_no_temporary_file(tmp_path, signum):
    data = generated_job(tmp_path / "dumps", ranks=64)
    out = tmp_path / "out"
    out.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "frtrace", "-d", str(data), "-o", str(out / "db.pkl"),
                                "--sqlite", str(out / "x.db"), "--chrome-trace", str(out / "t.json")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_staging(process, out)  # stop it while it writes its outputs
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    if process.returncode in (0, 1):  # finished before the signal landed: every output whole
        assert sorted(os.listdir(out)) == ["db.pkl", "t.json", "x.db"]
        return
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip().splitlines()[-1].startswith(f"frtrace: interrupted by {signal.Signals(signum).name}")
    assert "Traceback" not in stderr
    assert os.listdir(out) == []


def test_an_interrupt_between_two_outputs_replaces_neither_and_says_so(tmp_path, monkeypatch, capsys):
    db, trace = tmp_path / "db.pkl", tmp_path / "t.json"
    db.write_bytes(b"old db")
    trace.write_text("old trace")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "write_chrome_trace", interrupted)
    assert main(["-d", str(SKIP), "-o", str(db), "--chrome-trace", str(trace)]) == 130
    assert db.read_bytes() == b"old db" and trace.read_text() == "old trace"
    assert capsys.readouterr().err.strip() == "frtrace: interrupted by SIGINT; no output file was written or changed"
    assert sorted(os.listdir(tmp_path)) == ["db.pkl", "t.json"]


@pytest.mark.parametrize("tmpfile", [True, False], ids=["O_TMPFILE", "unlinked temporary file"])
def test_outputs_are_staged_unnamed_and_named_after_their_targets_only_to_be_renamed(tmp_path, monkeypatch, tmpfile):
    """While outputs are written nothing of theirs has a name (an unnamed O_TMPFILE, or where the
    system has none a temporary file unlinked once open), so no stop, SIGKILL included, leaves
    anything behind; at the commit each is named `.db.pkl.<random>.tmp` beside `db.pkl` and renamed
    over it; a stream's is staged in the system's temporary folder, never the working directory
    (which may be the dump folder)."""
    from frtrace.outputs import commit as output

    if not tmpfile:
        monkeypatch.delattr(output.os, "O_TMPFILE")
    seen = {}
    real_replace, real_stage = os.replace, output.Outputs.stage

    def stage(self, flag, write):
        real_stage(self, flag, write)
        seen[flag] = (os.listdir(tmp_path), os.readlink(f"/proc/self/fd/{self.staged[-1][1]}"))

    monkeypatch.setattr(output.Outputs, "stage", stage)
    monkeypatch.setattr(output.os, "replace", lambda source, target: seen.setdefault("replace", (source, target)) and real_replace(source, target))
    monkeypatch.chdir(tmp_path)
    assert main(["-d", str(SKIP), "-o", str(tmp_path / "db.pkl"), "--json", "-"]) == 1
    assert seen["-o"][0] == [] and seen["--json"][0] == []  # staged, and nothing named in the folder
    assert seen["-o"][1].startswith(str(tmp_path) + "/") and seen["-o"][1].endswith(" (deleted)")
    assert seen["--json"][1].startswith(tempfile.gettempdir() + "/") and seen["--json"][1].endswith(" (deleted)")
    temp, target = seen["replace"]
    assert target == str(tmp_path / "db.pkl") and os.path.dirname(temp) == str(tmp_path)
    assert re.fullmatch(r"\.db\.pkl\.\w+\.tmp", os.path.basename(temp)), temp
    assert sorted(os.listdir(tmp_path)) == ["db.pkl"]


@pytest.mark.parametrize("failing", [2, 3])
def test_an_interrupt_while_committing_names_what_was_replaced(tmp_path, monkeypatch, capsys, failing):
    from frtrace.outputs import commit as output

    real_replace = os.replace
    calls = []

    def replace_then_stop(source, target):
        calls.append(target)
        if len(calls) == failing:
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(output.os, "replace", replace_then_stop)
    assert main(["-d", str(SKIP), "-o", str(tmp_path / "db.pkl"), "--chrome-trace", str(tmp_path / "t.json"),
                 "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    flags = [f"-o {tmp_path}/db.pkl", f"--chrome-trace {tmp_path}/t.json", f"--json {tmp_path}/r.json"]
    written, pending = flags[:failing - 1], flags[failing - 1:]
    assert err.endswith(f"; written: {', '.join(written)}; not written: {', '.join(pending)}"), err
    assert sorted(os.listdir(tmp_path)) == sorted(["db.pkl", "t.json"][:failing - 1])


def test_a_closed_pipe_keeps_the_verdicts_status(monkeypatch):
    class ClosedPipe:  # as a pipe whose reader left: writes are buffered, flushing them fails
        pending = ""

        def write(self, text):
            self.pending += text
            if len(self.pending) > 100:
                self.flush()

        def flush(self):
            if self.pending:
                raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            raise ValueError("no descriptor")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["-d", str(SKIP)]) == 1
    assert main(["-d", str(HEALTHY)]) == 0


@pytest.mark.process
def test_head_of_the_report_exits_with_the_verdict():
    result = subprocess.run(f"{sys.executable} -m frtrace -d {SKIP} --print-stack-trace -v --stats | head -c 1; "
                            "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True, timeout=60)
    assert result.returncode == 1 and b"Traceback" not in result.stderr


@pytest.mark.process
@pytest.mark.parametrize("stream", ["--json", "--markdown"])
def test_a_reader_that_goes_away_from_json_or_markdown_on_stdout_keeps_the_status_and_the_files(stream, tmp_path):
    # a reader that left before anything was written (`true` reads nothing): EPIPE on the first write
    result = subprocess.run(f"{sys.executable} -m frtrace -d {SKIP} {stream} - -o {tmp_path}/db.pkl | true; "
                            "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", capture_output=True, timeout=60)
    assert result.returncode == 1, result.stderr  # the verdict's (was 2: "cannot write the JSON report")
    assert b"Traceback" not in result.stderr and b"cannot write" not in result.stderr
    assert (tmp_path / "db.pkl").stat().st_size > 1000  # was: left unwritten
    assert b"wrote " in result.stderr


# ---------------------------------------------------------------------------- options that would be ignored
@pytest.mark.parametrize("argv,message", [
    (["-j", "-o", "x.db"], "-j prints the entries and runs no analysis, so -o would write nothing"),
    (["-j", "--json", "-"], "so --json would write nothing"),
    (["-j", "--sqlite", "x", "--chrome-trace", "y", "--stats"], "so --sqlite, --chrome-trace, --stats would"),
    (["-j", "--print-stack-trace"], "so --print-stack-trace would write nothing"),
    (["--json", "-", "--stats"], "--json - puts only JSON on standard output"),
    (["--mismatch-cap", "-1"], "--mismatch-cap must be 0 (all findings) or more"),
    (["-j", "--selected-ranks", "9"], "--selected-ranks 9: no such rank among the dumps (ranks 0-3)"),
    (["-j", "--pg-filters", "nope"], "--pg-filters nope: no group has that name or desc"),
], ids=["j-o", "j-json", "j-others", "j-stacks", "json-stats", "cap", "ranks", "pgs"])
def test_options_that_would_be_silently_ignored_are_usage_errors(argv, message, capsys):
    assert main(["-d", str(SKIP), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_jobs_default_to_the_cpus_this_process_may_use():
    assert cli.parse_options(["-d", "x"]).jobs == len(os.sched_getaffinity(0))


def test_workers_are_started_by_fork_asked_for_by_name(monkeypatch):
    from frtrace.reading import workers

    monkeypatch.setattr("multiprocessing.get_start_method", lambda *a, **k: "forkserver")  # as on 3.14
    assert workers.process_context().get_start_method() == "fork"


# ---------------------------------------------------------------------------- confined reading (frtrace mcp)
def test_confined_reading_opens_no_link_and_checks_the_file_opened_not_its_path(tmp_path, monkeypatch):
    import errno

    from frtrace.errors import DumpError
    from frtrace.mcp_server import Roots
    from frtrace.reading import limits
    from frtrace.reading.safe_read import read_raw

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "set").mkdir(parents=True)
    outside.mkdir()
    dump = pickle.dumps(make_dump(ops(2)), protocol=2)
    (root / "set" / "nccl_trace_rank_0").write_bytes(dump)
    (outside / "nccl_trace_rank_1").write_bytes(dump)
    (root / "set" / "nccl_trace_rank_1").symlink_to(outside / "nccl_trace_rank_1")
    (root / "hosts").symlink_to(outside, target_is_directory=True)  # a folder above the file is the link
    monkeypatch.setattr(limits, "_confined", ())
    limits.confine((str(root),))
    assert read_raw(str(root / "set" / "nccl_trace_rank_0"))[1] == "pickle"
    with pytest.raises(DumpError, match="a link, which frtrace does not follow here"):
        read_raw(str(root / "set" / "nccl_trace_rank_1"))
    with pytest.raises(OSError) as raised:
        limits.open_file(str(root / "hosts" / "nccl_trace_rank_1"))
    assert raised.value.errno == errno.EACCES and "outside the folders this server may read" in str(raised.value)
    # the path checked, then swapped for a link before it is read: the file opened is refused
    checked = Roots([str(root)]).check(str(root / "set" / "nccl_trace_rank_0"), "path")
    (root / "set" / "nccl_trace_rank_0").unlink()
    (root / "set" / "nccl_trace_rank_0").symlink_to(outside / "nccl_trace_rank_1")
    with pytest.raises(DumpError, match="a link"):
        read_raw(checked)
    os.close(limits.open_file(str(outside / "nccl_trace_rank_1"), own=True))  # a copy frtrace made itself


# ---------------------------------------------------------------------------- limits of the machine
def _limited_run(folder, limit: tuple[int, int], *args: str) -> subprocess.CompletedProcess:
    import resource

    def lower() -> None:
        resource.setrlimit(limit[0], (limit[1], resource.getrlimit(limit[0])[1]))
    return subprocess.run([sys.executable, "-m", "frtrace", "-d", str(folder), *args], capture_output=True, text=True,
                          preexec_fn=lower, timeout=300)


@pytest.mark.process
def test_a_low_address_space_limit_is_said_as_the_machines_never_as_a_damaged_dump(tmp_path):
    import resource

    big = make_dump(ops(40_000))  # a real-sized dump to parse: 40,000 entries with their frames (~40 MB)
    for raw in big["entries"]:
        raw["frames"] = [{"name": f"f{i}_{raw['collective_seq_id']}", "filename": f"/job/module_{i}.py", "line": i}
                         for i in range(12)]
    folder = write_dumps(tmp_path / "d", {0: make_dump(ops(10)), 1: make_dump(ops(10)), 2: make_dump(ops(9)), 3: big})
    said = []
    for megabytes in (200, 260, 330):  # where each limit bites depends on the Python: none may blame the file
        done = _limited_run(folder, (resource.RLIMIT_AS, megabytes << 20), "--jobs", "1")
        assert "damaged or hostile, leave it out" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        if done.returncode == 2:
            assert f"address-space limit of {megabytes} MiB (ulimit -v)" in done.stderr and "raise the limit" in done.stderr
            said.append(megabytes)
        else:
            assert "rank 3 left no readable dump" not in done.stdout, done.stdout
    assert said, "no limit was low enough to bite"


@pytest.mark.process
def test_too_few_file_descriptors_for_the_jobs_asked_read_with_fewer_workers(tmp_path):
    import resource

    done = _limited_run(FIXTURES / "skip_goes_on_rank5_of_8", (resource.RLIMIT_NOFILE, 64), "--jobs", "40")
    assert done.returncode == 1, done.stderr  # was exit 3, an internal error (EMFILE)
    assert done.stdout.startswith("DESYNC: rank 5 never joined")


def test_an_archive_with_no_writable_temporary_folder_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    import tarfile
    import tempfile

    with tarfile.open(tmp_path / "set.tar.gz", "w:gz") as archive:
        archive.add(FIXTURES / "skip_rank2", arcname="skip_rank2")

    def nowhere(*args, **kwargs):  # what tempfile raises where /tmp, /var/tmp and the cwd are all read-only
        raise FileNotFoundError(2, "No usable temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp']")
    monkeypatch.setattr(tempfile, "mkdtemp", nowhere)
    assert main(["-d", str(tmp_path / "set.tar.gz")]) == 2  # was 3, an internal error
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot unpack the archive: no writable temporary folder" in line and "TMPDIR" in line


def _out_of_memory(job):
    raise MemoryError


@pytest.mark.process
def test_a_worker_out_of_memory_is_said_as_the_machines_limit_from_its_exit_status():
    """Where reading a file runs out of memory, the worker ends at once with its own status (building
    a message needs the memory there is none of: glibc spun in mmap for minutes, and the run hung),
    and the main process says it is the machine's limit, with or without a ulimit, never the file's."""
    from frtrace.errors import LimitError
    from frtrace.reading.workers import in_workers

    (result,) = list(in_workers(_out_of_memory, [("/job/nccl_trace_rank_3", 3)], 1))
    assert isinstance(result, LimitError), result
    assert str(result).startswith("/job/nccl_trace_rank_3: reading it ran out of memory under ")
    assert "not the file's fault" in str(result) and "damaged" not in str(result)
