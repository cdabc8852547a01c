"""Servers on loopback for the tests of reading dumps where they lie (object storage, HTTP).

- An S3 protocol server: moto's server mode (`pip install "moto[server]" s3fs`), started as a process
  of its own on a free port of 127.0.0.1 and ended by its pid (on Linux it also gets SIGTERM if the
  starting thread dies first). The tests' own process fills it through boto3 (a dependency of moto);
  a child `frtrace` process finds it through the variables in `S3Server.env`, which are botocore's
  own (`AWS_ENDPOINT_URL`, ...), so nothing of frtrace needs to know about endpoints or credentials.
  moto accepts any key and any signature; `start_s3_server_checking_keys` gives one that refuses.
- An HTTP server: `http.server`'s ThreadingHTTPServer in a thread, serving one folder with
  SimpleHTTPRequestHandler (directory pages included, which fsspec's HTTP filesystem lists).

Limits met with these servers (fsspec/s3fs 2026.9.0, moto 5.2.5, aiohttp 3.14.5, Python 3.11):
- moto's listing and error answers carry two `Server` headers; aiohttp in debug mode (`python -X dev`
  or PYTHONASYNCIODEBUG=1) refuses them ("Duplicate 'Server' header found"), so run these tests
  without it.
- SimpleHTTPRequestHandler ignores `Range`: fsspec's HTTP files must be read from the start
  (`block_size=0` streams), and `cat_file(url, start, end)` returns the WHOLE file.

Plain helpers (`start_s3_server`, `start_s3_server_checking_keys`, `serve_folder`, `free_port`) and
pytest fixtures (`s3_server` and `s3_server_checking_keys`, session-wide; `s3_env`, which also puts
the server's variables into this process's environment; `http_server`). Import them from a test
module: `from remote_servers import s3_server, s3_env` (pytest finds fixtures imported into a module).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Dummy credentials: moto accepts any; real ones must never be needed by a test.
DUMMY_KEY = "testing"
DUMMY_SECRET = "testing"
REGION = "us-east-1"  # the one region where CreateBucket needs no LocationConstraint


def free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago (the caller retries if it was taken meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answers(url: str, timeout: float = 30.0, process: subprocess.Popen | None = None) -> None:
    """Poll `url` until it answers an HTTP request (any status); raise TimeoutError if it never does,
    RuntimeError at once if `process` (the server) has exited."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # an HTTP answer, even 4xx/5xx: the server is up
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout} s") from None
            time.sleep(0.05)


def _split(key: str) -> tuple[str, str]:
    """'s3://bucket/a/b' or 'bucket/a/b' -> ('bucket', 'a/b')."""
    bare = key.removeprefix("s3://").lstrip("/")
    bucket, _, rest = bare.partition("/")
    if not bucket or not rest:
        raise ValueError(f"{key!r} names no key inside a bucket")
    return bucket, rest


@dataclass
class S3Server:
    """A running moto S3 server: `endpoint` (http://127.0.0.1:PORT), `pid`, `env` (the variables a child
    process needs to reach it), `client` (a boto3 S3 client bound to it), and ways to fill it."""

    endpoint: str
    process: subprocess.Popen
    log: Path
    client: object = field(repr=False)
    key: str = DUMMY_KEY
    secret: str = field(default=DUMMY_SECRET, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def env(self) -> dict[str, str]:
        """botocore's own variables: s3fs (through aiobotocore) and boto3 pick them up unasked."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",  # never wait on the instance metadata service
        }

    def child_env(self, **extra: str) -> dict[str, str]:
        """os.environ plus `env` plus `extra`: the environment for a child `frtrace` process."""
        return {**os.environ, **self.env, **extra}

    def make_bucket(self, bucket: str) -> None:
        """Create `bucket` unless it exists (moto keeps buckets for the server's whole life)."""
        try:
            self.client.create_bucket(Bucket=bucket)
        except self.client.exceptions.BucketAlreadyOwnedByYou:
            pass

    def put(self, key: str, data: bytes) -> str:
        """Write one object; `key` is 'bucket/path' or 's3://bucket/path'. Returns its s3:// URL."""
        bucket, name = _split(key)
        self.make_bucket(bucket)
        self.client.put_object(Bucket=bucket, Key=name, Body=data)
        return f"s3://{bucket}/{name}"

    def upload(self, local_folder: str | os.PathLike, bucket: str, prefix: str = "") -> list[str]:
        """Copy every file under `local_folder` to `bucket`, each key `prefix/relative/path` (posix
        separators). Returns the s3:// URLs written, sorted."""
        root = Path(local_folder)
        if not root.is_dir():
            raise NotADirectoryError(root)
        self.make_bucket(bucket)
        stem = prefix.strip("/")
        written = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = path.relative_to(root).as_posix()
            name = f"{stem}/{relative}" if stem else relative
            self.client.put_object(Bucket=bucket, Key=name, Body=path.read_bytes())
            written.append(f"s3://{bucket}/{name}")
        return written

    def reset(self) -> None:
        """Forget every bucket and object (moto's own reset call)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        """End the server by its pid: SIGTERM, then SIGKILL if it lingers; remove its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.unlink(missing_ok=True)


def _death_signal_setter() -> Callable[[], None] | None:
    """On Linux, a function for the server process to call before exec: be sent SIGTERM when the
    thread that started it dies, so a test run killed by a timeout leaves no server behind. prctl is
    looked up here, in the parent, so the child between fork and exec only makes the call."""
    if sys.platform != "linux":
        return None
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def start_s3_server(attempts: int = 3, timeout: float = 60.0, server_env: dict[str, str] | None = None) -> S3Server:
    """Start `python -m moto.server` on a free port of 127.0.0.1 (its own process and session) and wait
    until it answers. The port is found free, then bound by moto: on the rare clash, another port.
    `server_env`: extra variables for the server process, e.g. {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    to make moto check access keys against its IAM users (by default it accepts any key, any signature)."""
    import boto3  # moto's dependency

    log = Path(tempfile.mkstemp(prefix="moto-server-", suffix=".log")[1])
    for attempt in range(attempts):
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        with log.open("ab") as sink:
            process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                       stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                       env={**os.environ, **(server_env or {})}, start_new_session=True,
                                       preexec_fn=_death_signal_setter())  # only a prctl call: fork-safe
        try:
            wait_until_answers(f"{endpoint}/moto-api/", timeout=timeout, process=process)
        except (RuntimeError, TimeoutError) as error:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
            if attempt + 1 == attempts:
                raise RuntimeError(f"moto server did not start: {error}\n{log.read_text(errors='replace')[-2000:]}")
            continue
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=DUMMY_KEY,
                              aws_secret_access_key=DUMMY_SECRET, region_name=REGION)
        return S3Server(endpoint=endpoint, process=process, log=log, client=client)
    raise AssertionError("unreachable")


def start_s3_server_checking_keys(**kwargs) -> S3Server:
    """A moto server that refuses unknown access keys and wrong secrets (moto's IAM checks, on after the
    first three requests, which make one user allowed s3:* and its key). The returned server's `key`,
    `secret`, `env` and `client` carry that user's real key."""
    import boto3

    server = start_s3_server(server_env={"INITIAL_NO_AUTH_ACTION_COUNT": "3"}, **kwargs)
    try:
        iam = boto3.client("iam", endpoint_url=server.endpoint, aws_access_key_id=DUMMY_KEY,
                           aws_secret_access_key=DUMMY_SECRET, region_name=REGION)
        iam.create_user(UserName="frtrace-tests")
        made = iam.create_access_key(UserName="frtrace-tests")["AccessKey"]
        iam.put_user_policy(UserName="frtrace-tests", PolicyName="s3-all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    except BaseException:
        server.stop()
        raise
    server.key, server.secret = made["AccessKeyId"], made["SecretAccessKey"]
    server.client = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=server.key,
                                 aws_secret_access_key=server.secret, region_name=REGION)
    return server


def _require_s3() -> None:
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install s3fs): no s3:// tests")
    pytest.importorskip("boto3", reason="boto3 is not installed (it comes with moto): no s3:// tests")
    pytest.importorskip("moto.server", reason='moto\'s server mode is not installed (pip install "moto[server]")')


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the whole session (it starts in about a second or two). Buckets outlive a
    test: give each test its own bucket name, or call `reset()`."""
    _require_s3()
    server = start_s3_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server_checking_keys() -> Iterator[S3Server]:
    """A second moto server, for the session, that refuses unknown keys and wrong secrets; its `env`
    holds the one key it accepts (see start_s3_server_checking_keys)."""
    _require_s3()
    server = start_s3_server_checking_keys()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> Iterator[S3Server]:
    """The session's S3 server, with its variables set in this process's environment for the test
    (so `fsspec.filesystem("s3")` reaches it) and fsspec's cache of S3 filesystems emptied before and
    after (a cached instance keeps the endpoint it was made with)."""
    import s3fs

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_server
    s3fs.S3FileSystem.clear_instance_cache()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@dataclass
class HttpServer:
    """A folder served over HTTP: `root` (the folder; add files any time), `url` (http://127.0.0.1:PORT)."""

    root: Path
    url: str

    def url_of(self, relative: str) -> str:
        return f"{self.url}/{relative.lstrip('/')}"


@contextlib.contextmanager
def serve_folder(folder: str | os.PathLike) -> Iterator[HttpServer]:
    """Serve `folder` on a free port of 127.0.0.1 from a thread of this process until the block ends."""
    root = Path(folder)
    handler: Callable = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="http-server", daemon=True)
    thread.start()
    try:
        yield HttpServer(root=root, url=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def http_server(tmp_path) -> Iterator[HttpServer]:
    """An empty folder (`root`, under the test's tmp_path) served over HTTP at `url` for the test."""
    root = tmp_path / "served"
    root.mkdir()
    with serve_folder(root) as server:
        yield server
