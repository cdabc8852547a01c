"""Dumps read where they lie: an fsspec URL (s3://, gs://, az://, abfs://, http(s)://, or any
protocol fsspec has registered) in place of a folder.

fsspec and the protocol's own package do the talking, with their own credentials and endpoints
(AWS_* variables and files, AWS_ENDPOINT_URL, FSSPEC_<PROTOCOL>_<KWARG>, application default
credentials); frtrace adds only timeouts (TIMEOUT seconds without an answer) and a bounded count
of retries, so an endpoint that does not answer is one line, never a hang.

The main process lists the prefix once (S3: a page at a time, no further than the cap) and reads
each dump-named object's first bytes, in concurrent batches (what it reads of a local file, to
sort dumps from other files); an object over the dump size cap is refused by the size the listing
gives, before any of it is fetched. The workers read the dumps, never past the cap (read_object),
as they read local files. A key is only ever part of a URL: nothing is written under a name taken
from the store.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import DumpError, UsageError, printable
from ..types import SkippedFile
from .discover import (MARKED_BYTES, SNAPSHOT_MANIFEST, Discovery, Found, finish, live_snapshot_in, placed, split_name,
                       stack_rank)
from .limits import MAX_DUMP_BYTES, over_the_cap

TIMEOUT = 60.0  # seconds a request may wait for the store (to connect, for each read) before it is given up (--timeout)
MAX_LISTED = 1 << 20  # objects under one prefix: as many members as an archive may hold
MAX_DEPTH = 8  # folders below the prefix (host/job/attempt/...), as for a local folder
_CHUNK = 1 << 20  # bytes a worker asks for at a time
_RETRIES = 2  # attempts per request, the first included (botocore's; s3fs's own retries left at one)
_HEADS_AT_ONCE = 1024  # objects whose first bytes are asked for in one batch
_HTTP_READERS = 16  # HTTP first bytes are streamed, this many at a time: a server may ignore Range
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# the package each common protocol needs, where fsspec's own message names none
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
             "abfss": "adlfs", "adl": "adlfs", "http": "aiohttp", "https": "aiohttp"}


def is_url(text: str) -> bool:
    """Whether `text` names a place through fsspec (PROTOCOL://...) rather than a local path;
    file:// is a local path."""
    return bool(_URL.match(text)) and not text.lower().startswith("file://")


def local_path(text: str) -> str:
    """A file:// URL as the local path it names; any other text as it is."""
    return text[len("file://"):] if text.lower().startswith("file://") else text


def _options(protocol: str, seconds: float) -> dict[str, Any]:
    """Timeouts and bounded retries for the protocols whose libraries take them."""
    if protocol in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": seconds, "read_timeout": seconds,
                                  "retries": {"max_attempts": _RETRIES, "mode": "standard"}}}
    if protocol in ("http", "https"):
        import aiohttp

        # no bound on the whole answer: a dump of hundreds of MB may take longer to come than to start
        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)}}
    return {}


def filesystem(url: str) -> tuple[Any, str]:
    """(the fsspec filesystem, the path in it) of a URL; a UsageError naming what to install
    where fsspec or the protocol's package is missing."""
    protocol = url.split("://", 1)[0].lower()
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:
        raise UsageError(f"{printable(url)}: reading dumps from a URL needs fsspec: pip install 'frtrace[remote]' "
                         f"(and the package of {protocol}://)") from None
    if protocol not in known_implementations and protocol not in fsspec.available_protocols():
        raise UsageError(f"{printable(url)}: fsspec knows no protocol {printable(protocol)!r}; give a folder, an archive, or "
                         "a URL such as s3://bucket/prefix")
    try:
        fs, path = fsspec.core.url_to_fs(url, **_options(protocol, TIMEOUT))
    except ImportError:
        package = _PACKAGES.get(protocol) or known_implementations.get(protocol, {}).get("err", "its package")
        raise UsageError(f"{printable(url)}: reading {protocol}:// needs {package}, which is not installed: "
                         f"pip install {package}") from None
    except (ValueError, TypeError, OSError) as exc:
        raise UsageError(f"{printable(url)}: {reason(exc)}; check the URL") from None
    if protocol in ("s3", "s3a"):
        fs.retries = 1  # s3fs retries timeouts 5 times on top of botocore's attempts: a hung store would take 10
    return fs, path


def reason(exc: BaseException) -> str:
    """What a store's library raised, in one printable line: its type and its message's first line."""
    text = str(exc).strip().splitlines()
    return printable(f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__)


def _url(fs: Any, path: str) -> str:
    return fs.unstrip_protocol(path)


def identity(fs: Any, path: str) -> tuple[str, str]:
    """What names an object of a store among the files a run reads and writes (a local file's
    (device, inode)): its URL, as fsspec writes it."""
    return "url", _url(fs, path)


def _pages_of_s3(fs: Any) -> bool:
    """Whether `fs` is s3fs's, with the page iterator this reads listings through."""
    return ("s3" in fs.protocol or "s3a" in fs.protocol) and hasattr(fs, "_iterdir") and hasattr(fs, "split_path")


def _pages(fs: Any, root: str) -> dict[str, dict]:
    """An S3 prefix's objects ({path: info}), read a page (1,000 keys) at a time and no further than
    MAX_LISTED and one: fs.find would list every key under it first (and keep them cached, about
    1.2 kB each). s3fs's own page iterator (_iterdir), so that its credentials, endpoint and retries
    are what every other request of it uses."""
    from fsspec.asyn import sync

    bucket, key, _ = fs.split_path(root)
    prefix = key.rstrip("/") + "/" if key else ""

    async def listed() -> dict[str, dict]:
        found: dict[str, dict] = {}
        async for info in fs._iterdir(bucket, delimiter="", prefix=prefix):
            found[info["name"]] = info
            if len(found) > MAX_LISTED:
                break
        return found

    found = sync(fs.loop, listed)
    if not found and key and not sync(fs.loop, fs._exists, root):
        raise FileNotFoundError(root)
    return found


def list_objects(fs: Any, root: str, url: str) -> tuple[list[tuple[str, str, int | None]], bool]:
    """(path in the store, key under `root`, size where the listing says it) of the first
    MAX_LISTED objects below `root`, hidden ones (a dot-name anywhere in the key) left out; and
    whether there were more."""
    try:  # no maxdepth: fsspec's walk, which it takes, passes over a folder it cannot list (a refusal)
        listed = _pages(fs, root) if _pages_of_s3(fs) else fs.find(root, detail=True)
    except FileNotFoundError:
        raise UsageError(f"{printable(url)}: nothing there; check the URL (the bucket and the prefix)") from None
    except PermissionError as exc:
        raise UsageError(f"{printable(url)}: the store refused to list it ({reason(exc)}); check the "
                         "credentials (for S3: AWS_* variables or files, AWS_ENDPOINT_URL)") from None
    except Exception as exc:  # noqa: BLE001 - whatever the protocol's library raises: unreachable, refused, timed out
        raise UsageError(f"{printable(url)}: cannot list it ({reason(exc)}); check the URL, the endpoint "
                         "and the credentials") from None
    stem = root.rstrip("/")
    objects = []
    for path, info in sorted(listed.items())[:MAX_LISTED]:
        if info.get("type") not in (None, "file"):
            continue
        key = path[len(stem) + 1:] if path.startswith(stem + "/") else path  # "a//b" keeps its empty part
        if not key or key.count("/") > MAX_DEPTH or any(part.startswith(".") and part != ".." for part in key.split("/")):
            continue  # too deep, or hidden, as in a folder: editors' and uploaders' temporary objects
        size = info.get("size")
        objects.append((path, key, size if isinstance(size, int) and size >= 0 else None))
    if not objects:
        raise UsageError(f"{printable(url)}: no object there; check the URL (the bucket and the prefix) and the "
                         "credentials")
    return objects, len(listed) > MAX_LISTED


def find_remote_dumps(url: str, prefix: str | None = None) -> Discovery:
    """The Discovery of the dumps under a URL, by the rules of a local folder (split_name, the job's
    files, hosts from folders or names); each DumpFile's path and source are its URL."""
    fs, root = filesystem(url)
    if prefix is not None:
        prefix = os.path.basename(prefix)
    objects, more = list_objects(fs, root, url)
    found = Found()
    if more:
        found.skipped.append(SkippedFile(printable(url), f"more than {MAX_LISTED} objects; the rest was not read"))
    heads: list[tuple[Any, str]] = []  # (DumpFile, its path in the store) to read the first bytes of
    for path, key, size in objects:
        found.identities.add(identity(fs, path))  # what tells two sets apart (compare), as a file's inode does
        shown = printable(_url(fs, path))
        if any(part in ("", "..") for part in key.split("/")):  # never a path, but never read as one either
            found.ignored.append(SkippedFile(shown, "a key with an empty or '..' part: not read"))
            continue
        if (rank := stack_rank(key)) is not None:
            found.stacks.append((rank, _url(fs, path)))
            continue
        parts = split_name(key.rsplit("/", 1)[-1], prefix)
        if isinstance(parts, str):
            found.ignored.append(SkippedFile(shown, parts))
            continue
        dump_file = placed(_url(fs, path), key, parts)
        if size is not None and size > MAX_DUMP_BYTES:
            found.unreadable.append((dump_file, over_the_cap(MAX_DUMP_BYTES, size)))
        elif size == 0:
            found.empty.append(dump_file)
        else:
            heads.append((dump_file, path))
    if heads:
        try:
            read = _first_bytes(fs, [path for _, path in heads])
        except Exception as exc:  # noqa: BLE001 - the store went away between the listing and the reads
            raise UsageError(f"{printable(url)}: cannot read its objects ({reason(exc)}); check the "
                             "endpoint and the credentials") from None
        for (dump_file, _), head in zip(heads, read):
            if isinstance(head, BaseException):
                found.unreadable.append((dump_file, f"cannot read it ({reason(head)})"))
            elif not head:
                found.empty.append(dump_file)
            else:
                found.sniffed(dump_file, bytes(head[:MARKED_BYTES]))
    if any(key == SNAPSHOT_MANIFEST for _, key, _ in objects):  # frtrace live's snapshot, kept in a store
        live_snapshot_in(_url(fs, root.rstrip("/")), found, read_small_object)
    return finish(found, prefix is not None)


def is_http(fs: Any) -> bool:
    return "http" in fs.protocol or "https" in fs.protocol


def _open(fs: Any, path: str):
    """An object opened for reading in chunks: over HTTP streamed from its start (a server may
    ignore Range), elsewhere by ranged reads of _CHUNK bytes."""
    return fs.open(path, "rb", block_size=0 if is_http(fs) else _CHUNK)


def _read_up_to(handle, size: int) -> bytes:
    """`size` bytes of a file opened by fsspec, fewer only at its end: a streamed HTTP file's read
    gives what has arrived (64 KiB of a 3 MiB stack file)."""
    data = bytearray()
    while len(data) < size and (chunk := handle.read(min(_CHUNK, size - len(data)))):
        data += chunk
    return bytes(data)


def _first_bytes(fs: Any, paths: list[str]) -> list[bytes | BaseException]:
    """The first MARKED_BYTES of each object (an exception where it failed): ranged reads in
    batches, concurrently where the store does them so; streamed over HTTP, where a server may
    ignore the range and send the whole file."""
    if is_http(fs):
        from concurrent.futures import ThreadPoolExecutor

        def head(path: str) -> bytes | BaseException:
            try:
                with _open(fs, path) as handle:
                    return _read_up_to(handle, MARKED_BYTES)
            except Exception as exc:  # noqa: BLE001 - costs this file
                return exc

        with ThreadPoolExecutor(_HTTP_READERS) as pool:
            return list(pool.map(head, paths))
    read: list[bytes | BaseException] = []
    for start in range(0, len(paths), _HEADS_AT_ONCE):
        read += fs.cat_ranges(paths[start:start + _HEADS_AT_ONCE], 0, MARKED_BYTES, on_error="return")
    return read


def open_object(url: str):
    """An object opened for reading as a file (an archive, read member by member by ranged
    reads); OSError where it cannot be opened."""
    fs, path = filesystem(url)
    try:
        return fs.open(path, "rb", block_size=_CHUNK)
    except Exception as exc:  # noqa: BLE001 - whatever the protocol's library raises
        raise OSError(0, reason(exc)) from None


def read_small_object(url: str, cap: int) -> bytes:
    """An object of at most `cap` bytes (a stack file), read whole; OSError where it cannot be
    read, ValueError where it is larger (as limits.read_small)."""
    fs, path = filesystem(url)
    try:
        with _open(fs, path) as handle:
            data = _read_up_to(handle, cap + 1)
    except Exception as exc:  # noqa: BLE001 - whatever the protocol's library raises costs this file
        raise OSError(0, reason(exc)) from None
    if len(data) > cap:
        raise ValueError(f"over {cap >> 20} MiB; not read")
    return data


def read_object(url: str) -> bytes:
    """A dump's bytes, read by a worker and never past the dump size cap: in one ranged read of
    at most the cap and a byte (one request: opening it as a file asks for its size first, a
    second request, which doubled the reading's CPU), or over HTTP streamed a chunk at a time (a
    server may ignore the range). A DumpError naming the URL where it cannot be read."""
    fs, path = filesystem(url)
    try:
        if is_http(fs):
            with _open(fs, path) as handle:
                data = _read_up_to(handle, MAX_DUMP_BYTES + 1)
        else:
            data = fs.cat_file(path, start=0, end=MAX_DUMP_BYTES + 1)
    except Exception as exc:  # noqa: BLE001 - whatever the protocol's library raises costs this file
        raise DumpError(url, f"cannot read it ({reason(exc)})") from None
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(url, over_the_cap(MAX_DUMP_BYTES))
    return data
