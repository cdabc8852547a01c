"""Fetch every rank's Flight Recorder (as JSON) and Python stacks from its debug-server worker, at
once, and keep them as a snapshot folder that `frtrace -d` reads like any dump set.

A worker answers `POST /handler/<name>` over plain HTTP (format.md, "Reading a running job"). Only
the handlers named here are asked for, redirects are refused, each answer is cut off at a size
cap and each rank at a timeout; what comes back is data, read later by the loader under the same
caps as a file. Each answer goes to its file as it arrives, a chunk at a time: a thousand ranks'
recorders never sit in memory together. An answer whose recorder says it is another rank's, or
another job's, is not kept as the rank's dump. The folder is written beside its final name and
renamed into place: a stop leaves a whole snapshot or none, and nothing is ever written over.
"""

from __future__ import annotations

import codecs
import http.client
import json
import os
import re
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.parse
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from ..errors import OutputError, UsageError, display_path, printable
from ..loader import parse_ranks_text
from ..reading.groups import is_default_group
from ..reading.limits import read_small
from ..reading.discover import SNAPSHOT_MANIFEST, SNAPSHOT_OTHER_RECORDER, SNAPSHOT_STACKS, snapshot_dump_name

# The backend-neutral recorder (gloo's ops) and, in CUDA builds, the NCCL one, whole: two buffers of
# one process. A CPU build has no NCCL handler (HTTP 404); a CUDA build's is empty in a gloo job.
HANDLERS = {"trace": "fr_trace_json", "nccl": "dump_nccl_trace_json?includecollectives=true&onlyactive=false",
            "stacks": "dump_traceback"}
MAX_TRACE_BYTES = 128 << 20  # a 2000-entry recorder with stacks is a few MB
MAX_STACKS_BYTES = 4 << 20  # a few hundred threads' stacks are well under this
MAX_CONCURRENT = 32
MAX_STORE_RANKS = 1 << 20  # keys probed where --world is not given


@dataclass(frozen=True, slots=True)
class Answer:
    """One rank's answers: the files its recorder's JSON and its stacks' text were written to
    (None where they did not come), why not, and how long the rank took."""

    rank: int
    url: str
    trace_file: str | None
    stacks_file: str | None
    error: str | None
    seconds: float
    recorder: str = HANDLERS["trace"]  # the handler `trace_file` came from
    other_file: str | None = None  # the backend-neutral recorder's entries where NCCL's is `trace_file`
    stacks_error: str | None = None  # why the stacks were not kept, where the recorder was
    asked: bool = True  # False: there was no address to ask it at (none in the job's store)
    refused: bool = False  # it answered with another rank's or another job's recorder; `error` says whose

    @property
    def trace(self) -> bytes | None:
        """The recorder's JSON, read back from its file: for a script that wants the bytes (frtrace
        itself never holds them)."""
        return _contents(self.trace_file)

    @property
    def stacks(self) -> bytes | None:
        """The stacks' text, read back from its file."""
        return _contents(self.stacks_file)

    @property
    def other(self) -> bytes | None:
        """The backend-neutral recorder's JSON where NCCL's is the dump, read back from its file."""
        return _contents(self.other_file)


def _contents(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


def worker_url(text: str) -> str:
    """`http://host:port` from what a user or a store gave (a bare host:port too); UsageError else."""
    url = text if "://" in text else f"http://{text}"
    try:
        parts = urllib.parse.urlsplit(url)  # ValueError for an unclosed '[' (an IPv6 host)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (parts is None or parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/")
            or parts.query):
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


_CHUNK = 1 << 16  # read from a worker and written at once: 32 ranks at a time hold 2 MiB of answers


class _WriteError(OSError):
    """A file of the snapshot could not be written (a full disk, say): the snapshot's failure, never
    a rank's, where every other OSError while asking a worker is the rank's."""

    def __init__(self, path: str, exc: OSError) -> None:
        super().__init__(exc.errno, exc.strerror or str(exc), path)


class _NewFile:
    """A new file of the snapshot, written an answer's chunk at a time; left by an exception (the
    answer cut off, the rank failed), it is removed: no half answer stays in the folder."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as exc:
            raise _WriteError(path, exc) from None

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            raise _WriteError(self.path, exc) from None

    def __enter__(self) -> _NewFile:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            os.close(self._fd)  # where writes are deferred (NFS), a full disk can show only here
        except OSError as error:
            _remove(self.path)
            if kind is None:
                raise _WriteError(self.path, error) from None
        if kind is not None:
            _remove(self.path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _WriteError(path, exc) from None


def _move(source: str, target: str) -> None:
    """`source` renamed to `target` (a file of the same snapshot), its folder made where needed."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(source, target)
    except OSError as exc:
        raise _WriteError(target, exc) from None


def _post(url: str, handler: str, cap: int, deadline: float, path: str) -> None:
    """The body of `POST url/handler/<handler>`, written to the new file `path` as it arrives, by
    the deadline: the time left bounds every read, so a worker that trickles its answer a byte at a
    time is cut off at the deadline too (urllib's timeout bounds each read alone). Redirects
    refused; over `cap` bytes cut off. Where it fails, no file is left."""
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
        with _NewFile(path) as kept:
            size = 0
            while size <= cap and not response.isclosed():  # closed once its length was read (Python 3.13)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out")
                sock.settimeout(left)
                chunk = response.read1(min(_CHUNK, cap + 1 - size))
                if not chunk:
                    break
                size += len(chunk)
                kept.write(chunk)
            if size > cap:
                raise ValueError(f"its {handler} answer is over {cap >> 20} MiB; cut off")
    finally:
        connection.close()


_HEAD_BYTES = 4096


def _is_json_object(path: str) -> bool:
    """Whether an answer starts as a JSON object does (a recorder's JSON), not as a page of HTML:
    its first bytes after any white space (and a byte order mark)."""
    with open(path, "rb") as handle:
        head = handle.read(_HEAD_BYTES).removeprefix(codecs.BOM_UTF8)
        while head and not head.lstrip():
            head = handle.read(_HEAD_BYTES)
    return head.lstrip()[:1] == b"{"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"redirected (HTTP {exc.code}); refused" if 300 <= exc.code < 400 else f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, (TimeoutError, OSError)) and "timed out" in str(exc):
        return "no answer in time"
    return printable(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)


_SKIM_CHUNK = 1 << 18
_MAX_MEMBER = 32 << 20  # characters of one entry (or one kept field) read at once; past it the file is not skimmed
_BLANK = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Skim:
    """A JSON document read from a file one value at a time: the text held is the part not yet
    read, a chunk at a time, grown only to hold one value whole."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")("replace")
        self.text, self.at, self.ended = "", 0, False

    def more(self) -> bool:
        """Whether more text came: a chunk, or as much as is held where a value spans it."""
        if self.ended:
            return False
        held = len(self.text) - self.at
        if held > _MAX_MEMBER:
            raise ValueError(f"a value over {_MAX_MEMBER} characters")
        data = self.handle.read(max(_SKIM_CHUNK, held))
        if not data:
            self.ended = True
            self.text += self.decoder.decode(b"", final=True)
            return False
        self.text = self.text[self.at:] + self.decoder.decode(data)
        self.at = 0
        return True

    def peek(self) -> str:
        """The next character past white space ('' at the end)."""
        while True:
            self.at = _BLANK.match(self.text, self.at).end()
            if self.at < len(self.text) or not self.more():
                return self.text[self.at:self.at + 1]

    def take(self, expected: str) -> str:
        """The next character past white space, which must be one of `expected`."""
        found = self.peek()
        if not found or found not in expected:
            raise ValueError(f"{found!r} where {expected!r} belongs")
        self.at += 1
        return found

    def value(self) -> Any:
        """The next value, parsed whole. One that ends at most two characters before the end of the
        text held is parsed again with more: a number cut at the chunk's end ("1.5e+") reads as
        its valid start ("1.5")."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.at)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise
            if end + 2 < len(self.text) or not self.more():
                self.at = end
                return value

    def opening(self) -> tuple[bool, str]:
        """Whether the next value holds anything, and what closes the rest of it left to read (""
        where it was read whole: a value that is no list or object, or an empty one)."""
        opening = self.peek()
        if opening not in ("[", "{"):
            return bool(self.value()), ""
        closing = "]" if opening == "[" else "}"
        self.at += 1
        if self.peek() == closing:
            self.at += 1
            return False, ""
        return True, closing

    def rest(self, closing: str) -> None:
        """The rest of a list or an object that `opening` began, a member at a time, each parsed and
        dropped."""
        while closing:
            if closing == "}":
                self.value()
                self.take(":")
            self.value()
            if self.take("," + closing) == closing:
                return


def _members(handle: BinaryIO, keep: Collection[str]) -> Iterator[tuple[str, Any]]:
    """The members of the JSON object in a file, in order: (key, its value parsed) for the keys in
    `keep`, (key, whether its value holds anything) for the others. A recorder's entries are read
    one at a time and dropped, so memory is that of one entry, never of the document (up to
    MAX_TRACE_BYTES). ValueError where it is not a JSON object, or an entry is past _MAX_MEMBER."""
    skim = _Skim(handle)
    skim.take("{")
    if skim.peek() == "}":
        return
    while True:
        key = skim.value()
        if not isinstance(key, str):
            raise ValueError("a key that is not a string")
        skim.take(":")
        if key in keep:
            yield key, skim.value()
        else:
            holds, closing = skim.opening()
            yield key, holds
            skim.rest(closing)
        if skim.take(",}") == "}":
            return


def _holds_entries(path: str) -> bool:
    """Whether a recorder's JSON holds any entry (an empty recorder leaves out "entries"), read up
    to the first entry: torch writes "entries" second, so only the file's beginning is read."""
    try:
        with open(path, "rb") as handle:
            return next((holds for key, holds in _members(handle, ()) if key == "entries"), False)
    except (ValueError, RecursionError):
        return True  # not ours to judge: the loader says what is wrong with it


def _whose(path: str) -> tuple[int | None, str | None]:
    """What a recorder's JSON says of whose it is: the top-level "rank" where its writer gives one,
    and its default group's ranks as written (_default_group; torch writes pg_config after the
    entries, so the whole file is skimmed). None for what it does not say, or where the file is
    not ours to judge (the loader says what is wrong with it)."""
    try:
        with open(path, "rb") as handle:
            fields = dict(_members(handle, ("rank", "pg_config")))
    except (ValueError, RecursionError):
        return None, None
    rank = fields.get("rank")
    return rank if type(rank) is int and rank >= 0 else None, _default_group(fields.get("pg_config"))


def _default_group(configs: Any) -> str | None:
    """The default group's ranks as a pg_config writes them ("[0, 1, 2]"; a list is written so),
    where it lists that group as the loader names it: desc "default_pg", or group "0" without a
    desc. A placeholder (real gloo dumps) lists none. Kept as text: a job's ranks all write the
    same text, one string to count however many ranks and however big the job."""
    if not isinstance(configs, dict):
        return None
    for key, value in configs.items():
        name, desc, ranks = (value.get("name", key), value.get("desc", ""), value.get("ranks")) if isinstance(value, dict) \
            else (key, "", value)  # 1.4: {pg_id: [ranks]}
        if is_default_group(str(name), desc):
            return ranks if isinstance(ranks, str) else json.dumps(ranks) if isinstance(ranks, list) else None
    return None


def _ranks_of(text: str) -> tuple[int, ...] | None:
    """The ranks a default group's text lists, by the loader's rules (parse_ranks_text), sorted;
    None where it lists none it can read."""
    ranks = parse_ranks_text(text)
    return tuple(sorted(set(ranks))) if ranks else None


def _job_of(ranks: tuple[int, ...]) -> str:
    if ranks == tuple(range(ranks[0], ranks[0] + len(ranks))):
        return f"{len(ranks)} ranks ({ranks[0]}-{ranks[-1]})" if len(ranks) > 1 else f"rank {ranks[0]} alone"
    return f"{len(ranks)} ranks"


def _strangers(answers: list[Answer]) -> dict[int, str]:
    """{rank: why} for the ranks whose recorder says it is not theirs: its "rank" is another, or its
    default group is not the one more than half of the ranks' recorders name (another job's
    world). Where a recorder says neither, or no default group has most ranks behind it, nothing
    is refused. The files are read one after the other: one rank's fields in memory at a time."""
    why: dict[int, str] = {}
    groups: dict[int, str] = {}
    shared: dict[str, str] = {}  # each text once, however many ranks wrote it
    for answer in answers:
        if answer.trace_file is None:
            continue
        rank, group = _whose(answer.trace_file)
        if rank is not None and rank != answer.rank:
            why[answer.rank] = (f"the worker at {answer.url} answered rank {rank}'s recorder, not rank {answer.rank}'s: "
                                "another job's worker, or the wrong address")
        elif group is not None:
            groups[answer.rank] = shared.setdefault(group, group)
    if not groups:
        return why
    agreed, votes = Counter(groups.values()).most_common(1)[0]
    job = _ranks_of(agreed)
    if 2 * votes <= len(groups) or job is None:
        return why
    urls, parsed = {a.rank: a.url for a in answers}, {agreed: job}
    for rank, group in groups.items():
        theirs = parsed[group] if group in parsed else parsed.setdefault(group, _ranks_of(group))
        if theirs is not None and theirs != job:
            why[rank] = (f"the worker at {urls[rank]} answered a recorder whose job is {_job_of(theirs)}, where the other "
                         f"ranks' is {_job_of(job)}: another job's worker, or the wrong address")
    return why


def fetch_rank(rank: int, url: str, timeout: float, folder: str) -> Answer:
    """The answers of one rank, within `timeout` seconds in all, each written to its snapshot file
    in `folder` as it arrives: its recorder, its stacks, then the NCCL recorder, which becomes the
    rank's dump where it holds entries (a job on GPUs)."""
    start = time.monotonic()
    deadline = start + timeout
    trace, stacks = os.path.join(folder, snapshot_dump_name(rank)), os.path.join(folder, SNAPSHOT_STACKS, f"rank_{rank}.txt")
    nccl, other = f"{trace}.nccl", None
    error = stacks_error = None
    recorder = HANDLERS["trace"]
    try:
        _post(url, HANDLERS["trace"], MAX_TRACE_BYTES, deadline, trace)
        if not _is_json_object(trace):
            _remove(trace)
            error = "answered with something that is not a recorder's JSON (a web page?): not its debug server"
    except _WriteError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of one rank is that rank's answer, not ours
        error = _reason(exc)
    if error is None:
        try:  # the stacks are evidence beside the recorder: their failing costs them only
            _post(url, HANDLERS["stacks"], MAX_STACKS_BYTES, deadline, stacks)
        except _WriteError:
            raise
        except Exception as exc:  # noqa: BLE001
            stacks_error = _reason(exc)
    if error is None:
        try:
            _post(url, HANDLERS["nccl"], MAX_TRACE_BYTES, deadline, nccl)
        except _WriteError:
            raise
        except Exception:  # noqa: BLE001 - no NCCL recorder here (a CPU build) or none in time: the other is the dump
            nccl = None
        if nccl is not None and _holds_entries(nccl):
            if _holds_entries(trace):
                other = os.path.join(folder, SNAPSHOT_OTHER_RECORDER, snapshot_dump_name(rank))
                _move(trace, other)
            else:
                _remove(trace)
            _move(nccl, trace)
            recorder = HANDLERS["nccl"].partition("?")[0]
        elif nccl is not None:
            _remove(nccl)
    kept = error is None
    return Answer(rank, url, trace if kept else None, stacks if kept and stacks_error is None else None, error,
                  time.monotonic() - start, recorder, other, stacks_error)


_scratch: tempfile.TemporaryDirectory | None = None


def _scratch_folder() -> str:
    """A new folder in this process's own temporary one, which is removed when the process ends."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="frtrace-live-")
    return tempfile.mkdtemp(prefix="answers-", dir=_scratch.name)


def fetch_all(urls: dict[int, str], timeout: float, folder: str | None = None) -> list[Answer]:
    """Every rank's answers, fetched at once (at most MAX_CONCURRENT at a time), by rank, each
    written as it arrives to its file in `folder` (a snapshot's, as SnapshotFolder.take gives it;
    without one, a folder of this process's, removed when it ends). A rank whose recorder says it
    is another rank's or another job's (_strangers) is not kept: its files are removed and the
    answer says whose it was (refused). A file that cannot be written is an OSError."""
    if folder is None:
        folder = _scratch_folder()
    os.makedirs(os.path.join(folder, SNAPSHOT_STACKS), exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_CONCURRENT, len(urls)))) as pool:
        futures = [pool.submit(fetch_rank, rank, url, timeout, folder) for rank, url in sorted(urls.items())]
        answers = [f.result() for f in futures]
    refused = _strangers(answers)
    for answer in answers:
        if answer.rank in refused:
            for path in (answer.trace_file, answer.stacks_file, answer.other_file):
                if path is not None:
                    _remove(path)
    return [replace(a, trace_file=None, stacks_file=None, other_file=None, error=refused[a.rank], stacks_error=None,
                    refused=True) if a.rank in refused else a for a in answers]


def _manifest(answers: list[Answer], taken_at: float) -> dict:
    return {"taken_at": taken_at, "ranks": [
        {"rank": a.rank, "url": a.url, "seconds": round(a.seconds, 3), "answered": a.error is None,
         **({"error": a.error} if a.error else {"recorder": a.recorder}),
         **({"stacks_error": a.stacks_error} if a.stacks_error else {}),
         **({"refused": True} if a.refused else {}),
         **({"asked": False} if not a.asked else {}),
         **({"other_recorder": f"{SNAPSHOT_OTHER_RECORDER}/{snapshot_dump_name(a.rank)}"} if a.other_file is not None else {})}
        for a in answers]}


class SnapshotFolder:
    """A new folder of snapshots, `out_dir`, which must not exist: one snapshot in the folder itself
    (name ""), several in subfolders by name. Each holds `trace_rank_<R>.json` per rank that
    answered, `stacks/rank_<R>.txt`, and `manifest.json` (URLs, times, who did not answer and why,
    which recorder each dump is); where a rank's NCCL recorder is its dump and its backend-neutral
    one (gloo's ops) holds entries too, that one is in `fr_trace_json/`, a dump set of its own.

    The answers are written as they arrive into a temporary folder beside `out_dir`, which `keep`
    renames into place: leaving the `with` block any other way (an error, Ctrl-C) removes it, so
    there is all of it or nothing, and nothing is ever written over. OutputError where it cannot be
    written."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.temp: str | None = None
        self.taken: dict[str, tuple[list[Answer], float]] = {}

    def __enter__(self) -> SnapshotFolder:
        if os.path.lexists(self.out_dir):
            raise OutputError(f"{display_path(self.out_dir)}: already exists; frtrace live writes a new folder, never "
                              "into one: give another -O")
        parent = os.path.dirname(os.path.abspath(self.out_dir))
        try:
            self.temp = tempfile.mkdtemp(prefix=".frtrace-live-", dir=parent)
        except OSError as exc:
            raise OutputError(f"{display_path(self.out_dir)}: cannot create the snapshot folder ({exc.strerror})") from None
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if self.temp is not None:
            shutil.rmtree(self.temp, ignore_errors=True)
            self.temp = None

    def take(self, name: str, urls: dict[int, str], timeout: float, absent: Sequence[Answer] = ()) -> list[Answer]:
        """A snapshot `name` of every rank's answers (fetch_all), with `absent` (the ranks with no
        worker address), by rank."""
        folder = os.path.join(self.temp, name) if name else self.temp
        taken_at = time.time()
        try:
            if name:
                os.mkdir(folder)
            answers = sorted([*fetch_all(urls, timeout, folder), *absent], key=lambda a: a.rank)
        except OSError as exc:
            raise self._unwritten(exc) from None
        self.taken[name] = answers, taken_at
        return answers

    def keep(self) -> None:
        """The snapshots' manifests written, and the folder renamed into place."""
        try:
            for name, (answers, taken_at) in self.taken.items():
                with open(os.path.join(self.temp, name, SNAPSHOT_MANIFEST), "x") as handle:
                    json.dump(_manifest(answers, taken_at), handle, indent=2)
            os.rename(self.temp, self.out_dir)  # a folder that appeared meanwhile: refused unless empty
        except OSError as exc:
            raise self._unwritten(exc) from None
        self.temp = None

    def _unwritten(self, exc: OSError) -> OutputError:
        return OutputError(f"{display_path(self.out_dir)}: cannot write the snapshot ({exc.strerror or exc}); nothing "
                           "was written")


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
                missing[rank] = f"the store holds no worker address for it ({printable(repr(text[:80]))})"
    except (RuntimeError, OSError) as exc:  # torch's store errors are RuntimeErrors (DistStoreError)
        raise UsageError(f"--store {printable(address)}: cannot read the job's store ({_reason(exc)}); check "
                         "MASTER_ADDR:MASTER_PORT and that the job runs") from None
    if not urls:
        raise UsageError(f"--store {printable(address)}: the store holds no debug-server worker (debug_server/rank<R>): "
                         "start the job's ranks with torch.distributed.debug.start_debug_server()")
    return urls, missing
