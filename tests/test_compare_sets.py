"""`frtrace compare A B`: two dump sets of one job, the earlier first."""

from __future__ import annotations

import json
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
                     "ranks 0-1,3 wait in all_reduce #10 of default_pg")


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


def _timed(duration_ms: float, ops: int = 4) -> dict:
    return {r: make_dump([entry(seq=s, backend="nccl", state="completed", duration_ms=duration_ms) for s in range(1, ops + 1)]
                         + [entry(seq=ops + 1, backend="nccl", state="completed", op="broadcast", duration_ms=1.0)])
            for r in range(2)}


def test_timing_lists_the_ops_that_got_slower_first(tmp_path, capsys):
    write_dumps(tmp_path / "a", _timed(2.0))
    write_dumps(tmp_path / "b", _timed(6.0, ops=6))
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
