"""Trust, round 3 (issue 26): stray files, archives, odd environments and sizes that named an
innocent rank, crashed frtrace or left files behind. One test (or a few) per case."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES, entry, generated_job, make_dump, ops, peak_of_run, write_dumps
from frtrace.cli import main
from frtrace.reading.discover import find_dump_files as loader_discovery


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
    from frtrace.reading import runs
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
           f"where: rank 13 is in no collective: its last op, all_reduce #6 of default_pg, was joined by every member " \
           f"(or in a send or recv, which gloo does not record); " \
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
    from frtrace.reading.groups import resolve_groups
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
    from frtrace.reading.groups import outvoted_configs
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
    size = (tmp_path / "db.pkl").stat().st_size
    assert size > 1000 and done.stderr.splitlines() == [
        f"frtrace: wrote {tmp_path / 'db.pkl'} ({size / 1000:.1f} kB, the database)",
        "frtrace: standard output is closed: the report was not printed (the exit status is the verdict's)"]


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


# ---------------------------------------------------------------------------- the job's files
def _report(tmp_path: Path, *argv: str, status: int = 1) -> dict:
    target = tmp_path / "report.json"
    assert main([*argv, "--json", str(target)]) == status
    return json.loads(target.read_text())


def _skip_copy(tmp_path: Path, name: str = "d") -> Path:
    folder = tmp_path / name
    shutil.copytree(SKIP, folder)
    (folder / "expected.json").unlink()
    return folder


@pytest.mark.parametrize("stray,content", [
    ("rng_state_7", pickle.dumps({"state": [1, 2, 3]})),
    ("metrics_step_100.json", b'{"loss": 1.0, "step": 100}'),
    ("metrics_3.json", b'{"loss": 1.0}'),
    ("comm_lib_trace_rank_9", (SKIP / "nccl_trace_rank_0").read_bytes()),  # even a real dump, named unlike the job's
], ids=["rng-state", "metrics-step", "metrics-of-rank-3", "another-producers-dump"])
def test_a_stray_file_named_unlike_the_job_never_sets_the_world_or_claims_a_rank(tmp_path, capsys, stray, content):
    folder = _skip_copy(tmp_path)
    (folder / stray).write_bytes(content)
    report = _report(tmp_path, "-d", str(folder))
    assert report["culprit_ranks"] == [2] and report["ranks_loaded"] == [0, 1, 2, 3] and report["ranks_missing"] == []
    (ignored,) = [i for i in report["ignored_files"] if i["path"].endswith(stray)]
    assert ignored["reason"] == "named unlike the job's 4 dump(s) (nccl_trace_rank_<rank>): not part of the job, not read"
    assert stray not in capsys.readouterr().err


def test_two_sets_that_each_look_like_a_whole_job_stop_and_ask_for_a_prefix(tmp_path, capsys):
    folder = _skip_copy(tmp_path)
    for rank in range(4):
        shutil.copy(FIXTURES / "healthy" / f"nccl_trace_rank_{rank}", folder / f"_dump_{rank}")
    assert main(["-d", str(folder)]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert said.startswith("frtrace: two sets of dumps in one folder: ") and "_dump_<rank> (4 ranks)" in said
    assert "nccl_trace_rank_<rank> (4 ranks)" in said and said.endswith("pass -p with the prefix of the one to read "
                                                                         "(or a prefix both hold, if they are one job)")
    assert _report(tmp_path, "-d", str(folder), "-p", "_dump_", status=0)["verdict"] == "clean"
    assert _report(tmp_path, "-d", str(folder), "-p", "nccl_trace_rank_")["culprit_ranks"] == [2]


@pytest.mark.parametrize("name", ["trace_node{host}_pid{pid}_{rank}", "trace_{word}-a{host}_{rank}", "{word}.ib0_nccl_{rank}.json"],
                         ids=["numbered-hosts-and-pids", "named-hosts", "host-first"])
def test_host_and_pid_numbers_inside_names_are_one_job(tmp_path, name):
    folder = tmp_path / "d"
    folder.mkdir()
    for rank in range(4):  # two hosts, a pid in each name, and no -p
        raw = pickle.loads((SKIP / f"nccl_trace_rank_{rank}").read_bytes())
        word = ("gpu", "mlx")[rank // 2]
        (folder / name.format(host=rank // 2 + 7, pid=4000 + rank, rank=rank, word=word)).write_text(json.dumps(raw))
    report = _report(tmp_path, "-d", str(folder))
    assert report["culprit_ranks"] == [2] and report["ranks_loaded"] == [0, 1, 2, 3] and report["ignored_files"] == []


# ---------------------------------------------------------------------------- a lost rank said aloud
@pytest.mark.parametrize("damage", ["exotic-opcode", "sparse-2GiB"])
def test_a_dump_named_file_that_cannot_be_read_is_said_and_named_as_the_culprits_file(tmp_path, capsys, damage):
    folder = _skip_copy(tmp_path)
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}  # the world is known without rank 3's file
    for rank in range(3):
        raw = pickle.loads((SKIP / f"nccl_trace_rank_{rank}").read_bytes())
        raw["pg_config"] = config
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(raw))
    lost = folder / "nccl_trace_rank_3"
    if damage == "exotic-opcode":
        lost.write_bytes(b"\x80\x09" + lost.read_bytes()[2:])  # a protocol no pickler writes
        why = "its first bytes are not those of a pickle or JSON dump"
    else:
        with open(lost, "r+b") as handle:
            handle.truncate(2 << 30)
        why = "2048 MiB, more than the 1024 MiB a Flight Recorder dump can hold; not read"
    report = _report(tmp_path, "-d", str(folder))
    err = capsys.readouterr().err
    assert f"frtrace: skipped {lost}: {why}" in err.splitlines()
    assert 3 in report["culprit_ranks"]
    (lost_file,) = [c for c in report["culprit_files"] if c["rank"] == 3]
    assert lost_file == {"rank": 3, "file": "nccl_trace_rank_3", "host": None, "not_read": why}
    main(["-d", str(folder)])
    assert f"rank 3: nccl_trace_rank_3 (not read: {why})" in capsys.readouterr().out


# ---------------------------------------------------------------------------- folders
def test_a_folder_1100_deep_beside_the_dumps_is_neither_walked_nor_a_crash(tmp_path):
    folder = _skip_copy(tmp_path)
    for top in (".cache", "logs"):
        here = os.open(folder, os.O_RDONLY)
        try:
            for name in [top] + ["d"] * 1100:
                os.mkdir(name, dir_fd=here)
                below = os.open(name, os.O_RDONLY, dir_fd=here)
                os.close(here)
                here = below
        finally:
            os.close(here)
    try:
        report = _report(tmp_path, "-d", str(folder), "-o", str(tmp_path / "db.pkl"))
        assert report["culprit_ranks"] == [2]
        assert main(["-d", str(folder)]) == 1
    finally:  # deepest first: shutil.rmtree (and pytest's clean-up of old runs) recurses, and would fail
        for top in (".cache", "logs"):
            chain = [top] + ["d"] * 1100
            here = os.open(folder, os.O_RDONLY)
            fds = [here]
            for name in chain[:-1]:
                fds.append(os.open(name, os.O_RDONLY, dir_fd=fds[-1]))
            for parent, name in zip(reversed(fds), reversed(chain)):
                os.rmdir(name, dir_fd=parent)
            for fd in fds:
                os.close(fd)


def test_the_output_check_reads_no_folder_it_need_not(tmp_path, monkeypatch):
    folder = _skip_copy(tmp_path)
    (folder / ".cache").mkdir()
    (folder / ".cache" / "kept.json").write_text("{}")
    listed = []
    real_scandir, real_listdir, real_walk = os.scandir, os.listdir, os.walk
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real_scandir(path))
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(str(path)) or real_listdir(path))
    monkeypatch.setattr(os, "walk", lambda top, *a, **kw: listed.append(str(top)) or real_walk(top, *a, **kw))
    assert main(["-d", str(folder), "--json", str(tmp_path / "r.json"), "-o", str(tmp_path / "db.pkl")]) == 1
    assert not any(".cache" in path for path in listed), listed
    # and what is there is still never written over, found by where it is rather than by walking
    assert main(["-d", str(folder), "--json", str(folder / ".cache" / "kept.json")]) == 2
    assert (folder / ".cache" / "kept.json").read_text() == "{}"


# ---------------------------------------------------------------------------- archives
def _members(source: Path = SKIP, folder: str = "dumps") -> dict[str, bytes]:
    return {f"{folder}/nccl_trace_rank_{r}": (source / f"nccl_trace_rank_{r}").read_bytes() for r in range(4)}


def _tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: that is the point
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members:
                archive.writestr(name, data)
    return path


@pytest.mark.process
@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_of_big_members_is_read_one_member_at_a_time(tmp_path, kind):
    big = b"\x80\x02" + bytes(256 << 20)  # starts like a pickle, then 256 MiB of zeros: a few hundred KB packed
    members = [(f"nccl_trace_rank_{r}", big) for r in range(6)]
    archive = _zip(tmp_path / "a.zip", members) if kind == "zip" else _tar(tmp_path / "a.tar.gz", members)
    assert archive.stat().st_size < 5 << 20
    done, peak = peak_of_run([sys.executable, "-m", "frtrace", "-d", str(archive), "--jobs", "2"])
    assert done.returncode == 2 and b"none of the 6 dump file(s) could be read" in done.stderr, done.stderr
    # one member's bytes at a time in each process: 280 MiB; a worker that kept the bytes of the members
    # it failed to read (an error's frames in a cycle, its collector off) reached 790
    assert peak < 600 << 20, f"peak {peak >> 20} MiB"


def test_an_archive_member_is_read_from_a_copy_that_is_gone_afterwards(tmp_path, monkeypatch):
    spools = []
    real = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **kw: spools.append(real(*a, **kw)) or spools[-1])
    report = _report(tmp_path, "-d", str(_tar(tmp_path / "a.tar.gz", list(_members().items()))))
    assert report["culprit_ranks"] == [2]
    assert report["culprit_files"][0]["file"] == "nccl_trace_rank_2"
    (spool,) = spools
    assert not os.path.exists(spool)


@pytest.mark.parametrize("kind", ["tar-appended", "zip-twice"])
def test_two_members_claiming_one_rank_are_an_input_error_naming_them(tmp_path, capsys, kind):
    members = list(_members().items())
    if kind == "tar-appended":  # tar -r: the same name again at the end
        archive = _tar(tmp_path / "a.tar", members, "w")
        with tarfile.open(archive, "a") as appended:
            info = tarfile.TarInfo("dumps/nccl_trace_rank_3")
            data = (FIXTURES / "healthy" / "nccl_trace_rank_3").read_bytes()
            info.size = len(data)
            appended.addfile(info, io.BytesIO(data))
    else:
        archive = _zip(tmp_path / "a.zip", [*members, ("dumps/nccl_trace_rank_3", members[3][1])])
    assert main(["-d", str(archive)]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert said.startswith("frtrace: two dump files claim rank 3: ") and f"{archive.name}!dumps/nccl_trace_rank_3" in said
    assert "is in the archive twice" in said


@pytest.mark.parametrize("mode", ["w:gz", "w:xz", "w:bz2", "zip"])
@pytest.mark.parametrize("damage", ["truncated", "flipped", "one-byte"])
def test_a_damaged_archive_is_one_line_or_its_readable_members(tmp_path, capsys, mode, damage):
    members = list(_members(FIXTURES / "healthy").items())
    archive = (_zip(tmp_path / "a.zip", members) if mode == "zip"
               else _tar(tmp_path / f"a.tar.{mode[2:]}", members, mode))
    data = bytearray(archive.read_bytes())
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    elif damage == "one-byte":  # in the compressed bytes of a member: a zlib or lzma error while it is read
        data[len(data) * 55 // 100] ^= 0xFF
    else:
        for at in range(len(data) // 2, len(data) // 2 + 16):  # inside a member's compressed bytes
            data[at] ^= 0xFF
    archive.write_bytes(bytes(data))
    status = main(["-d", str(archive)])
    err = capsys.readouterr().err
    assert status in (0, 1, 2) and "internal error" not in err and "Traceback" not in err, err
    if status == 2:
        assert len(err.strip().splitlines()) >= 1 and str(archive) in err.strip().splitlines()[-1]
    else:
        assert str(archive) in err  # what could not be read is said


def test_a_damaged_bzip2_tar_is_called_a_damaged_archive(tmp_path, capsys):
    archive = _tar(tmp_path / "a.tar.bz2", list(_members().items()), "w:bz2")
    data = archive.read_bytes()
    archive.write_bytes(data[:10] + bytes(len(data) - 10))  # its header intact, the stream gone
    assert main(["-d", str(archive)]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert "not a directory" not in said and "a.tar.bz2" in said and ("damaged" in said or "not a readable" in said)


def test_a_tar_holding_a_zip_is_read_as_the_tar_and_the_zip_not_opened(tmp_path):
    inner = _zip(tmp_path / "inner.zip", [("nccl_trace_rank_0", b"\x80\x02junk")]).read_bytes()
    members = [*_members(FIXTURES / "healthy").items(), ("dumps/old.zip", inner), ("dumps/nccl_trace_rank_7.tar.gz", inner)]
    report = _report(tmp_path, "-d", str(_tar(tmp_path / "a.tar", members, "w")), status=0)
    assert report["verdict"] == "clean" and report["ranks_loaded"] == [0, 1, 2, 3]
    reasons = {i["path"].split("!")[-1]: i["reason"] for i in report["ignored_files"]}
    assert reasons["dumps/old.zip"] == reasons["dumps/nccl_trace_rank_7.tar.gz"] == \
        "an archive inside the archive: not opened (extract it and pass it on its own)"


def test_a_member_named_like_a_dump_that_is_an_archive_says_so(tmp_path, capsys):
    inner = _zip(tmp_path / "inner.zip", [("x", b"y")]).read_bytes()
    members = [*list(_members().items())[:3], ("dumps/nccl_trace_rank_3", inner)]  # rank 3 is a zip
    main(["-d", str(_tar(tmp_path / "a.tar", members, "w"))])
    assert "nccl_trace_rank_3: its first bytes are not those of a pickle or JSON dump (it is a zip archive" in \
        capsys.readouterr().err


def test_the_job_rule_holds_inside_an_archive(tmp_path):
    members = [*_members().items(), ("dumps/rng_state_7", pickle.dumps({"state": [1, 2]})), ("dumps/metrics_3.json", b"{}")]
    report = _report(tmp_path, "-d", str(_tar(tmp_path / "a.tar.gz", members)))
    assert report["culprit_ranks"] == [2] and report["ranks_loaded"] == [0, 1, 2, 3] and report["ranks_missing"] == []
    assert sum("named unlike the job's 4 dump(s)" in i["reason"] for i in report["ignored_files"]) == 2
