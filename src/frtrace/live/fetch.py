"""Fetch every rank's Flight Recorder (as JSON) and Python stacks from its debug-server worker, at
once, and keep them as a snapshot folder that `frtrace -d` reads like any dump set.

A worker answers `POST /handler/<name>` over plain HTTP (format.md, "Reading a running job"). Only
the handlers named here are asked for, redirects are refused, each answer is cut off at a size
cap and each rank at a timeout; what comes back is data, read later by the loader under the same
caps as a file. The folder is written beside its final name and renamed into place: a stop leaves
a whole snapshot or none, and nothing is ever written over.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import OutputError, UsageError, display_path, printable
from ..reading.limits import read_small
from ..reading.discover import SNAPSHOT_MANIFEST, SNAPSHOT_OTHER_RECORDER, SNAPSHOT_STACKS, snapshot_dump_name

# The backend-neutral recorder (gloo's ops) and, in CUDA builds, the NCCL one, whole: two buffers of
# one process. A CPU build has no NCCL handler (HTTP 404); a CUDA build's is empty in a gloo job.
HANDLERS = {"trace": "fr_trace_json", "nccl": "dump_nccl_trace_json?includecollectives=true&onlyactive=false",
            "stacks": "dump_traceback"}
MAX_TRACE_BYTES = 128 << 20  # a 2000-entry recorder with stacks is a few MB; 32 at once stay in memory
MAX_STACKS_BYTES = 4 << 20  # a few hundred threads' stacks are well under this
MAX_CONCURRENT = 32
MAX_STORE_RANKS = 1 << 20  # keys probed where --world is not given


@dataclass(frozen=True, slots=True)
class Answer:
    """One rank's answers: the recorder's JSON and the stacks' text (None where it did not come),
    why not, and how long the rank took."""

    rank: int
    url: str
    trace: bytes | None
    stacks: bytes | None
    error: str | None
    seconds: float
    recorder: str = HANDLERS["trace"]  # the handler `trace` came from
    other: bytes | None = None  # the backend-neutral recorder's entries where NCCL's is `trace`
    stacks_error: str | None = None  # why the stacks were not kept, where the recorder was


def worker_url(text: str) -> str:
    """`http://host:port` from what a user or a store gave (a bare host:port too); UsageError else."""
    url = text if "://" in text else f"http://{text}"
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/") or parts.query:
        raise UsageError(f"{printable(text)}: not a debug-server worker address; give http://HOST:PORT "
                         "(what the job's store holds under debug_server/rank<R>)")
    return f"http://{parts.netloc}"


MAX_WORKERS_FILE_BYTES = 64 << 20  # a million ranks' addresses


def read_workers_file(path: str) -> list[str]:
    """The addresses in a file, one per line in rank order (blank lines and '#' comments skipped),
    read by limits.read_small. UsageError naming the file where it cannot serve."""
    try:
        raw = read_small(path, MAX_WORKERS_FILE_BYTES)
    except OSError as exc:
        raise UsageError(f"--workers-file {display_path(path)}: cannot open it ({exc.strerror})") from None
    except ValueError as exc:
        raise UsageError(f"--workers-file {display_path(path)}: {exc}; give a file of addresses, one per line") from None
    lines = (line.partition("#")[0].strip() for line in raw.decode("utf-8", "replace").splitlines())
    addresses = [line for line in lines if line]
    if not addresses:
        raise UsageError(f"--workers-file {display_path(path)}: holds no address; give one http://HOST:PORT per line")
    return addresses


_CHUNK = 1 << 16


def _post(url: str, handler: str, cap: int, deadline: float) -> bytes:
    """The body of `POST url/handler/<handler>`, read by the deadline: the time left bounds every
    read, so a worker that trickles its answer a byte at a time is cut off at the deadline too
    (urllib's timeout bounds each read alone). Redirects refused; over `cap` bytes cut off."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left)
    try:
        connection.request("POST", f"/handler/{handler}", body=b"", headers={"Content-Length": "0"})
        sock = connection.sock  # the response reads from it; http.client lets go of it for HTTP/1.0 replies
        response = connection.getresponse()
        if 300 <= response.status < 400:
            raise urllib.error.HTTPError(url, response.status, "redirected; refused", response.headers, None)
        if response.status != 200:
            raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, None)
        body = bytearray()
        while len(body) <= cap:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(left)
            chunk = response.read1(min(_CHUNK, cap + 1 - len(body)))
            if not chunk:
                break
            body += chunk
    finally:
        connection.close()
    if len(body) > cap:
        raise ValueError(f"its {handler} answer is over {cap >> 20} MiB; cut off")
    return bytes(body)


def _is_json_object(body: bytes) -> bool:
    """Whether an answer starts as a JSON object does (a recorder's JSON), not as a page of HTML."""
    return body.lstrip()[:1] == b"{"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"redirected (HTTP {exc.code}); refused" if 300 <= exc.code < 400 else f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, (TimeoutError, OSError)) and "timed out" in str(exc):
        return "no answer in time"
    return printable(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)


def _holds_entries(document: bytes) -> bool:
    """Whether a recorder's JSON holds any entry (an empty recorder leaves out "entries")."""
    if b'"entries"' not in document:
        return False
    try:
        entries = json.loads(document).get("entries")
    except (ValueError, AttributeError, RecursionError):
        return True  # not ours to judge: the loader says what is wrong with it
    return bool(entries)


def fetch_rank(rank: int, url: str, timeout: float) -> Answer:
    """The answers of one rank, within `timeout` seconds in all: its recorder, its stacks, then
    the NCCL recorder, which becomes the rank's dump where it holds entries (a job on GPUs)."""
    start = time.monotonic()
    deadline = start + timeout
    trace = stacks = error = other = stacks_error = None
    recorder = HANDLERS["trace"]
    try:
        trace = _post(url, HANDLERS["trace"], MAX_TRACE_BYTES, deadline)
        if not _is_json_object(trace):
            trace, error = None, "answered with something that is not a recorder's JSON (a web page?): not its debug server"
    except Exception as exc:  # noqa: BLE001 - any failure of one rank is that rank's answer, not ours
        error = _reason(exc)
    if error is None:
        try:  # the stacks are evidence beside the recorder: their failing costs them only
            stacks = _post(url, HANDLERS["stacks"], MAX_STACKS_BYTES, deadline)
        except Exception as exc:  # noqa: BLE001
            stacks_error = _reason(exc)
    if error is None:
        try:
            nccl = _post(url, HANDLERS["nccl"], MAX_TRACE_BYTES, deadline)
        except Exception:  # noqa: BLE001 - no NCCL recorder here (a CPU build) or none in time: the other is the dump
            nccl = None
        if nccl is not None and _holds_entries(nccl):
            other = trace if _holds_entries(trace) else None
            trace, recorder = nccl, HANDLERS["nccl"].partition("?")[0]
    return Answer(rank, url, trace, stacks, error, time.monotonic() - start, recorder, other, stacks_error)


def fetch_all(urls: dict[int, str], timeout: float) -> list[Answer]:
    """Every rank's answers, fetched at once (at most MAX_CONCURRENT at a time), by rank."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_CONCURRENT, len(urls)))) as pool:
        futures = [pool.submit(fetch_rank, rank, url, timeout) for rank, url in sorted(urls.items())]
        return [f.result() for f in futures]


def _fill(folder: str, answers: list[Answer], taken_at: float) -> None:
    os.mkdir(os.path.join(folder, SNAPSHOT_STACKS))
    for answer in answers:
        if answer.trace is not None:
            with open(os.path.join(folder, snapshot_dump_name(answer.rank)), "xb") as handle:
                handle.write(answer.trace)
        if answer.stacks is not None:
            with open(os.path.join(folder, SNAPSHOT_STACKS, f"rank_{answer.rank}.txt"), "xb") as handle:
                handle.write(answer.stacks)
        if answer.other is not None:
            os.makedirs(os.path.join(folder, SNAPSHOT_OTHER_RECORDER), exist_ok=True)
            with open(os.path.join(folder, SNAPSHOT_OTHER_RECORDER, snapshot_dump_name(answer.rank)), "xb") as handle:
                handle.write(answer.other)
    manifest = {"taken_at": taken_at, "ranks": [
        {"rank": a.rank, "url": a.url, "seconds": round(a.seconds, 3), "answered": a.error is None,
         **({"error": a.error} if a.error else {"recorder": a.recorder}),
         **({"stacks_error": a.stacks_error} if a.stacks_error else {}),
         **({"other_recorder": f"{SNAPSHOT_OTHER_RECORDER}/{snapshot_dump_name(a.rank)}"} if a.other is not None else {})}
        for a in answers]}
    with open(os.path.join(folder, SNAPSHOT_MANIFEST), "x") as handle:
        json.dump(manifest, handle, indent=2)


def write_snapshot(snapshots: dict[str, tuple[list[Answer], float]], out_dir: str) -> None:
    """The answers as dump sets in `out_dir`, which must not exist: one snapshot in the folder
    itself (name ""), several in subfolders by name. Each holds `trace_rank_<R>.json` per rank that
    answered, `stacks/rank_<R>.txt`, and `manifest.json` (URLs, times, who did not answer, which
    recorder each dump is); where a rank's NCCL recorder is its dump and its backend-neutral one
    (gloo's ops) holds entries too, that one is in `fr_trace_json/`, a dump set of its own. Written
    in a temporary folder beside it and renamed into place: all of it or nothing."""
    if os.path.lexists(out_dir):
        raise OutputError(f"{display_path(out_dir)}: already exists; frtrace live writes a new folder, never into "
                          "one: give another -O")
    parent = os.path.dirname(os.path.abspath(out_dir))
    try:
        temp = tempfile.mkdtemp(prefix=".frtrace-live-", dir=parent)
    except OSError as exc:
        raise OutputError(f"{display_path(out_dir)}: cannot create the snapshot folder ({exc.strerror})") from None
    try:
        for name, (answers, taken_at) in snapshots.items():
            folder = os.path.join(temp, name) if name else temp
            if name:
                os.mkdir(folder)
            _fill(folder, answers, taken_at)
        os.rename(temp, out_dir)  # a folder that appeared meanwhile: refused unless empty
    except BaseException as exc:
        shutil.rmtree(temp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise OutputError(f"{display_path(out_dir)}: cannot write the snapshot ({exc.strerror or exc}); "
                              "nothing was written") from None
        raise


def store_workers(address: str, world: int | None, timeout: float) -> tuple[dict[int, str], dict[int, str]]:
    """Each rank's worker address from the job's store (HOST:PORT: MASTER_ADDR:MASTER_PORT), where
    the debug server keeps it under debug_server/rank<R>: ({rank: url}, {rank: why it has none}).
    The world is `world` ranks, or as many consecutive keys as the store holds. Needs torch's
    TCPStore client; a UsageError says how to get it."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--store {printable(address)}: give HOST:PORT, the job's MASTER_ADDR:MASTER_PORT")
    try:
        import warnings
        from datetime import timedelta

        with warnings.catch_warnings():  # torch's import-time warnings (no numpy, say) are not ours to print
            warnings.simplefilter("ignore")
            from torch.distributed import PrefixStore, TCPStore
    except ImportError:
        raise UsageError("--store reads the job's TCPStore with torch's client, and torch is not installed here: "
                         "run frtrace live on a training host, or pip install torch, or give --workers URL...") from None
    try:  # a plain connection first: torch's client retries for its whole timeout and prints C++ frames
        socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 5)).close()
    except OSError as exc:
        raise UsageError(f"--store {printable(address)}: nothing answers there ({_reason(exc)}); check "
                         "MASTER_ADDR:MASTER_PORT and that the job runs") from None
    try:
        store = PrefixStore("debug_server", TCPStore(host.strip("[]"), int(port), is_master=False,
                                                     timeout=timedelta(seconds=timeout)))
        if world is None:
            world = 0
            while world < MAX_STORE_RANKS and store.check([f"rank{world}"]):
                world += 1
        urls, missing = {}, {}
        for rank in range(world):
            if not store.check([f"rank{rank}"]):
                missing[rank] = "no worker address in the store (the rank never started the debug server)"
                continue
            text = store.get(f"rank{rank}")[:1024].decode("utf-8", "replace")
            try:
                urls[rank] = worker_url(text)
            except UsageError:
                missing[rank] = f"the store holds no worker address for it ({printable(text[:80])!r})"
    except (RuntimeError, OSError) as exc:  # torch's store errors are RuntimeErrors (DistStoreError)
        raise UsageError(f"--store {printable(address)}: cannot read the job's store ({_reason(exc)}); check "
                         "MASTER_ADDR:MASTER_PORT and that the job runs") from None
    if not urls:
        raise UsageError(f"--store {printable(address)}: the store holds no debug-server worker (debug_server/rank<R>): "
                         "start the job's ranks with torch.distributed.debug.start_debug_server()")
    return urls, missing
