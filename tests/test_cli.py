"""The command line through main([...]): exit codes, messages, outputs."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
from pathlib import Path

from conftest import FIXTURES, generated_job, entry, make_dump, ops, scenario_dirs, write_dumps
from frtrace import api, cli
from frtrace.cli import build_parser
from frtrace.cli import main

HEALTHY = str(FIXTURES / "healthy")
SKIP = str(FIXTURES / "skip_rank2")
JSON_KEYS = {"schema_version", "frtrace_version", "verdict", "culprit_ranks", "culprit_files", "headline", "cause", "causes", "evidence",
             "ranks_loaded", "ranks_missing", "findings", "skipped_files", "ignored_files", "health", "ranks", "culprit_stacks",
             "notes", "stale_ranks", "no_evidence_ranks"}
FINDING_KEYS = {"kind", "pg_name", "pg_desc", "collective_seq_id", "p2p_seq_id", "op", "ranks", "expected_ranks", "detail", "root_cause"}


def test_clean_run_exits_0_and_says_so_first(capsys):
    assert main(["-d", HEALTHY]) == 0
    assert capsys.readouterr().out.startswith("CLEAN: 4 ranks, 5 groups")


def test_directory_may_be_given_positionally(capsys):
    assert main([SKIP]) == 1
    assert capsys.readouterr().out.startswith("DESYNC: rank 2 never joined all_reduce #10 of default_pg")


def test_report_shows_findings_stack_and_summary(capsys):
    main(["-d", SKIP])
    out = capsys.readouterr().out
    assert "Findings (* = root cause)" in out
    assert "Stack of rank 2's all_reduce #9" in out and "fixtures/generate_gloo.py" in out
    assert "ranks loaded   4 (0-3)" in out


def test_json_report_schema_is_exact(tmp_path):
    target = tmp_path / "r.json"
    main(["-d", SKIP, "--json", str(target)])
    report = json.loads(target.read_text())
    assert set(report) == JSON_KEYS
    assert report["verdict"] == "desync" and report["culprit_ranks"] == [2]
    assert report["cause"] == "compute_or_data_stall" and set(report["causes"]["2"]) == {"cause", "said"}
    assert all(set(f) == FINDING_KEYS for f in report["findings"])


def test_json_to_stdout_prints_only_json(capsys):
    main(["-d", SKIP, "--json", "-"])
    assert json.loads(capsys.readouterr().out)["culprit_ranks"] == [2]


def test_just_print_entries_puts_ranks_side_by_side(capsys):
    assert main(["-d", SKIP, "-j", "--selected-ranks", "1", "2", "--pg-filters", "default_pg"]) == 0
    out = capsys.readouterr().out
    assert "rank 1" in out and "rank 2" in out and "rank 0" not in out
    assert "tp (pg" not in out
    row_10 = next(line for line in out.splitlines() if line.split()[:1] == ["10"])
    assert row_10.count("all_reduce") == 1  # rank 1 issued #10, rank 2 did not


@pytest.mark.parametrize("argv,message", [
    ([], "no dump directory given"),
    (["--selected-ranks", "1", "-d", HEALTHY], "add -j"),
    (["--selected-ranks", "x", "-d", HEALTHY], "invalid int value: 'x'; see frtrace --help"),
    (["--transform-ft", HEALTHY], "--group-world-size"),
    (["-d", "/nonexistent/dumps"], "/nonexistent/dumps: cannot read the dump directory"),
    (["-d", HEALTHY, "-o", "-"], "binary pickle"),
    (["-d", str(FIXTURES / "generate_gloo.py")], "not a directory"),
])
def test_usage_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_output_that_is_a_directory_fails_before_analysis(tmp_path, capsys):
    assert main(["-d", HEALTHY, "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_output_in_a_missing_folder_fails_with_the_path(tmp_path, capsys):
    assert main(["-d", HEALTHY, "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_outputs_replace_old_files_whole(tmp_path):
    db_path = tmp_path / "db.pkl"
    db_path.write_bytes(b"old")
    main(["-d", SKIP, "-o", str(db_path)])
    with open(db_path, "rb") as handle:
        _, db = pickle.load(handle)
    assert db.findings and sorted(os.listdir(tmp_path)) == ["db.pkl"]


def test_a_failure_while_writing_leaves_the_old_file(tmp_path, monkeypatch, capsys):
    db_path = tmp_path / "db.pkl"
    db_path.write_bytes(b"old")

    def broken(db, handle):
        handle.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(api, "write_database", broken)
    assert main(["-d", SKIP, "-o", str(db_path)]) == 2
    assert db_path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["db.pkl"]
    assert "No space left on device" in capsys.readouterr().err


def test_sqlite_is_written_beside_its_target_and_never_in_place(tmp_path, monkeypatch, capsys):
    target = tmp_path / "hang.db"
    target.write_bytes(b"old")
    from frtrace.outputs import sqlite as sqlite_out
    real = sqlite_out.write_sqlite
    seen = []

    def watched(db, dumps, table, path, opened):
        real(db, dumps, table, path, opened)
        seen.append((path, target.read_bytes(), os.path.exists(path)))

    monkeypatch.setattr(sqlite_out, "write_sqlite", watched)  # imported by the run when --sqlite asks for it
    assert main(["-d", SKIP, "--sqlite", str(target)]) == 1
    ((written_to, target_then, named),) = seen
    assert Path(written_to).parent == tmp_path and Path(written_to) != target and target_then == b"old"
    assert not named  # its name was taken away once SQLite had it open
    assert target.read_bytes().startswith(b"SQLite format 3") and sorted(os.listdir(tmp_path)) == ["hang.db"]


@pytest.mark.parametrize("failure", ["raised after writing", "disk full"])
def test_a_failure_while_writing_sqlite_leaves_the_old_file(tmp_path, monkeypatch, capsys, failure):
    from frtrace.outputs import sqlite as sqlite_out
    target = tmp_path / "hang.db"
    target.write_bytes(b"old")
    real = sqlite_out.write_sqlite

    def broken(db, dumps, table, path, opened):
        real(db, dumps, table, path, opened)  # a whole database, then the failure: it must not be renamed into place
        raise OSError(28, "No space left on device")

    if failure == "disk full":  # SQLite's own error, from a database that cannot grow past 2 pages
        monkeypatch.setattr(sqlite_out, "SCHEMA", "PRAGMA max_page_count = 2;\n" + sqlite_out.SCHEMA)
    else:
        monkeypatch.setattr(sqlite_out, "write_sqlite", broken)
    assert main(["-d", SKIP, "--sqlite", str(target), "-o", str(tmp_path / "db.pkl")]) == 2
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["hang.db"]  # and no db.pkl either
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert said.startswith(f"frtrace: {target}: cannot write the SQLite database (")
    assert ("full" if failure == "disk full" else "No space left on device") in said
    assert "no output file was written or changed" in said


def test_ctrl_c_exits_130_and_writes_nothing(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "analyze", interrupted)
    assert main(["-d", SKIP, "-o", str(tmp_path / "db.pkl")]) == 130
    assert os.listdir(tmp_path) == [] and "interrupted" in capsys.readouterr().err


def test_bad_files_are_named_on_stderr_and_the_rest_is_analysed(tmp_path, capsys):
    write_dumps(tmp_path, {r: make_dump(ops(3)) for r in (0, 1, 3)})
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"\x80\x02}q\x00")
    code = main(["-d", str(tmp_path), "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert "nccl_trace_rank_2: truncated pickle" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ranks_loaded"] == [0, 1, 3] and report["ranks_missing"] == [2]
    assert report["skipped_files"][0]["path"].endswith("nccl_trace_rank_2")
    # gloo-like dumps record no completion: all three in their last op may be waiting for rank 2
    assert code == 1 and report["culprit_ranks"] == [2]
    assert "rank 2 left no readable dump" in report["headline"]


def test_strict_turns_a_skipped_file_into_exit_2(tmp_path, capsys):
    write_dumps(tmp_path, {r: make_dump(ops(3, backend="nccl", state="completed")) for r in (0, 1)})
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"")
    assert main(["-d", str(tmp_path)]) == 0
    assert main(["-d", str(tmp_path), "--strict"]) == 2
    assert "--strict" in capsys.readouterr().err


def test_nothing_readable_exits_2(tmp_path, capsys):
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"\x80\x02junk")
    assert main(["-d", str(tmp_path)]) == 2
    assert "none of the 1 dump file(s) could be read" in capsys.readouterr().err


def test_files_that_only_look_like_dumps_by_name_are_no_dumps(tmp_path, capsys):
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"junk")
    assert main(["-d", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no dump files" in err and "nccl_trace_rank_0: its first bytes are not those of a pickle or JSON dump" in err


def test_fixture_folders_run_strict_without_noise(capsys):
    assert main(["-d", HEALTHY, "--strict"]) == 0
    assert capsys.readouterr().err == ""


def test_no_dump_names_exits_2(tmp_path, capsys):
    (tmp_path / "README").write_text("x")
    assert main(["-d", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no dump files" in err and "TORCH_FR_DUMP_DYNAMIC_FILE_NAME" in err


def test_torchfrtrace_spellings_are_accepted(capsys):
    assert main([SKIP, "--allow-incomplete-ranks", "--mismatch_cap", "1", "--print_stack_trace", "-v"]) == 1
    assert "more finding" not in capsys.readouterr().out


def test_transform_ft_shifts_replica_ranks(tmp_path):
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    dumps = {r: make_dump(ops(2, backend="nccl", state="completed") + ([] if r == 3 else [entry(seq=3, backend="nccl")]),
                          pg_config=config) for r in range(4)}
    write_dumps(tmp_path, dumps)
    out = tmp_path / "r.json"
    main(["-d", str(tmp_path), "--transform-ft", "--group-world-size", "2", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["culprit_ranks"] == [3]
    (root,) = [f for f in report["findings"] if f["root_cause"]]
    assert root["expected_ranks"] == [2, 3]
    # replica 0's ranks 0 and 1 form their own default group
    assert {tuple(f["expected_ranks"]) for f in report["findings"]} == {(0, 1), (2, 3)}


def test_torchft_replica_groups_are_recognised_without_the_option(tmp_path, capsys):
    """Every rank's default group lists replica-local ranks [0, 1] and ranks 2-3 fill a second
    replica: read as torchft (before: ranks 2-3 dropped as outside the world, CLEAN)."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    dumps = {r: make_dump(ops(2, backend="nccl", state="completed") + ([] if r == 3 else [entry(seq=3, backend="nccl")]),
                          pg_config=config) for r in range(4)}
    write_dumps(tmp_path, dumps)
    out = tmp_path / "r.json"
    main(["-d", str(tmp_path), "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["culprit_ranks"] == [3] and report["ranks_loaded"] == [0, 1, 2, 3]
    assert "torchft replica groups: every rank's default group lists the replica-local ranks 0-1" in capsys.readouterr().out


def test_a_stray_higher_rank_is_not_a_torchft_replica():
    from frtrace.reading.groups import replica_size
    from frtrace.loader import normalize

    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
    def dump(rank):
        return normalize(make_dump(ops(2), pg_config=config), rank, f"nccl_trace_rank_{rank}", "pickle")
    assert replica_size({r: dump(r) for r in (0, 1, 2, 3, 100)}) is None  # one rank of replica 25: a stray file
    assert replica_size({r: dump(r) for r in range(8)}) == 4
    assert replica_size({r: dump(r) for r in range(4)}) is None  # one job of 4


def test_every_option_has_help_text():
    parser = cli.build_parser()
    assert all(action.help for action in parser._actions)


@pytest.mark.process
def test_module_entry_point_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "frtrace", "-d", SKIP], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout.startswith("DESYNC")


def _interrupted_while_loading(data: Path, out: Path):
    """frtrace on `data`, SIGINT once its workers run; None when it finished before they were seen
    (a fixed sleep could land in the imports of a slow machine, or after the loading of a fast one)."""
    import signal
    import time

    process = subprocess.Popen([sys.executable, "-m", "frtrace", "-d", str(data), "-o", str(out / "db.pkl"),
                                "--json", str(out / "r.json"), "--jobs", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        while time.monotonic() < deadline and process.poll() is None and len(children.read_text().split()) < 2:
            time.sleep(0.01)
        if process.poll() is not None:
            process.communicate()
            return None
        os.killpg(process.pid, signal.SIGINT)  # as a terminal does: the whole process group
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # hung: do not leave it behind
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, stdout, stderr


@pytest.mark.process
def test_real_ctrl_c_during_parallel_loading_leaves_no_file(tmp_path, ctrl_c_as_in_a_terminal):
    for ranks in (128, 512):  # a busy machine may not run this test's loop while 128 ranks load
        out = tmp_path / f"out{ranks}"
        out.mkdir()
        result = _interrupted_while_loading(generated_job(tmp_path / f"dumps{ranks}", ranks=ranks), out)
        if result is not None:
            break
        for written in out.iterdir():  # it finished: its outputs are not what this test is about
            written.unlink()
    else:
        pytest.skip("frtrace finished before its workers were seen, at 128 and 512 ranks: the machine is too busy "
                    "to time a Ctrl-C")
    returncode, stdout, stderr = result
    assert returncode == 130, (stdout, stderr)
    assert stderr.strip().splitlines()[-1] == "frtrace: interrupted by SIGINT; no output file was written or changed"
    assert "Traceback" not in stderr
    assert os.listdir(out) == []


def test_progress_bar_counts_files_on_stderr(tmp_path, capsys):
    from frtrace.reading.discover import find_dump_files
    from frtrace.loader import load_dumps

    write_dumps(tmp_path, {r: make_dump(ops(2)) for r in range(6)})
    result = load_dumps(find_dump_files(str(tmp_path)), progress=True, workers=2)
    assert len(result.dumps) == 6
    err = capsys.readouterr().err
    assert "loading dumps" in err and "/6 [" in err  # counts files
    assert err.rstrip("\r").endswith(" ")  # and clears its line when done, leaving the report clean


def _two_stuck_and_seven_notes(tmp_path):
    """Two ops stuck below PyTorch (two findings), and seven p2p ops naming no member (seven notes)."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
              "1": {"name": "1", "desc": "a", "ranks": "[0, 1]"}, "2": {"name": "2", "desc": "b", "ranks": "[2, 3]"}}
    odd = [entry(op=f"send 0->{9 + i}", seq=0, p2p_seq=i + 1, is_p2p=True, backend="nccl", state="completed") for i in range(7)]
    def rank(r):
        pg, desc = ("1", "a") if r < 2 else ("2", "b")
        return ops(1, backend="nccl", state="completed") + (odd if r == 0 else []) + [entry(seq=1, pg=pg, desc=desc, backend="nccl")]
    return write_dumps(tmp_path, {r: make_dump(rank(r), pg_config=config) for r in range(4)})


@pytest.mark.parametrize("cap, rows, more", [("1", ["a (pg 1)"], "... 1 more finding(s); raise --mismatch-cap to see them"),
                                             ("0", ["a (pg 1)", "b (pg 2)"], None)])
def test_mismatch_cap_limits_the_findings_listed_and_says_how_many_are_left_out(tmp_path, capsys, cap, rows, more):
    assert main(["-d", str(_two_stuck_and_seven_notes(tmp_path)), "--mismatch-cap", cap]) == 1
    out = capsys.readouterr().out
    listed = [group for group in ("a (pg 1)", "b (pg 2)") if f"not_completed  {group}" in out]
    assert listed == rows, out
    assert (more in out) if more else ("more finding" not in out)


@pytest.mark.parametrize("flags, shown", [([], 5), (["-v"], 7)])
def test_verbose_prints_every_note_instead_of_the_first_five(tmp_path, capsys, flags, shown):
    main(["-d", str(_two_stuck_and_seven_notes(tmp_path))] + flags)
    out = capsys.readouterr().out
    assert sum(f"p2p op 'send 0->{9 + i}'" in out for i in range(7)) == shown
    assert ("... 2 more; -v shows them all" in out) == (shown == 5)


def test_every_file_written_is_confirmed_on_stderr_in_one_line_and_a_stream_is_not(tmp_path, capsys):
    outputs = {"-o": "db.pkl", "--html": "r.html", "--sqlite": "r.db", "--chrome-trace": "t.json"}
    argv = ["-d", SKIP, "--json", "-"] + [part for flag, name in outputs.items() for part in (flag, str(tmp_path / name))]
    assert main(argv) == 1
    said = capsys.readouterr()
    lines = [line for line in said.err.splitlines() if line.startswith("frtrace: wrote ")]
    assert len(lines) == len(outputs) == len(said.err.splitlines()), said.err
    for name in outputs.values():
        size = (tmp_path / name).stat().st_size
        shown = f"{size / 1000:.1f} kB" if size >= 1000 else f"{size} bytes"
        assert sum(line.startswith(f"frtrace: wrote {tmp_path / name} ({shown}, the ") for line in lines) == 1, lines
    assert json.loads(said.out)["verdict"] == "desync"  # --json - went to stdout, unconfirmed


def _outputs_loaded(folder: Path, out: Path, capsys, monkeypatch, extra: list[str]) -> tuple[dict[str, bytes], list]:
    """Every file and stream of one run on `folder` that asks for `extra`, and whether each load
    kept the entries' times (the `times` it was asked for, and what its dumps hold)."""
    loads = []
    load_dumps = api.load_dumps

    def spied(*args, **kw):
        loaded = load_dumps(*args, **kw)
        loads.append((kw.get("times", True), {d.entries.has_times for d in loaded.dumps.values()}))
        return loaded

    monkeypatch.setattr(api, "load_dumps", spied)
    out.mkdir()
    code = main(["-d", str(folder), "-o", str(out / "db.pkl"), "--json", str(out / "r.json"), "--markdown",
                 str(out / "summary.md"), "-v", "--print-stack-trace", "--jobs", "1", *extra])
    said = capsys.readouterr()
    files = {p.name: p.read_bytes().replace(str(out).encode(), b"OUT") for p in out.iterdir()}  # the summary names them
    return {**files, "stdout": said.out.encode(), "stderr": said.err.replace(str(out), "OUT").encode(),
            "exit": bytes([code])}, loads


@pytest.mark.parametrize("folder", scenario_dirs(), ids=[p.name for p in scenario_dirs()])
def test_outputs_that_never_read_times_are_the_same_when_the_times_are_not_loaded(folder, tmp_path, capsys, monkeypatch):
    # folders named alike in length: the files name their paths, and stderr says their sizes
    without, loads = _outputs_loaded(folder, tmp_path / "a", capsys, monkeypatch, [])
    assert loads and all(loads_times is False and kept == {False} for loads_times, kept in loads), loads
    monkeypatch.setattr(cli, "_reads_times", lambda options: True)
    with_times, loads = _outputs_loaded(folder, tmp_path / "b", capsys, monkeypatch, [])
    assert loads and all(loads_times is True and kept == {True} for loads_times, kept in loads), loads
    assert without.keys() == with_times.keys() and len(without) == 6
    for name in without:
        assert without[name] == with_times[name], name


@pytest.mark.parametrize("flag", ["--html", "--sqlite", "--chrome-trace", "--stats"])
def test_an_output_that_reads_times_has_them_loaded(flag, tmp_path, capsys, monkeypatch):
    extra = [flag] if flag == "--stats" else [flag, str(tmp_path / "extra")]
    _, loads = _outputs_loaded(FIXTURES / "skip_goes_on", tmp_path / "out", capsys, monkeypatch, extra)
    assert loads == [(True, {True})]


def test_entries_printed_side_by_side_read_no_times(tmp_path, capsys, monkeypatch):
    assert main(["-d", SKIP, "-j"]) == 0
    with_times = capsys.readouterr().out
    monkeypatch.setattr(cli, "_reads_times", lambda options: True)
    assert main(["-d", SKIP, "-j"]) == 0
    assert capsys.readouterr().out == with_times and "all_reduce" in with_times


def test_help_names_every_command():
    text = build_parser().format_help()
    for command in ("frtrace compare", "frtrace live", "frtrace replay", "frtrace mcp", "frtrace schema"):
        assert command in " ".join(text.split()), command


@pytest.mark.parametrize("argv, said", [
    (["-d", HEALTHY, "--jsn", "-"], "unrecognized arguments: --jsn (did you mean --json?); see frtrace --help"),
    (["-d", HEALTHY, "--chrome-trase=t.json"], "(did you mean --chrome-trace?)"),
    (["schema", "bogus"], "frtrace schema bogus: no such schema; give report or compare"),
])
def test_mistakes_get_one_line_that_says_what_was_meant(argv, said, capsys):
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert said in line, line


def test_a_finding_that_lists_some_of_the_ranks_says_there_are_more():
    from test_matcher import run

    # 7 of 12 ranks issued #3 and wait in it; 5 never did: their last ops are listed, four and a count
    result = run({r: make_dump(ops(3 if r < 7 else 2)) for r in range(12)})
    (finding,) = [f for f in result.findings if f.kind == "missing_ranks"]
    assert finding.ranks == (7, 8, 9, 10, 11)
    assert "rank 10's last op in default_pg is #2; ... (1 more)" in finding.detail
