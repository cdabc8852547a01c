"""Trust, round 3 (issue 26): stray files, archives, odd environments and sizes that named an
innocent rank, crashed frtrace or left files behind. One test (or a few) per case."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, entry, generated_job, make_dump, ops, peak_of_run, write_dumps
from frtrace.cli import main
from frtrace.discover import find_dump_files as loader_discovery


def _cpu(work, repeat: int = 3) -> float:
    """The least CPU time of a few runs of `work`: a ratio of two of these says how cost grows."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


# ---------------------------------------------------------------------------- size
def _many_groups_dump(count: int) -> dict:
    return make_dump([entry(pg=str(1000 + g), desc=f"g{g}") for g in range(count)] + ops(3))


def test_reading_a_dump_of_many_one_op_groups_grows_linearly():
    from frtrace.loader import compact

    small, large = _many_groups_dump(2_000), _many_groups_dump(16_000)
    ratio = _cpu(lambda: compact(large, 0, "x", "pickle")) / _cpu(lambda: compact(small, 0, "x", "pickle"))
    assert ratio < 24, f"8 times the groups cost {ratio:.1f} times the CPU (linear: about 8)"  # quadratic: 64


def test_a_world_of_many_ranks_costs_linear_time_with_every_output(tmp_path):
    def job(world: int) -> Path:
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
        return write_dumps(tmp_path / f"w{world}", {r: make_dump(ops(10 if r != 2 else 6), pg_config=config) for r in range(4)})

    def run(folder: Path):
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        assert main(["-d", str(folder), "--jobs", "1", "-o", str(out / "db.pkl"), "--html", str(out / "r.html"),
                     "--json", str(out / "r.json"), "--chrome-trace", str(out / "t.json"), "--stats"]) == 1

    small, large = job(20_000), job(160_000)
    ratio = _cpu(lambda: run(large), repeat=2) / _cpu(lambda: run(small), repeat=2)
    assert ratio < 24, f"8 times the world cost {ratio:.1f} times the CPU (linear: about 8)"


def test_the_one_pass_runs_of_many_groups_equal_the_masked_runs(monkeypatch):
    from frtrace import runs
    from frtrace.loader import compact

    raw = make_dump([entry(pg=str(1000 + g % 40), desc=f"g{g % 40}", seq=1 + g // 40, state=("scheduled", "completed")[g % 2])
                     for g in range(400)] + [entry(pg="7", op="send 0->1", is_p2p=True, p2p_seq=1)] + ops(300))
    columns = compact(raw, 0, "x", "pickle").entries
    one_pass = runs.make_runs(columns)
    monkeypatch.setattr(runs, "_MASKED_NAMES", 1 << 30)
    masked = runs.make_runs(columns)
    assert list(one_pass) == list(masked) and len(one_pass) == 42
    for name, run in masked.items():
        got = one_pass[name]
        assert (list(got.positions), got.first_seq, bytes(got.kinds), bytes(got.states)) == (
            list(run.positions), run.first_seq, bytes(run.kinds), bytes(run.states)), name


@pytest.mark.process
def test_a_dump_of_far_more_entries_than_a_recorder_keeps_is_refused_within_a_bounded_memory(tmp_path):
    tiny = [{"record_id": i, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": i + 1, "p2p_seq_id": 0,
             "profiling_name": "gloo:all_reduce", "input_sizes": [[3]], "output_sizes": [[3]], "state": "scheduled"}
            for i in range(1_200_000)]  # 1.2 million entries: 124 MB of pickle, about 1.4 GB once parsed
    dumps = write_dumps(tmp_path / "d", {r: make_dump(ops(10 if r != 2 else 6)) for r in range(4)})
    (dumps / "nccl_trace_rank_1").write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": tiny}, protocol=2))
    del tiny
    done, peak = peak_of_run([sys.executable, "-m", "frtrace", "-d", str(dumps), "--jobs", "1"])
    assert done.returncode == 1, done.stderr
    (line,) = [line for line in done.stderr.decode().splitlines() if "nccl_trace_rank_1" in line]
    assert "far more entries than a Flight Recorder keeps" in line and "1,000,000" in line
    assert peak < 1536 << 20, f"peak {peak >> 20} MiB"
    print(f"peak {peak >> 20} MiB")


def test_a_dump_past_the_entry_cap_is_refused_by_its_count(tmp_path, monkeypatch):
    from frtrace import loader

    monkeypatch.setattr(loader, "MAX_ENTRIES", 100)
    dumps = write_dumps(tmp_path / "d", {0: make_dump(ops(101)), 1: make_dump(ops(100))})
    result = loader.load_dumps(loader_discovery(dumps), workers=0)
    assert list(result.dumps) == [1]
    (skipped,) = result.skipped
    assert "holds 101 entries, far more entries than a Flight Recorder keeps" in skipped.reason
    assert "frtrace reads up to 100 from one dump" in skipped.reason


# ---------------------------------------------------------------------------- health evidence
def test_a_culprits_failed_gpu_check_keeps_its_device_and_error_in_every_report(tmp_path, capsys):
    nvrx = {"gpu": {"status": "failed", "index": 5, "uuid": "GPU-8d2c41", "error": "Xid 48: double-bit ECC error"}}
    dumps = {r: make_dump(ops(10 if r != 13 else 6)) for r in range(16)}
    dumps[13]["health_check_results"] = nvrx
    folder = write_dumps(tmp_path / "d", dumps, prefix="_dump_")
    assert main(["-d", str(folder), "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 1
    said = "rank 13's gpu check failed: Xid 48: double-bit ECC error (index 5, uuid GPU-8d2c41)"
    out = capsys.readouterr().out
    assert f"Evidence: majority: 15 of 16 members issued all_reduce #10 of default_pg; rank 13 never did and waits for nobody; " \
           f"health check: {said}" in out
    assert "failed health checks  rank 13: gpu: Xid 48: double-bit ECC error (index 5, uuid GPU-8d2c41)" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["health"] == {"13": [{"check": "gpu", "passed": False, "said": "failed",
                                        "detail": "Xid 48: double-bit ECC error (index 5, uuid GPU-8d2c41)",
                                        "fields": {"status": "failed", "index": "5", "uuid": "GPU-8d2c41",
                                                   "error": "Xid 48: double-bit ECC error"}}]}
    page = (tmp_path / "r.html").read_text()
    health = page[page.index("<table class='stacks' id='health'>"):]
    health = health[:health.index("</table>")]
    assert "rank 13" in health and "Xid 48: double-bit ECC error" in health and "uuid=GPU-8d2c41" in health
    assert "index=5" in health


# ---------------------------------------------------------------------------- disagreeing configs
def _configured(world_of: dict[int, int], short: int = 5, world: int = 16) -> dict[int, dict]:
    """`world` ranks, each listing world_of.get(rank, world) ranks in its default group; `short` stops after #6."""
    def config(n: int) -> dict:
        return {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(n)))}}
    return {r: make_dump(ops(6 if r == short else 10), pg_config=config(world_of.get(r, world))) for r in range(world)}


def test_one_ranks_config_disagreeing_with_the_others_is_a_note_not_evidence(tmp_path):
    folder = write_dumps(tmp_path / "d", _configured({3: 17}))
    assert main(["-d", str(folder), "--json", str(tmp_path / "r.json")]) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["culprit_ranks"] == [5] and report["ranks_missing"] == []
    assert report["headline"].startswith("DESYNC: rank 5 never joined all_reduce #10 of default_pg (15 ranks wait in it)")
    assert "rank 3" not in report["headline"] and not any(3 in f["ranks"] for f in report["findings"])


def test_the_disagreement_is_said_and_a_tie_uses_neither_list():
    from frtrace.groups import resolve_groups
    from frtrace.loader import normalize

    def table(world_of, world=16):
        dumps = {r: normalize(raw, r, f"r{r}", "pickle") for r, raw in _configured(world_of, world=world).items()}
        return resolve_groups(dumps)

    odd = table({3: 17, 9: 17})
    (default,) = odd.groups
    assert default.ranks == tuple(range(16)) and not default.inferred
    assert "ranks 3, 9's pg_config lists 17 ranks in default_pg (pg 0) where 14 other ranks' configs list 16: " \
           "their list is used, their config is not" in odd.warnings
    tie = table({0: 3}, world=2)  # rank 0 says 3 ranks, rank 1 says 2: neither list is used
    (default,) = tie.groups
    assert default.inferred and default.ranks == (0, 1)
    assert any("no list is used, membership is inferred from the entries" in w for w in tie.warnings)


def test_groups_of_one_name_with_disjoint_members_are_two_groups():
    from frtrace.groups import outvoted_configs
    from frtrace.loader import normalize

    def split(rank: int) -> dict:
        members = [0, 1] if rank < 2 else [2, 3]
        config = {"9f": {"name": "9f", "desc": "tp", "ranks": str(members)}}
        return make_dump(ops(3, pg="9f", desc="tp"), pg_config=config)

    dumps = {r: normalize(split(r), r, f"r{r}", "pickle") for r in range(4)}
    assert outvoted_configs(dumps) == (set(), [])


# ---------------------------------------------------------------------------- environment
SKIP = FIXTURES / "skip_rank2"  # real gloo dumps: rank 2 skipped a collective


def _frtrace(*argv: str, preexec=None, encoding="utf-8", **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frtrace", *argv], capture_output=True, encoding=encoding, timeout=120,
                          preexec_fn=preexec, **kw)


@pytest.mark.process
def test_a_closed_standard_output_keeps_the_verdicts_status_and_the_outputs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "frtrace", "-d", str(SKIP), "-o", str(tmp_path / "db.pkl")],
                          stdout=None, stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == "frtrace: standard output is closed: the report was not printed (the exit status is the verdict's)"
    assert (tmp_path / "db.pkl").stat().st_size > 1000


@pytest.mark.process
def test_a_closed_standard_error_puts_nothing_into_the_report(tmp_path):
    done = _frtrace("-d", str(SKIP), "-o", str(tmp_path / "db.pkl"), preexec=lambda: os.close(2))
    assert done.returncode == 1
    assert done.stdout.startswith("DESYNC: rank 2 never joined") and "internal error" not in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["db.pkl"]


@pytest.mark.process
def test_a_relative_output_from_a_deleted_working_directory_is_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()

    def leave_a_deleted_folder():
        os.chdir(gone)
        os.rmdir(gone)

    done = _frtrace("-d", str(SKIP), "-o", "db.pkl", preexec=leave_a_deleted_folder)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("frtrace: db.pkl: a relative path, but the working directory no longer exists; "
                           "cd to an existing folder or give an absolute path\n")


@pytest.mark.process
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_encoding_that_cannot_hold_a_dumps_text_escapes_it(tmp_path, encoding):
    dumps = {r: make_dump([entry(seq=s, desc="données_模型") for s in range(1, (6 if r == 2 else 10) + 1)]) for r in range(4)}
    folder = write_dumps(tmp_path / "d", dumps)
    done = _frtrace("-d", str(folder), "-v", env={**os.environ, "PYTHONIOENCODING": encoding}, encoding=encoding)
    assert done.returncode == 1, done.stderr
    assert "\\u6a21\\u578b" in done.stdout.splitlines()[0] and "Traceback" not in done.stderr


def test_a_legal_250_character_output_name_is_written(tmp_path):
    target = tmp_path / ("r" * 246 + ".pkl")
    assert main(["-d", str(SKIP), "-o", str(target)]) == 1
    assert os.listdir(tmp_path) == [target.name] and target.stat().st_size > 1000


@pytest.mark.process
def test_sigkill_while_outputs_are_written_leaves_nothing_in_their_folder(tmp_path):
    from test_hostile import wait_until_staging

    data = generated_job(tmp_path / "dumps", ranks=64)
    out = tmp_path / "out"
    out.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "frtrace", "-d", str(data), "-o", str(out / "db.pkl"),
                                "--sqlite", str(out / "x.db"), "--chrome-trace", str(out / "t.json")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_staging(process, out)
    assert process.poll() is None, "the run ended before it wrote its outputs"
    process.kill()
    process.wait(timeout=60)
    assert os.listdir(out) == []
