"""`frtrace compare A B`: two dump sets of one job, the earlier first."""

from __future__ import annotations

import json

import pytest
import shutil
from pathlib import Path

from conftest import entry, make_dump, write_dumps
from frtrace.cli import main

PAIRS = Path(__file__).resolve().parent.parent / "fixtures" / "pairs"


def compare(tmp_path: Path, a: Path, b: Path, *extra: str) -> tuple[int, dict]:
    path = tmp_path / "cmp.json"
    code = main(["compare", str(a), str(b), "--json", str(path), *extra])
    return code, json.loads(path.read_text())


def test_a_real_hang_dumped_twice_is_stuck_with_the_hung_rank_frozen_and_the_others_waiting(tmp_path, capsys):
    code, report = compare(tmp_path, PAIRS / "twice_hang_rank2" / "a", PAIRS / "twice_hang_rank2" / "b")
    assert code == 1 and report["verdict"] == "stuck"
    assert report["moving"] == [] and report["frozen"] == [0, 1, 2, 3]
    assert report["culprits"] == [2]
    assert report["waiting"] == [{"op": "all_reduce #10 of default_pg", "ranks": [0, 1, 3]}]
    main(["compare", str(PAIRS / "twice_hang_rank2" / "a"), str(PAIRS / "twice_hang_rank2" / "b")])
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("STUCK: no rank moved between A and B, so the hang predates A: rank 2 is frozen (B's culprit); "
                     "ranks 0-1,3 wait in all_reduce #10 of default_pg; every rank's dump is the same in A and B, record "
                     "for record: if B is not a copy of A (its archive, say), the job made no progress at all between the "
                     "two dumps")  # gloo records no times that move: a real hang dumped twice is byte for byte the same


def test_a_real_healthy_job_dumped_twice_is_progressing(tmp_path):
    code, report = compare(tmp_path, PAIRS / "twice_healthy" / "a", PAIRS / "twice_healthy" / "b")
    assert code == 0 and report["verdict"] == "progressing" and report["moving"] == [0, 1, 2, 3]
    for rank in report["ranks"]:
        assert rank["records"][1] > rank["records"][0]
        assert any(g["issued"][1] > g["issued"][0] for g in rank["groups"])


def test_one_rank_that_stopped_while_the_others_went_on_is_partly_stuck(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(PAIRS / "twice_healthy" / "a", a)
    shutil.copytree(PAIRS / "twice_healthy" / "b", b)
    shutil.copy(a / "nccl_trace_rank_3", b / "nccl_trace_rank_3")  # rank 3 made no record in between
    code, report = compare(tmp_path, a, b)
    assert code == 1 and report["verdict"] == "partly_stuck"
    assert report["frozen"] == [3] and report["moving"] == [0, 1, 2]


def test_sets_passed_in_the_wrong_order_are_a_usage_error(tmp_path, capsys):
    assert main(["compare", str(PAIRS / "twice_healthy" / "b"), str(PAIRS / "twice_healthy" / "a")]) == 2
    assert "pass the earlier set first" in capsys.readouterr().err


def test_sets_with_other_ranks_are_compared_on_what_they_share(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(PAIRS / "twice_healthy" / "b", b)
    (b / "nccl_trace_rank_3").unlink()
    code, report = compare(tmp_path, PAIRS / "twice_healthy" / "a", b)
    assert report["only_in_a"] == [3] and [r["rank"] for r in report["ranks"]] == [0, 1, 2]
    assert any("rank(s) 3 only in A" in n for n in report["notes"])


def test_sets_that_share_no_rank_are_refused(tmp_path, capsys):
    write_dumps(tmp_path / "x", {7: make_dump([entry(seq=1)])})
    assert main(["compare", str(PAIRS / "twice_healthy" / "a"), str(tmp_path / "x")]) == 2
    assert "share no rank" in capsys.readouterr().err


def _timed(duration_ms: float, later: int = 0) -> dict:
    """4 all_reduces and a broadcast, then `later` all_reduces more (the same job, dumped later)."""
    def op(seq: int, name: str = "all_reduce", took: float = duration_ms) -> dict:
        return entry(seq=seq, backend="nccl", state="completed", op=name, duration_ms=took)
    return {r: make_dump([*(op(s) for s in range(1, 5)), op(5, "broadcast", 1.0), *(op(s) for s in range(6, 6 + later))])
            for r in range(2)}


def test_timing_lists_the_ops_that_got_slower_first(tmp_path, capsys):
    write_dumps(tmp_path / "a", _timed(2.0))
    write_dumps(tmp_path / "b", _timed(6.0, later=2))
    code, report = compare(tmp_path, tmp_path / "a", tmp_path / "b", "--timing")
    first = report["timing"][0]
    assert first["op"] == "all_reduce" and first["count"] == [8, 12] and first["change"] == 3.0
    assert first["mean_ms"] == [2.0, 6.0] and first["p99_ms"] == [2.0, 6.0]
    assert report["timing"][1]["op"] == "broadcast" and report["timing"][1]["change"] == 1.0
    capsys.readouterr()
    main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--timing", "--head", "1"])
    out = capsys.readouterr().out
    assert "3.00x" in out and "1.00x" not in out and "1 more; raise --head" in out


def test_the_json_output_is_never_one_of_the_dumps(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(PAIRS / "twice_healthy" / "b", b)
    before = (b / "nccl_trace_rank_0").read_bytes()
    assert main(["compare", str(PAIRS / "twice_healthy" / "a"), str(b), "--json", str(b / "nccl_trace_rank_0")]) == 2
    assert (b / "nccl_trace_rank_0").read_bytes() == before


# ---------------------------------------------------------------------------- one job, or not (issue 28)
FIXTURES = PAIRS.parent


def _refused(a: Path, b: Path, capsys) -> str:
    assert main(["compare", str(a), str(b)]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    return said


def test_two_unrelated_jobs_are_refused_naming_what_differs(tmp_path, capsys):
    said = _refused(FIXTURES / "skip_goes_on", PAIRS / "twice_healthy" / "a", capsys)  # was PROGRESSING, exit 0
    assert "are not one job dumped twice: " in said and "compare two dump sets of one job" in said
    said = _refused(PAIRS / "twice_healthy" / "a", FIXTURES / "skip_goes_on_rank5_of_8", capsys)  # 4 ranks, then 8
    assert "are not one job dumped twice: " in said and "pass the earlier set first" not in said


@pytest.mark.parametrize("spelling", ["same", "link"])
def test_a_set_compared_with_itself_is_refused(tmp_path, capsys, spelling):
    a = PAIRS / "twice_healthy" / "a"
    b = a
    if spelling == "link":
        b = tmp_path / "alias"
        b.symlink_to(a)
    said = _refused(a, b, capsys)  # was STUCK, exit 1
    assert "are the same dump set (the same files)" in said


def test_a_set_and_its_own_archive_say_they_may_be_one_dump(tmp_path, capsys):
    import tarfile
    a = PAIRS / "twice_healthy" / "a"
    with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as archive:
        archive.add(a, arcname="a")
    code, report = compare(tmp_path, a, tmp_path / "a.tar.gz")
    assert code == 1 and report["verdict"] == "stuck"
    assert report["headline"].endswith("if B is not a copy of A (its archive, say), the job made no progress at all "
                                       "between the two dumps")


def test_a_rank_whose_records_go_back_is_a_different_job(tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(PAIRS / "twice_healthy" / "b", b)
    shutil.copy(PAIRS / "twice_hang_rank2" / "a" / "nccl_trace_rank_1", b / "nccl_trace_rank_1")
    said = _refused(PAIRS / "twice_healthy" / "a", b, capsys)
    assert "not one job dumped twice: rank 1" in said


def test_a_group_with_another_desc_is_a_different_job(tmp_path, capsys):
    def job(desc: str, ops: int) -> dict:
        return {r: make_dump([entry(seq=s) for s in range(1, ops + 1)] + [entry(pg="1", desc=desc, seq=1)]) for r in range(2)}

    write_dumps(tmp_path / "a", job("tp", 3))
    write_dumps(tmp_path / "b", job("dp", 3))
    said = _refused(tmp_path / "a", tmp_path / "b", capsys)
    assert said.endswith("are not one job dumped twice: group pg 1 is tp in A and dp in B; compare two dump sets of one "
                         "job, the earlier first")


@pytest.mark.parametrize("pair", ["twice_hang_rank2", "twice_healthy"])
def test_the_times_are_loaded_for_timing_only_and_the_rest_reads_the_same_without_them(pair, tmp_path, capsys, monkeypatch):
    from frtrace import api

    load_dumps, loads = api.load_dumps, []

    def spied(*args, forced=None, **kw):
        kw["times"] = kw.get("times", True) if forced is None else forced
        loads.append(kw["times"])
        return load_dumps(*args, **kw)

    def run(*extra, forced=None) -> str:
        monkeypatch.setattr(api, "load_dumps", lambda *args, **kw: spied(*args, forced=forced, **kw))
        loads.clear()
        code = main(["compare", str(PAIRS / pair / "a"), str(PAIRS / pair / "b"), "--json", "-", *extra])
        return f"{code}\n{capsys.readouterr().out}"

    without = run()
    assert loads == [False, False]
    assert run(forced=True) == without and loads == [True, True]
    timed = run("--timing")
    assert loads == [True, True] and '"timing": [' in timed and '"timing": null' in without


def test_two_runs_of_one_program_that_hung_alike_are_two_runs_not_one_job_dumped_twice(tmp_path, capsys):
    # the same records, ops and states, every one created 54 s later: the program was run again
    a = tmp_path / "a"
    shutil.copytree(FIXTURES / "skip_rank2", a)
    b = tmp_path / "b"
    b.mkdir()
    import pickle
    for path in sorted(a.glob("nccl_trace_rank_*")):
        dump = pickle.loads(path.read_bytes())
        for raw in dump["entries"]:
            raw["time_created_ns"] += 54 * 10**9
        (b / path.name).write_bytes(pickle.dumps(dump, protocol=2))
    said = _refused(a, b, capsys)  # was STUCK "record for record"
    assert "not one job dumped twice: rank 0's #3 of tp was created 54 s apart in A and B: two runs of the program" in said
