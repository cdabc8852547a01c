"""Dumps read where they lie (reading/remote.py): real fixtures put in a real S3 protocol server
(moto's server mode, on loopback) and served by a real HTTP server give the verdict, culprits and
headline of the same files read from the folder; the store's faults are one line each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote_servers import http_server, s3_env, s3_server, s3_server_checking_keys  # noqa: F401 - pytest fixtures

pytest.importorskip("s3fs", reason="reading S3 needs s3fs (the test extra installs it)")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SETS = ["skip_goes_on", "stacks_data_stall_rank2", "synthetic_tp4_dp4_rank5", "recorder_off_skip_rank0"]


def frtrace(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frtrace", *args], capture_output=True, text=True, timeout=timeout,
                          env=env or dict(os.environ), cwd=ROOT)


def report(*args: str, env: dict | None = None, tmp: Path) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / f"report{len(list(tmp.glob('report*')))}.json"
    done = frtrace(*args, "--json", str(out), env=env)
    return done, json.loads(out.read_text()) if out.exists() else {}


def same(local: dict, remote: dict) -> None:
    for key in ("verdict", "culprit_ranks", "headline", "cause", "findings"):
        assert remote[key] == local[key], key


@pytest.fixture(scope="module")
def bucket(s3_server):  # noqa: F811
    for name in SETS:
        s3_server.upload(FIXTURES / name, "dumps", f"jobs/{name}")
    s3_server.upload(FIXTURES / "pairs" / "twice_hang_rank2", "dumps", "pairs/twice")
    return s3_server


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
@pytest.mark.parametrize("name", SETS)
def test_a_set_in_s3_reads_as_the_same_set_in_a_folder(name, bucket, tmp_path):
    done, remote = report("-d", f"s3://dumps/jobs/{name}", env=bucket.child_env(), tmp=tmp_path)
    _, local = report("-d", str(FIXTURES / name), tmp=tmp_path)
    assert done.returncode == (0 if local["verdict"] == "clean" else 1), done.stderr
    same(local, remote)
    assert done.stdout.splitlines()[0] == local["headline"]
    expected = json.loads((FIXTURES / name / "expected.json").read_text())
    assert remote["culprit_ranks"] == expected["culprit_ranks"]


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_stacks_beside_the_dumps_are_read_from_the_store(bucket, tmp_path):
    _, remote = report("-d", "s3://dumps/jobs/stacks_data_stall_rank2", env=bucket.child_env(), tmp=tmp_path)
    assert remote["causes"]["2"]["said"].startswith("in no collective: loading data (torch's DataLoader)"), remote["causes"]
    assert any(e.startswith("stacks: rank 2's Python stack shows it in the data loader") for e in remote["evidence"])


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_compare_reads_both_sets_from_the_store(bucket, tmp_path):
    env = bucket.child_env()
    done = frtrace("compare", "s3://dumps/pairs/twice/a", "s3://dumps/pairs/twice/b", env=env)
    local = frtrace("compare", str(FIXTURES / "pairs/twice_hang_rank2/a"), str(FIXTURES / "pairs/twice_hang_rank2/b"))
    assert done.returncode == local.returncode == 1, done.stderr
    assert done.stdout.splitlines()[:2] == local.stdout.splitlines()[:2]


def test_the_python_api_reads_a_url(s3_env, bucket):  # noqa: F811
    import frtrace

    result = frtrace.analyze_dumps("s3://dumps/jobs/skip_goes_on", jobs=2)
    assert (result.verdict, result.culprit_ranks) == ("desync", (1,))


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_a_set_served_over_http_reads_as_the_folder(http_server, tmp_path):  # noqa: F811
    shutil.copytree(FIXTURES / "skip_goes_on", http_server.root / "skip")
    done, remote = report("-d", http_server.url_of("skip/"), tmp=tmp_path)
    _, local = report("-d", str(FIXTURES / "skip_goes_on"), tmp=tmp_path)
    assert done.returncode == 1, done.stderr
    same(local, remote)


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_stray_objects_and_hostile_keys_are_passed_over_with_a_reason(bucket, tmp_path):
    import boto3
    from concurrent.futures import ThreadPoolExecutor

    client = boto3.client("s3", endpoint_url=bucket.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket.make_bucket("stray")
    bucket.upload(FIXTURES / "skip_goes_on", "stray", "job")
    with ThreadPoolExecutor(16) as pool:  # 20,000 objects that are no dumps: checkpoints, logs
        list(pool.map(lambda i: client.put_object(Bucket="stray", Key=f"job/ckpt/shard-{i}.pt.part", Body=b"x"),
                      range(20_000)))
    for key in ("job/../../etc/trace_host-node00_9", "job//trace_host-node00_8", "job/.hidden/trace_host-node00_7"):
        client.put_object(Bucket="stray", Key=key, Body=(FIXTURES / "skip_goes_on" / "trace_host-node00_1").read_bytes())
    started = time.monotonic()
    done, remote = report("-d", "s3://stray/job", env=bucket.child_env(), tmp=tmp_path)
    took = time.monotonic() - started
    _, local = report("-d", str(FIXTURES / "skip_goes_on"), tmp=tmp_path)
    same(local, remote)
    assert remote["ranks_loaded"] == [0, 1, 2, 3], remote["ranks_loaded"]
    assert not any(Path(p).exists() for p in ("/etc/trace_host-node00_9", ROOT / "trace_host-node00_9"))
    assert took < 120, took


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_an_unreachable_endpoint_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    started = time.monotonic()
    done = frtrace("-d", "s3://dumps/jobs/skip_goes_on", env=env)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("frtrace: s3://dumps/jobs/skip_goes_on: cannot list it ("), lines
    assert time.monotonic() - started < 90


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_a_missing_protocol_package_is_named(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401
        pytest.skip("gcsfs is installed here")
    except ImportError:
        pass
    done = frtrace("-d", "gs://bucket/dumps")
    assert done.returncode == 2
    assert done.stderr.strip() == ("frtrace: gs://bucket/dumps: reading gs:// needs gcsfs, which is not installed: "
                                   "pip install gcsfs")


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_a_prefix_with_no_object_says_so(bucket):
    done = frtrace("-d", "s3://dumps/jobs/no_such_job", env=bucket.child_env())
    assert done.returncode == 2
    assert "s3://dumps/jobs/no_such_job: nothing there; check the URL" in done.stderr


def test_an_object_over_the_cap_is_refused_by_its_listed_size_before_any_byte_is_fetched(s3_env, bucket, monkeypatch):  # noqa: F811
    import s3fs

    from frtrace.reading import remote

    fetched = []
    real = s3fs.S3FileSystem.cat_ranges

    def counting(self, paths, *args, **kwargs):
        fetched.extend(paths)
        return real(self, paths, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "cat_ranges", counting)
    dump = FIXTURES / "skip_goes_on" / "trace_host-node01_2"  # the pickle (8 kB); the other ranks' JSON (6 kB)
    size = dump.stat().st_size
    monkeypatch.setattr(remote, "MAX_DUMP_BYTES", size - 1)
    for one in [dump, *(FIXTURES / "skip_goes_on").glob("trace_*[013].json")]:  # no JSON twin to stand in for it
        bucket.put(f"dumps/pickles/{one.name}", one.read_bytes())
    found = remote.find_remote_dumps("s3://dumps/pickles")
    said = {f.path.rsplit("/", 1)[-1]: why for f, why in found.unread}
    said |= {s.path.rsplit("/", 1)[-1]: s.reason for s in (*found.skipped, *found.ignored)}
    assert "more than the" in said.get(dump.name, ""), found
    assert not any(p.endswith(dump.name) for p in fetched) and dump.name not in [f.path.rsplit("/", 1)[-1] for f in found.files]
    assert fetched, "the other ranks' first bytes are read"


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_an_archive_in_the_store_is_read_member_by_member(bucket, tmp_path):
    import tarfile
    import zipfile

    with tarfile.open(tmp_path / "set.tar.gz", "w:gz") as archive:
        archive.add(FIXTURES / "skip_rank2", arcname="skip_rank2")
    with zipfile.ZipFile(tmp_path / "set.zip", "w") as archive:
        for dump in (FIXTURES / "skip_rank2").iterdir():
            archive.write(dump, f"node/{dump.name}")
    _, local = report("-d", str(FIXTURES / "skip_rank2"), tmp=tmp_path)
    for name in ("set.tar.gz", "set.zip"):
        bucket.put(f"dumps/archives/{name}", (tmp_path / name).read_bytes())
        done, remote = report("-d", f"s3://dumps/archives/{name}", env=bucket.child_env(), tmp=tmp_path)
        assert done.returncode == 1, done.stderr
        assert (remote["verdict"], remote["culprit_ranks"], remote["headline"]) == \
               (local["verdict"], local["culprit_ranks"], local["headline"])


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_outputs_written_to_the_store_are_whole_and_the_ones_written_here(bucket, tmp_path):
    import pickle

    env = bucket.child_env()
    done = frtrace("-d", "s3://dumps/jobs/skip_goes_on", "-o", "s3://dumps/out/db.pkl", "--json", "s3://dumps/out/r.json",
                   "--markdown", str(tmp_path / "r.md"), env=env)
    assert done.returncode == 1, done.stderr
    assert "frtrace: wrote s3://dumps/out/db.pkl (" in done.stderr and (tmp_path / "r.md").exists()
    _, local = report("-d", str(FIXTURES / "skip_goes_on"), tmp=tmp_path)
    written = json.loads(bucket.client.get_object(Bucket="dumps", Key="out/r.json")["Body"].read())
    assert written["headline"] == local["headline"] and written["culprit_ranks"] == [1]
    types, db = pickle.loads(bucket.client.get_object(Bucket="dumps", Key="out/db.pkl")["Body"].read())
    assert {r for f in db.findings if f.root_cause for r in f.ranks} == {1}


@pytest.mark.parametrize("output, said", [
    ("s3://dumps/jobs/skip_goes_on/trace_host-node00_0", "frtrace never writes over its input"),
    ("http://127.0.0.1:9/report.json", "frtrace cannot write over HTTP"),
])
@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_an_output_url_that_cannot_be_right_is_refused_before_anything_is_read(bucket, output, said):
    before = bucket.client.get_object(Bucket="dumps", Key="jobs/skip_goes_on/trace_host-node00_0")["Body"].read()
    done = frtrace("-d", "s3://dumps/jobs/skip_goes_on", "--json", output, env=bucket.child_env())
    assert done.returncode == 2 and said in done.stderr and done.stdout == "", done.stderr
    assert bucket.client.get_object(Bucket="dumps", Key="jobs/skip_goes_on/trace_host-node00_0")["Body"].read() == before
    assert not (ROOT / "s3:").exists() and not (ROOT / "http:").exists()


def test_an_output_whose_upload_fails_midway_leaves_no_object(s3_env, bucket, monkeypatch, capsys):  # noqa: F811
    import shutil as shutil_module

    from frtrace.cli import main

    real = shutil_module.copyfileobj

    def fails_after_a_part(source, target, length=0):
        target.write(source.read(1000))
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr("frtrace.outputs.commit.shutil.copyfileobj", fails_after_a_part)
    code = main(["-d", str(FIXTURES / "skip_goes_on"), "--json", "s3://dumps/half/r.json", "--jobs", "1"])
    monkeypatch.setattr("frtrace.outputs.commit.shutil.copyfileobj", real)
    err = capsys.readouterr().err
    assert code == 2 and "cannot write the JSON report" in err and "no output file was written or changed" in err, err
    listed = bucket.client.list_objects_v2(Bucket="dumps", Prefix="half/").get("Contents", [])
    assert listed == []


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_refused_credentials_are_one_line_naming_the_url(s3_server_checking_keys, tmp_path):  # noqa: F811
    server = s3_server_checking_keys
    server.upload(FIXTURES / "skip_goes_on", "keyed", "job")
    right = frtrace("-d", "s3://keyed/job", env=server.child_env())
    assert right.returncode == 1 and right.stdout.startswith("DESYNC: rank 1 never joined"), right.stderr
    wrong = frtrace("-d", "s3://keyed/job", env=server.child_env(AWS_SECRET_ACCESS_KEY="not-the-secret"))
    assert wrong.returncode == 2 and wrong.stdout == ""
    (line,) = wrong.stderr.strip().splitlines()
    assert line.startswith("frtrace: s3://keyed/job: the store refused to list it (") and "check the credentials" in line, line


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_a_live_snapshot_kept_in_a_store_reads_as_the_folder(bucket, tmp_path):
    """frtrace live's folder (its manifest lists a rank that did not answer) copied to a store: the
    silent rank is said as one that did not answer, as from the folder."""
    snapshot = tmp_path / "snap"
    (snapshot / "stacks").mkdir(parents=True)
    for rank in (0, 1, 3):
        shutil.copy(FIXTURES / "skip_rank2" / f"nccl_trace_rank_{rank}", snapshot / f"trace_rank_{rank}.json")
    manifest = {"taken_at": 0.0, "ranks": [{"rank": r, "url": f"http://node:{r}", "seconds": 0.1, "answered": r != 2,
                                            **({"error": "no answer in time"} if r == 2 else {"recorder": "fr_trace_json"})}
                                           for r in range(4)]}
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    bucket.upload(snapshot, "dumps", "live/snap")
    done, remote = report("-d", "s3://dumps/live/snap", env=bucket.child_env(), tmp=tmp_path)
    _, local = report("-d", str(snapshot), tmp=tmp_path)
    assert (remote["verdict"], remote["culprit_ranks"], remote["headline"]) == \
           (local["verdict"], local["culprit_ranks"], local["headline"])
    assert "did not answer" in remote["headline"], remote["headline"]


def test_a_prefix_past_the_cap_is_listed_a_page_at_a_time_and_no_further(s3_env, bucket, monkeypatch):  # noqa: F811
    """5,000 objects under a cap of 1,500: two pages of 1,000 keys are asked for, not five, and the
    cut is said."""
    from concurrent.futures import ThreadPoolExecutor

    import s3fs

    from frtrace.reading import remote

    bucket.make_bucket("paged")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: bucket.client.put_object(Bucket="paged", Key=f"job/log-{i:05d}.txt", Body=b"x"), range(5000)))
    pages = []
    real = s3fs.S3FileSystem._list_pages

    async def counted(self, *args, **kwargs):
        async for page in real(self, *args, **kwargs):
            pages.append(len(page.get("Contents", [])))
            yield page

    monkeypatch.setattr(s3fs.S3FileSystem, "_list_pages", counted)
    monkeypatch.setattr(remote, "MAX_LISTED", 1500)
    found = remote.find_remote_dumps("s3://paged/job")
    assert [s.reason for s in found.skipped] == ["more than 1500 objects; the rest was not read"], found.skipped
    assert len(pages) == 2, pages


@pytest.mark.process  # starts frtrace as a process: never sees a mutant (conftest.py)
def test_a_store_that_never_answers_is_given_up_within_the_timeout_given(tmp_path):
    """A server that takes the connection and says nothing: --timeout 2 gives up in two tries of 2 s."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    held = []
    threading.Thread(target=lambda: [held.append(listener.accept()) for _ in range(8)], daemon=True).start()
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{listener.getsockname()[1]}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    started = time.monotonic()
    done = frtrace("-d", "s3://dumps/jobs/skip_goes_on", "--timeout", "2", env=env)
    took = time.monotonic() - started
    listener.close()
    assert done.returncode == 2 and "cannot list it (" in done.stderr, done.stderr
    assert took < 20, took
    assert frtrace("-d", "s3://dumps/x", "--timeout", "0").returncode == 2


def test_an_object_served_over_http_is_read_whole_not_as_far_as_the_first_packet(http_server):  # noqa: F811
    """A streamed HTTP file's read gives what has arrived: a 3 MiB stack file came back as 64 KiB."""
    from frtrace.reading import remote

    data = os.urandom(3 << 20)
    (http_server.root / "rank_0.txt").write_bytes(data)
    assert remote.read_small_object(http_server.url_of("rank_0.txt"), 4 << 20) == data
    with pytest.raises(ValueError, match="over 2 MiB"):
        remote.read_small_object(http_server.url_of("rank_0.txt"), 2 << 20)
