"""frtrace live's answers on their way into the snapshot: each written to its file as it arrives
(memory does not grow with ranks x answer size), and each checked against the rank asked (a
worker that answers another rank's or another job's recorder is not kept as the rank's dump).
Workers are small HTTP servers on loopback (tests/test_live.py's), serving fixtures' dumps."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import tracemalloc

import pytest

from conftest import FIXTURES
from frtrace import api
from frtrace.cli import main
from frtrace.errors import UsageError
from frtrace.live import fetch
from test_live import STACK, _as_json, _url, _worker

MiB = 1 << 20


def _recorder(size: int) -> bytes:
    """A recorder's JSON of about `size` bytes: a real gloo dump's entry again and again, each with
    a 4 KiB frame (a job with stack traces on)."""
    raw = json.loads((FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes())
    entry = {**raw["entries"][0], "frames": [{"name": "step", "filename": "/job/" + "x" * 4096 + ".py", "line": 7}]}
    raw["entries"] = [{**entry, "record_id": i} for i in range(size // len(json.dumps(entry)))]
    return json.dumps(raw).encode()


def test_memory_stays_that_of_a_few_chunks_however_many_ranks_answer_how_much(tmp_path, capsys, monkeypatch):
    """Issue 49: 200 workers answering 8 MiB each took 1.6 GB, every answer held until the folder
    was written. Here 40 answer 4 MiB (160 MiB in all): the fetch's peak stays under 30 MiB."""
    body = _recorder(4 * MiB)
    servers = [_worker(body) for _ in range(40)]
    peaks = []

    def measured(path, **kwargs):  # the snapshot is kept: what it took so far is the fetch's
        peaks.append(tracemalloc.get_traced_memory()[1])
        raise UsageError("measured")

    monkeypatch.setattr(api, "analyze_dumps", measured)  # live_snapshot looks it up when it analyses
    out = tmp_path / "snap"
    tracemalloc.start()
    try:
        code = main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0", "--timeout", "60"])
    finally:
        tracemalloc.stop()
    assert code == 2 and "measured" in capsys.readouterr().err
    assert peaks and peaks[0] < 30 * MiB, f"peak {peaks[0] / MiB:.0f} MiB"  # was: 166 MiB
    assert all((out / f"trace_rank_{r}.json").read_bytes() == body for r in (0, 39))
    assert len(list(out.glob("trace_rank_*.json"))) == 40 and (out / "stacks" / "rank_17.txt").read_bytes() == STACK


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 64])
def test_a_recorder_read_a_chunk_at_a_time_reads_as_it_does_whole(chunk, monkeypatch):
    """The fields whose it is come from the file a chunk at a time: a value cut at a chunk's end
    ("1.5e+|3", a string's escape, a character's bytes) reads as it does whole."""
    document = ('\ufeff{"entries": [{"a": "\\"]}\\u00e9é"}, [1, [2]], 3], "x": 12345678901234, "y": -1.5e+3, '
                '"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "rank" : 7, "z": {}, "w": "é"}').encode()
    monkeypatch.setattr(fetch, "_SKIM_CHUNK", chunk)
    whole = json.loads(document.decode("utf-8-sig"))
    assert dict(fetch._members(io.BytesIO(document), ("x", "y", "pg_config", "rank", "w"))) == {
        "entries": True, "x": whole["x"], "y": whole["y"], "pg_config": whole["pg_config"], "rank": 7, "z": False, "w": "é"}
    for broken in (b'{"entries": [1, 2}', b'{"rank" 1}', b"<html>", b""):
        with pytest.raises(ValueError):
            dict(fetch._members(io.BytesIO(broken), ("rank",)))


def _with_rank(document: bytes, rank: int) -> bytes:
    """A recorder's JSON with a top-level "rank", as some writers give (torch's own does not)."""
    return json.dumps({**json.loads(document), "rank": rank}).encode()


@pytest.mark.parametrize("served,said", [
    (lambda r: _as_json(FIXTURES / ("synthetic_tp4_dp4_rank5" if r == 3 else "synthetic_hook_healthy") / f"nccl_trace_rank_{r}"),
     ("answered a recorder whose job is 16 ranks (0-15), where the other ranks' is 8 ranks (0-7): another job's worker, "
      "or the wrong address")),
    (lambda r: _with_rank(_as_json(FIXTURES / "synthetic_hook_healthy" / f"nccl_trace_rank_{r}"), 5 if r == 3 else r),
     "answered rank 5's recorder, not rank 3's: another job's worker, or the wrong address"),
], ids=["another-job-s-world", "another-rank-s-recorder"])
def test_a_worker_answering_another_rank_s_or_job_s_recorder_is_not_kept_as_the_rank_s_dump(served, said, tmp_path, capsys):
    """Rank 3's address leads to another worker: another job's (whose pg_config says 16 ranks, so
    the 8-rank job's ranks 8-15 were reported missing), or this job's rank 5."""
    servers = [_worker(served(r)) for r in range(8)]
    out = tmp_path / "snap"

    code = main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0"])

    report = capsys.readouterr()
    assert code == 1
    assert f"frtrace: rank 3's answer was not kept: the worker at {_url(servers[3])} {said}" in report.err.splitlines()
    assert report.out.startswith("DESYNC: rank 3 did not answer when frtrace live asked"), report.out
    assert "8-15" not in report.out and "ranks missing  3\n" in report.out
    ranks = json.loads((out / "manifest.json").read_text())["ranks"]
    assert ranks[3] == {"rank": 3, "url": _url(servers[3]), "seconds": ranks[3]["seconds"], "answered": False,
                        "error": f"the worker at {_url(servers[3])} {said}", "refused": True}
    # read again, the rank's reason says its answer was another's, not that its process may be gone
    assert "its answer was another's: check its address" in report.out and "rank 3 did not answer frtrace live (the worker" in report.out
    assert all(r["answered"] for r in ranks if r["rank"] != 3)
    assert not (out / "trace_rank_3.json").exists() and not (out / "stacks" / "rank_3.txt").exists()
    assert "snapshot of 7 of 8 ranks kept" in report.err


@pytest.mark.parametrize("served,world", [
    (lambda r: _as_json(FIXTURES / "synthetic_torchft_skip_rank6" / f"nccl_trace_rank_{r}"), 8),  # every replica: [0-3]
    (lambda r: _as_json(FIXTURES / ("synthetic_tp4_dp4_rank5" if r else "synthetic_p2p_cycle_rank1") / f"nccl_trace_rank_{r}"), 2),
    (lambda r: _with_rank((FIXTURES / "skip_goes_on" / f"trace_host-node{r // 2:02d}_{r}.json").read_bytes(), r), 4),
], ids=["torchft-replica-local-groups", "two-ranks-two-worlds-no-majority", "its-own-rank"])
def test_what_cannot_be_told_another_s_is_kept(served, world, tmp_path, capsys):
    """A recorder whose fields do not contradict the rank asked, or where no world has most ranks
    behind it, is the rank's: never refused on a guess."""
    servers = [_worker(served(r)) for r in range(world)]
    out = tmp_path / "snap"
    main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0"])
    assert "was not kept" not in capsys.readouterr().err
    assert [r["answered"] for r in json.loads((out / "manifest.json").read_text())["ranks"]] == [True] * world


def test_a_stop_between_the_two_snapshots_leaves_nothing_beside_the_folder_either(tmp_path, capsys, monkeypatch):
    """The first snapshot is on disk (in the temporary folder) when Ctrl-C comes: it goes with it."""
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    sleep = time.sleep

    def interrupted(seconds):
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", interrupted)
    assert main(["live", "--workers", _url(_worker(trace)), "-O", str(tmp_path / "snap"), "--interval", "1"]) == 130
    assert "interrupted" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_an_answer_cut_off_leaves_no_part_of_it_in_the_snapshot(tmp_path, capsys):
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    out = tmp_path / "snap"
    main(["live", "--workers", _url(_worker(trace, stacks=b"x" * (fetch.MAX_STACKS_BYTES + 1))), "-O", str(out), "--interval", "0"])
    assert "rank 0's stacks were not kept (its dump_traceback answer is over 4 MiB; cut off)" in capsys.readouterr().err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["manifest.json", "stacks", "trace_rank_0.json"]
    assert (out / "trace_rank_0.json").read_bytes() == trace


def test_a_snapshot_file_that_cannot_be_written_is_an_output_error_not_a_silent_rank(tmp_path, capsys, monkeypatch):
    """A full disk while an answer streams in: the snapshot fails, nothing stays, and no rank is
    said to have not answered."""
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()

    def full(self, data):
        raise fetch._WriteError(self.path, OSError(28, os.strerror(28)))

    monkeypatch.setattr(fetch._NewFile, "write", full)
    assert main(["live", "--workers", _url(_worker(trace)), "-O", str(tmp_path / "snap"), "--interval", "0"]) == 2
    err = capsys.readouterr().err
    assert "snap: cannot write the snapshot (No space left on device); nothing was written" in err
    assert "did not answer" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("interval", [0, 0.2])
def test_the_library_takes_the_snapshot_the_command_takes_and_prints_nothing(interval, tmp_path, capfd):
    import frtrace

    served = [_as_json(FIXTURES / "synthetic_hook_healthy" / f"nccl_trace_rank_{r}") for r in range(8)]
    servers = [_worker(body) for body in served]
    code = main(["live", "--workers", *map(_url, servers), "-O", str(tmp_path / "cli"), "--interval", str(interval),
                 "--json", str(tmp_path / "cli.json")])
    printed = capfd.readouterr().out

    snap = frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(tmp_path / "api"), interval=interval)
    snap.write_json(str(tmp_path / "api.json"))
    assert capfd.readouterr() == ("", "")
    assert code == (0 if snap.verdict in ("clean", "progressing") else 1) and snap.text() == printed
    cli, api = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cli", "api"))
    for report in (cli, api):  # where each was kept, and how long each rank took, are each run's own
        report["live"]["snapshot"] = None
    assert api == cli and sorted(os.listdir(tmp_path / "api")) == sorted(os.listdir(tmp_path / "cli"))
    with pytest.raises(frtrace.UsageError, match="give the job's store"):
        frtrace.live_snapshot(out_dir=str(tmp_path / "none"))
    assert not (tmp_path / "none").exists()
