"""frtrace live: every rank's recorder and stacks fetched from debug-server workers at once, kept
as a snapshot folder, analysed like a dump set. Workers are faked by small HTTP servers serving
real gloo JSON dumps (fixtures/healthy_json, skip_goes_on), and one real gloo job with PyTorch's
debug server on is read while it hangs."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES
from frtrace.replay.runner import unused_port
from frtrace.outputs.report import schema_text
from frtrace.cli import main
from frtrace.errors import UsageError
from frtrace.live import fetch

STACK = b'Thread 0x00007f (most recent call first):\n  File "train.py", line 88 in load_batch\n'


NCCL = "/handler/dump_nccl_trace_json?includecollectives=true&onlyactive=false"


def _worker(trace: bytes | list[bytes], stacks: bytes = STACK, *, status: int = 200, delay: float = 0.0,
            location: str | None = None, nccl: bytes | None = None):
    """A debug-server worker on loopback that answers the handlers frtrace asks for (a list of
    traces: one after the other, the last one from then on); without `nccl`, as a CPU build does,
    HTTP 404 for the NCCL recorder."""
    traces = list(trace) if isinstance(trace, list) else [trace]

    class Handler(http.server.BaseHTTPRequestHandler):
        asked: list[str] = []

        def do_POST(self):
            Handler.asked.append(self.path)
            time.sleep(delay)
            if self.path == NCCL:
                body = nccl
            elif self.path == "/handler/fr_trace_json":
                body = traces.pop(0) if len(traces) > 1 else traces[0]
            else:
                body = {"/handler/dump_traceback": stacks}.get(self.path)
            self.send_response(404 if body is None else status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.handle_error = lambda request, address: None  # a client that hung up on a too big answer
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.asked = Handler.asked
    return server


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nobody listens once it is closed


def test_a_hanging_set_is_fetched_kept_and_analysed_like_its_files(tmp_path, capsys):
    folder = FIXTURES / "skip_goes_on"
    servers = [_worker((folder / f"trace_host-node{r // 2:02d}_{r}.json").read_bytes()) for r in range(4)]
    out = tmp_path / "snap"

    code = main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0"])

    live = capsys.readouterr()
    assert code == 1
    assert main(["-d", str(folder)]) == 1
    from_files = capsys.readouterr().out.splitlines()[0]
    assert live.out.splitlines()[0] == from_files  # the same verdict as the files the workers served
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "stacks", *(f"trace_rank_{r}.json" for r in range(4))]
    assert (out / "stacks" / "rank_3.txt").read_bytes() == STACK
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["answered"] for r in manifest["ranks"]] == [True] * 4
    assert all(s.asked == ["/handler/fr_trace_json", "/handler/dump_traceback", NCCL] for s in servers)  # only what it needs
    assert main(["-d", str(out)]) == 1 and capsys.readouterr().out.splitlines()[0] == from_files


EMPTY_RECORDER = b'{"comm_lib_version":"","nccl_comm_state":{},"pg_config":{},"pg_status":{},"version":"2.10"}'  # 2.15, measured


def _as_json(path: Path) -> bytes:
    import pickle

    return json.dumps(pickle.loads(path.read_bytes())).encode()


def test_a_gpu_job_s_nccl_recorder_is_its_dump_and_gloo_s_is_kept_beside_it(tmp_path, capsys):
    """CUDA builds keep NCCL's ops in a recorder of their own (dump_nccl_trace_json); ranks 0-3 also
    ran gloo groups, whose ops are in the backend-neutral one (fr_trace_json): never mixed in."""
    gpu, cpu = FIXTURES / "synthetic_gpu_never_reached_rank3", FIXTURES / "healthy_json"
    servers = [_worker((cpu / f"comm_lib_trace_rank_{r}.json").read_bytes() if r < 4 else EMPTY_RECORDER,
                       nccl=_as_json(gpu / f"nccl_trace_rank_{r}")) for r in range(8)]
    out = tmp_path / "snap"
    assert main(["-d", str(gpu)]) == 1
    from_files = capsys.readouterr().out.splitlines()[0]

    assert main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0"]) == 1

    live = capsys.readouterr()
    assert live.out.splitlines()[0] == from_files, live.out
    assert "ranks 0-3: the dumps are the NCCL recorders" in live.err and "fr_trace_json" in live.err
    ranks = json.loads((out / "manifest.json").read_text())["ranks"]
    assert {r["recorder"] for r in ranks} == {"dump_nccl_trace_json"}
    assert [r["rank"] for r in ranks if "other_recorder" in r] == [0, 1, 2, 3]
    assert main(["-d", str(out)]) == 1 and capsys.readouterr().out.splitlines()[0] == from_files
    assert main(["-d", str(out / "fr_trace_json")]) == 0  # gloo's own ops: a healthy set of its own


def test_a_gloo_job_on_a_cuda_build_keeps_its_backend_neutral_recorder(tmp_path, capsys):
    """A CUDA build answers the NCCL handler with an empty recorder where the job runs gloo."""
    folder = FIXTURES / "skip_goes_on"
    servers = [_worker((folder / f"trace_host-node{r // 2:02d}_{r}.json").read_bytes(), nccl=EMPTY_RECORDER)
               for r in range(4)]
    out = tmp_path / "snap"
    assert main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0"]) == 1
    assert capsys.readouterr().out.startswith("DESYNC: rank 1 never joined")
    assert {r["recorder"] for r in json.loads((out / "manifest.json").read_text())["ranks"]} == {"fr_trace_json"}
    assert not (out / "fr_trace_json").exists()


def _pair(name: str) -> list[list[bytes]]:
    """Each rank's dumps of fixtures/pairs/NAME (a, then b) as the JSON a worker answers with."""
    folder = FIXTURES / "pairs" / name
    return [[_as_json(folder / half / f"nccl_trace_rank_{r}") for half in "ab"] for r in range(4)]


@pytest.mark.parametrize("name,code,first", [
    ("twice_healthy", 0, "PROGRESSING: all 4 ranks moved between A and B"),
    ("twice_hang_rank2", 1, "DESYNC: rank 2 never joined"),
], ids=["moving", "stuck"])
def test_two_snapshots_tell_a_moving_job_from_a_stuck_one(name, code, first, tmp_path, capsys):
    servers = [_worker(traces) for traces in _pair(name)]
    out = tmp_path / "snap"

    report = tmp_path / "report.json"
    assert main(["live", "--workers", *map(_url, servers), "-O", str(out), "--interval", "0.2", "--json", str(report)]) == code

    said = capsys.readouterr()
    assert said.out.startswith(first), said.out
    assert ("Between the two snapshots: " in said.out) == (code == 1)
    payload = json.loads(report.read_text())
    jsonschema.validate(payload, json.loads(schema_text("report")))  # the report's schema, with its "live" part
    jsonschema.validate(payload["live"]["comparison"], json.loads(schema_text("compare")))
    live = payload["live"]  # what the text says, for scripts
    assert live["comparison"]["verdict"] == ("progressing" if code == 0 else "stuck")
    assert live["now"] == ([] if code == 0 else [{"rank": 2, "where": "at train.py:88 in load_batch"}])
    assert live["silent"] == [] and live["snapshot"] == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"] and "frtrace compare" in said.err
    assert main(["compare", str(out / "a"), str(out / "b")]) == code


def test_a_rank_that_does_not_answer_is_said_and_counted_as_a_rank_without_a_dump(tmp_path, capsys):
    folder = FIXTURES / "skip_rank2"
    import pickle

    dumps = {r: json.dumps(pickle.loads((folder / f"nccl_trace_rank_{r}").read_bytes())).encode() for r in (0, 1, 3)}
    urls = [_url(_worker(dumps[0])), _url(_worker(dumps[1])), f"http://127.0.0.1:{_closed_port()}", _url(_worker(dumps[3]))]

    code = main(["live", "--workers", *urls, "-O", str(tmp_path / "snap"), "--timeout", "3", "--interval", "0"])

    said = capsys.readouterr()
    assert code == 1
    assert said.out.startswith("DESYNC: rank 2 did not answer when frtrace live asked (the process may be gone or its host "
                               "unreachable) and ranks 0-1,3 wait for it in all_reduce #10 of default_pg"), said.out
    assert f"frtrace: rank 2 ({urls[2]}) did not answer: [Errno 111] Connection refused" in said.err  # not "within 3 s"
    assert "snapshot of 3 of 4 ranks kept in" in said.err
    assert not (tmp_path / "snap" / "trace_rank_2.json").exists()
    # read again later, the folder says the same: its manifest names the rank that did not answer
    assert main(["-d", str(tmp_path / "snap"), "-v"]) == 1
    again = capsys.readouterr()
    assert again.out.splitlines()[0] == said.out.splitlines()[0]
    assert "rank 2 did not answer frtrace live (" in again.err and "manifest.json" not in again.out + again.err
    assert "stacks" not in again.out + again.err


@pytest.mark.parametrize("manifest", [b"not json", b'{"ranks": [{"rank": "2", "answered": false}]}', b'{"ranks": 7}',
                                      b'[' * 100_000, b'{"ranks": [{"rank": 2, "answered": false, "error": "\\u001b[31m"}]}'],
                         ids=["garbage", "rank-as-text", "not-a-list", "deep", "escape"])
def test_a_manifest_that_is_not_one_changes_nothing_and_its_text_is_escaped(manifest, dump_dir, capsys):
    from conftest import make_dump, ops

    folder = dump_dir({r: make_dump(ops(3)) for r in range(2)}, fmt="json", prefix="trace_rank_")  # live's names
    (folder / "manifest.json").write_bytes(manifest)
    code = main(["-d", str(folder), "-v"])
    said = capsys.readouterr()
    assert "\x1b" not in said.out + said.err
    if manifest.startswith(b'{"ranks": [{"rank": 2,'):  # a real manifest's shape: rank 2 is of the job, unread
        assert code == 0 or "rank 2" in said.out + said.err
        assert "\\x1b[31m" in said.err
    else:
        assert code == 0 and "manifest.json: ignored" in said.out


def test_a_slow_rank_times_out_and_the_others_are_not_held_up(tmp_path, capsys):
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    answers = fetch.fetch_all({0: _url(_worker(trace)), 1: _url(_worker(trace, delay=3))}, timeout=0.5)
    assert answers[0].error is None and answers[0].trace == trace
    assert answers[1].error == "no answer in time" and answers[1].seconds < 2


@pytest.mark.parametrize("server,reason", [
    (lambda: _worker(b"{}", status=302, location="http://127.0.0.1:1/"), "redirected (HTTP 302); refused"),
    (lambda: _worker(b"x" * (fetch.MAX_STACKS_BYTES + 1), stacks=b"x" * (fetch.MAX_STACKS_BYTES + 1)), "over 4 MiB"),
    (lambda: _worker(b"{}", status=500), "HTTP 500"),
], ids=["redirect", "oversized", "server-error"])
def test_an_answer_that_is_not_a_plain_bounded_reply_is_refused(server, reason, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_TRACE_BYTES", fetch.MAX_STACKS_BYTES)
    (answer,) = fetch.fetch_all({0: _url(server())}, timeout=5)
    assert answer.trace is None and reason in answer.error


def test_the_snapshot_is_a_new_folder_never_written_into(tmp_path, capsys):
    taken = tmp_path / "snap"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    assert main(["live", "--workers", _url(_worker(trace)), "-O", str(taken), "--interval", "0"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["notes.txt"] and len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("text", ["https://host:1", "host", "http://host:1/handler/x", "http://host:99999", "file:///etc/passwd",
                                  "http://[::1:5", "node[3:29600"])  # an unclosed '[' was a ValueError from urllib
def test_a_worker_address_is_http_host_port_or_a_usage_error(text):
    with pytest.raises(UsageError, match="not a debug-server worker address"):
        fetch.worker_url(text)
    assert fetch.worker_url("node7:29500") == "http://node7:29500"


def test_the_workers_can_come_from_a_file_one_per_line(tmp_path, capsys):
    folder = FIXTURES / "skip_goes_on"
    urls = [_url(_worker((folder / f"trace_host-node{r // 2:02d}_{r}.json").read_bytes())) for r in range(4)]
    listed = tmp_path / "workers.txt"
    listed.write_text(f"# job 42\n{urls[0]}\n\n{urls[1]}  # node 0\n" + "\n".join(urls[2:]) + "\n")
    assert main(["live", "--workers-file", str(listed), "-O", str(tmp_path / "s"), "--interval", "0"]) == 1
    assert capsys.readouterr().out.startswith("DESYNC: rank 1 never joined")
    assert [r["url"] for r in json.loads((tmp_path / "s" / "manifest.json").read_text())["ranks"]] == urls


@pytest.mark.parametrize("content,said", [
    ("# nothing\n\n", "holds no address"),
    ("http://127.0.0.1:1\nnot an address\n", "not a debug-server worker address"),
    (None, "not a regular file"),  # a FIFO: never waited on
    ("missing", "cannot open it"),
])
def test_a_workers_file_that_cannot_serve_is_a_usage_error(content, said, tmp_path, capsys):
    listed = tmp_path / "workers.txt"
    if content is None:
        os.mkfifo(listed)
    elif content != "missing":
        listed.write_text(content)
    assert main(["live", "--workers-file", str(listed), "-O", str(tmp_path / "s")]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "s").exists()


def test_no_rank_answering_is_a_connection_error(tmp_path, capsys):
    assert main(["live", "--workers", f"127.0.0.1:{_closed_port()}", "-O", str(tmp_path / "s"), "--timeout", "2",
                 "--interval", "0"]) == 2
    assert "no rank answered" in capsys.readouterr().err


def _real_job(fault: str, world: int):
    """A real gloo job (tests/livejob.py) and its store's port; end it with os.killpg(job.pid, 9)."""
    port = unused_port()
    job = subprocess.Popen([sys.executable, str(Path(__file__).with_name("livejob.py")), fault, str(world), str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return job, port


def _live(port: int, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """frtrace live on the job's store, once every rank has its worker address there."""
    import datetime

    from torch.distributed import PrefixStore, TCPStore

    store = PrefixStore("debug_server", TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60)))
    store.wait([f"rank{r}" for r in range(4)])
    time.sleep(3)  # every rank reaches its last op
    return subprocess.run([sys.executable, "-m", "frtrace", "live", "--store", f"127.0.0.1:{port}", "-O", str(out), *extra],
                          capture_output=True, text=True, timeout=120)


def _live_on_real_job(fault: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """frtrace live on a real 4-rank job (tests/livejob.py FAULT), which is ended after."""
    job, port = _real_job(fault, 4)
    try:
        return _live(port, out, *extra)
    finally:
        os.killpg(job.pid, 9)
        job.wait()


def _resolves_own_name() -> bool:
    try:
        return bool(socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        return False


@pytest.mark.process
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the real job needs torch (pip install 'frtrace[replay]')")
@pytest.mark.skipif(not _resolves_own_name(), reason="the debug server's addresses name this host, which cannot resolve its name")
@pytest.mark.parametrize("fault,now,cause", [
    ("skip", "in _rank, in all_reduce (distributed_c10d.py)", "divergence"),  # blocked in its tp all_reduce
    ("stall", "in _rank", "compute_or_data_stall"),  # in compute: time.sleep has no Python frame
])
def test_a_real_hanging_gloo_job_is_read_live_and_its_culprit_named_with_what_it_is_doing(fault, now, cause, tmp_path):
    """4 gloo ranks with PyTorch's debug server on; rank 2 leaves out the world all_reduce the
    others wait in and goes on to its tp all_reduce (skip), or sleeps before it (stall)."""
    done = _live_on_real_job(fault, tmp_path / "snap")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("DESYNC: rank 2 never joined all_reduce #4 of default_pg"), done.stdout
    assert lines[1].startswith(f"Cause: {cause}: rank 2: "), lines[1]
    assert lines[2].startswith("Now (the ranks' Python stacks): rank 2 at livejob.py:"), lines[2]
    assert lines[2].endswith(now), lines[2]
    assert lines[3].startswith("Between the two snapshots: STUCK: no rank moved between A and B"), lines[3]
    assert "two snapshots 3 s apart kept in" in done.stderr and "(4 of 4 ranks;" in done.stderr
    assert "livejob.py" in (tmp_path / "snap" / "b" / "stacks" / "rank_2.txt").read_text()


@pytest.mark.process
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the real job needs torch (pip install 'frtrace[replay]')")
@pytest.mark.skipif(not _resolves_own_name(), reason="the debug server's addresses name this host, which cannot resolve its name")
def test_a_real_gloo_job_whose_rank_died_names_it_as_the_rank_that_did_not_answer(tmp_path, capsys):
    """Rank 2's process ends (os._exit) before the world all_reduce the others then wait in."""
    done = _live_on_real_job("die", tmp_path / "snap")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("DESYNC: rank 2 did not answer when frtrace live asked (the process may be gone or "
                               "its host unreachable) and ranks 0-1,3 wait for it in all_reduce #4 of default_pg"), done.stdout
    assert lines[1] == ("Cause: process_gone: rank 2: did not answer frtrace live: its process may be gone or its host "
                        "unreachable"), lines[1]
    assert lines[2] == "Now (the ranks' Python stacks): rank 2 did not answer", lines[2]
    assert "frtrace: rank 2 (http://" in done.stderr and "(3 of 4 ranks;" in done.stderr
    assert main(["-d", str(tmp_path / "snap" / "b")]) == 1  # the snapshot read later says the same
    assert capsys.readouterr().out.splitlines()[0] == lines[0]


@pytest.mark.process
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the real job needs torch (pip install 'frtrace[replay]')")
@pytest.mark.skipif(not _resolves_own_name(), reason="the debug server's addresses name this host, which cannot resolve its name")
def test_a_real_healthy_gloo_job_is_progressing(tmp_path):
    done = _live_on_real_job("healthy", tmp_path / "snap", "--interval", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("PROGRESSING: all 4 ranks moved between A and B"), done.stdout


def test_without_torch_the_store_cannot_be_read_and_it_says_how(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.distributed", None)  # import fails as where torch is missing
    assert main(["live", "--store", "127.0.0.1:29500", "-O", str(tmp_path / "s")]) == 2
    said = capsys.readouterr().err
    assert "torch is not installed here" in said and "--workers" in said and not (tmp_path / "s").exists()


@pytest.mark.parametrize("text,said", [
    ('Current thread 0x00007f (most recent call first):\n  <no Python frame>\n\n'
     'Thread 0x00007e (most recent call first):\n'
     '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
     '  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
     '  File "/job/train.py", line 40 in step\n  File "/job/train.py", line 90 in <module>\n',
     "at train.py:40 in step, in all_reduce (distributed_c10d.py)"),
    ('Thread 0x1 (most recent call first):\n  File "/job/data.py", line 88 in load_batch\n', "at data.py:88 in load_batch"),
    ('Thread 0x1 (most recent call first):\n  File "/usr/lib/python3.11/threading.py", line 320 in wait\n', None),
    ('Thread 0x1 (most recent call first):\n  File "/job/\x1b[31mevil.py", line 1 in f\x1b[0m\n',
     "at \\x1b[31mevil.py:1 in f\\x1b[0m"),  # escaped: data never reaches a terminal as is
    ("not a stack at all", None),
], ids=["in-a-collective", "in-compute", "library-only", "escape-in-name", "garbage"])
def test_where_a_rank_is_comes_from_its_own_innermost_frame(text, said):
    from frtrace.reading.stacks import where

    assert where(text) == said


def test_a_manifest_that_is_a_fifo_or_a_link_is_never_opened_for_reading(dump_dir, capsys):
    from conftest import make_dump, ops

    folder = dump_dir({r: make_dump(ops(3)) for r in range(2)}, fmt="json", prefix="trace_rank_")
    os.mkfifo(folder / "manifest.json")  # reading it would wait forever
    assert main(["-d", str(folder)]) == 0
    os.unlink(folder / "manifest.json")
    (folder / "elsewhere.json").write_text('{"ranks": [{"rank": 2, "answered": false}]}')
    os.symlink(folder / "elsewhere.json", folder / "manifest.json")
    assert main(["-d", str(folder)]) == 0 and "rank 2" not in capsys.readouterr().err


def test_the_two_snapshots_compared_later_say_who_did_not_answer(tmp_path, capsys):
    """frtrace compare reads the snapshots' manifests as frtrace -d does: a silent rank is one."""
    traces = _pair("twice_hang_rank2")
    urls = [_url(_worker(traces[r])) if r != 2 else f"http://127.0.0.1:{_closed_port()}" for r in range(4)]
    out = tmp_path / "snap"
    assert main(["live", "--workers", *urls, "-O", str(out), "--interval", "0.2", "--timeout", "3"]) == 1
    capsys.readouterr()
    assert main(["compare", str(out / "a"), str(out / "b")]) == 1
    assert "B's own analysis: DESYNC: rank 2 did not answer when frtrace live asked" in capsys.readouterr().out


def test_a_worker_that_trickles_its_answer_is_cut_off_at_the_deadline():
    import socket as sockets

    listener = sockets.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle():  # headers, then a byte every 0.2 s, for far longer than the timeout
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        while not stop.is_set():
            try:
                connection.sendall(b"{")
            except OSError:
                break
            time.sleep(0.2)
        connection.close()

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    (answer,) = fetch.fetch_all({0: f"http://127.0.0.1:{listener.getsockname()[1]}"}, timeout=1.5)
    stop.set()
    assert time.monotonic() - started < 4  # was: as long as the worker kept trickling
    assert answer.error == "no answer in time" and answer.trace is None


def test_what_live_refuses_it_refuses_before_asking_any_rank_and_writes_nothing(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    worker = _worker(b"{}")
    assert main(["live", "--workers", _url(worker), "-O", str(taken)]) == 2
    assert "already exists" in capsys.readouterr().err and worker.asked == []  # was: refused after two snapshots
    assert main(["live", "--workers", _url(worker), _url(worker), "-O", str(tmp_path / "s")]) == 2
    assert "is given for rank 0 and rank 1" in capsys.readouterr().err and not (tmp_path / "s").exists()
    refused = [f"127.0.0.1:{_closed_port()}" for _ in range(3)]
    assert main(["live", "--workers", *refused, "-O", str(tmp_path / "s"), "--interval", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "no rank answered (" in err and "Connection refused" in err and "within" not in err
    assert "kept" not in err and not (tmp_path / "s").exists()  # was: empty a/ and b/ kept


def test_stacks_over_their_cap_cost_the_stacks_only(tmp_path, capsys, monkeypatch):
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    (answer,) = fetch.fetch_all({0: _url(_worker(trace, stacks=b"x" * (fetch.MAX_STACKS_BYTES + 1)))}, timeout=5)
    assert answer.error is None and answer.trace == trace and answer.stacks is None  # was: the rank "did not answer"
    assert "over 4 MiB" in answer.stacks_error


def test_a_worker_answering_a_web_page_is_no_recorder():
    (answer,) = fetch.fetch_all({0: _url(_worker(b"<!doctype html><html>login</html>"))}, timeout=5)
    assert answer.trace is None and "not a recorder's JSON" in answer.error


def test_a_store_where_nothing_listens_is_one_line_at_once(tmp_path, capfd):
    pytest.importorskip("torch.distributed")
    started = time.monotonic()
    assert main(["live", "--store", f"127.0.0.1:{_closed_port()}", "-O", str(tmp_path / "s"), "--timeout", "20"]) == 2
    assert time.monotonic() - started < 8  # was: 22 s of torch's client retrying
    (line,) = capfd.readouterr().err.strip().splitlines()  # was: some 60 lines of C++ frames first
    assert "nothing answers there" in line and not (tmp_path / "s").exists()


def test_the_folder_of_two_snapshots_reads_as_the_later_one_with_a_note(tmp_path, capsys):
    traces = _pair("twice_hang_rank2")
    out = tmp_path / "snap"
    assert main(["live", "--workers", *[_url(_worker(t)) for t in traces], "-O", str(out), "--interval", "0.2"]) == 1
    capsys.readouterr()
    assert main(["-d", str(out), "-v"]) == 1  # was: two files claim rank 0, use --prefix (exit 2)
    said = capsys.readouterr().out
    assert said.startswith("DESYNC: rank 2 never joined")
    assert f"frtrace live's earlier snapshot; the later one, {out / 'b'}, is read" in said
