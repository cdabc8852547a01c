"""The loopback servers of tests/remote_servers.py work through fsspec, as frtrace will use them: an S3
protocol server (moto) found through botocore's environment variables, and a folder served over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from remote_servers import http_server, s3_env, s3_server, s3_server_checking_keys  # noqa: F401 - fixtures

fsspec = pytest.importorskip("fsspec", reason="fsspec is not installed (pip install fsspec)")

# Nothing of frtrace runs here, so the mutation run (which leaves out `process` tests) has nothing to
# learn from these; and each of them talks to a server in another process or thread.
pytestmark = pytest.mark.process

FILES = {
    "nccl_trace_rank_0": b"rank zero\n" * 3,
    "nccl_trace_rank_1": b"one",
    "host-b/nccl_trace_rank_2": bytes(range(256)) * 4,
}


def _folder(root):
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_s3_upload_lists_with_sizes_and_reads_back(s3_env, tmp_path):
    urls = s3_env.upload(_folder(tmp_path / "job"), "fixture-upload", "runs/7/dumps")
    assert urls == sorted(f"s3://fixture-upload/runs/7/dumps/{name}" for name in FILES)

    fs, path = fsspec.core.url_to_fs("s3://fixture-upload/runs/7/dumps")  # endpoint from the environment only
    assert path == "fixture-upload/runs/7/dumps"
    listed = fs.find(path, detail=True)
    assert {name: info["size"] for name, info in listed.items()} == {
        f"{path}/{name}": len(data) for name, data in FILES.items()}
    assert fs.cat_file(f"{path}/host-b/nccl_trace_rank_2") == FILES["host-b/nccl_trace_rank_2"]
    assert fs.cat_file(f"{path}/nccl_trace_rank_0", start=5, end=9) == b"zero"


def test_s3_put_reaches_a_child_process_through_env_alone(s3_server):
    url = s3_server.put("fixture-put/a/b/nccl_trace_rank_9", b"\x80\x02}q\x00.")
    assert url == "s3://fixture-put/a/b/nccl_trace_rank_9"
    script = ("import fsspec, json, sys; fs, p = fsspec.core.url_to_fs(sys.argv[1]); "
              "print(json.dumps([fs.info(p)['size'], fs.cat_file(p).hex()]))")
    done = subprocess.run([sys.executable, "-c", script, url], env=s3_server.child_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [6, "80027d71002e"]


def test_s3_server_refuses_unknown_buckets(s3_env):
    fs = fsspec.filesystem("s3")
    with pytest.raises(FileNotFoundError):
        fs.cat_file("no-such-bucket-here/key")


def test_s3_server_checking_keys_refuses_a_wrong_secret_and_an_unknown_key(s3_server_checking_keys):
    server = s3_server_checking_keys
    url = server.put("fixture-keys/nccl_trace_rank_0", b"guarded")
    fs = fsspec.filesystem("s3", endpoint_url=server.endpoint, key=server.key, secret=server.secret,
                           skip_instance_cache=True)
    assert fs.cat_file(url) == b"guarded"
    for key, secret in ((server.key, "not-the-secret"), ("AKIAUNKNOWN", server.secret)):
        refused = fsspec.filesystem("s3", endpoint_url=server.endpoint, key=key, secret=secret,
                                    skip_instance_cache=True)
        with pytest.raises(PermissionError):
            refused.ls("fixture-keys")


def test_http_lists_the_served_folder_and_reads_back(http_server):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP filesystem needs aiohttp")
    _folder(http_server.root)
    fs, path = fsspec.core.url_to_fs(http_server.url + "/")
    assert path == http_server.url + "/"
    listed = fs.ls(path, detail=True)
    assert sorted((info["name"], info["type"]) for info in listed) == [
        (http_server.url_of("host-b/"), "directory"),
        (http_server.url_of("nccl_trace_rank_0"), "file"),
        (http_server.url_of("nccl_trace_rank_1"), "file"),
    ]
    found = fs.find(path)
    assert sorted(found) == sorted(http_server.url_of(name) for name in FILES)
    assert {url: fs.info(url)["size"] for url in found} == {http_server.url_of(n): len(d) for n, d in FILES.items()}
    assert fs.cat_file(http_server.url_of("host-b/nccl_trace_rank_2")) == FILES["host-b/nccl_trace_rank_2"]
