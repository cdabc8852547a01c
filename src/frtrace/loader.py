"""Read per-rank dump files into typed Dump records.

A dump is data and must never run code: pickles go through an unpickler that refuses every
global (so no callable can be named, let alone called), and files are opened non-blocking and
checked to be regular before a byte is read. Every format version is normalized here, once, by
looking at the fields that are present rather than at the version string.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from . import fastpath
from . import workers as worker_processes
from .discover import Discovery, DumpFile
from .errors import DumpError, display_path
from .fastpath import dtype_name, split_profiling_name
from .runs import make_runs
from .types import Dump, Entry, EntryColumns, Frame, GroupConfig, LoadResult, SkippedFile

_P2P_PREFIXES = ("send", "recv")
_RANKS_TEXT = re.compile(r"^\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]$")


class _Refused(Exception):
    pass


class _DataOnlyUnpickler(pickle.Unpickler):
    """Builds only dicts, lists, tuples, strings, numbers, bools and None."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


class _BadEntry(Exception):
    pass


def read_raw(path: str) -> tuple[Any, str]:
    """The raw object held by a dump file, and "pickle" or "json" (sniffed from the bytes)."""
    try:
        # O_NONBLOCK: a FIFO that replaced the file since discovery must not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise DumpError(path, f"cannot open it ({exc.strerror}); check its permissions") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DumpError(path, "not a regular file; not read")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError as exc:
        raise DumpError(path, f"cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)

    if not data:
        raise DumpError(path, "empty file (the rank may have been killed before it dumped); leave it out or re-dump")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(data), "json"
        except (ValueError, RecursionError) as exc:
            raise DumpError(path, f"not valid JSON ({_short(exc)}); the file is truncated or damaged, re-dump the rank or leave it out") from None
    try:
        return _DataOnlyUnpickler(io.BytesIO(data)).load(), "pickle"
    except _Refused as exc:
        raise DumpError(path, f"refused: the pickle asks for {exc}, and a dump holds only data; do not trust this file") from None
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
        if isinstance(exc, EOFError) or "truncated" in str(exc):
            raise DumpError(path, "truncated pickle (the rank was likely killed mid-write); re-dump it or leave it out") from None
        raise DumpError(path, f"not a readable pickle or JSON dump ({_short(exc)}); leave it out") from None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


def parse_version(value: Any) -> tuple[int, int] | None:
    """"2.10" -> (2, 10); None when the value is not a "major.minor" string."""
    if not isinstance(value, str):
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", value)
    return (int(match.group(1)), int(match.group(2))) if match else None


class _Normalizer:
    """Turns one raw dump into typed records, sharing equal tuples and strings to save memory."""

    def __init__(self, rank: int, path: str) -> None:
        self.rank = rank
        self.path = path
        self.shapes: dict[Any, tuple] = {}
        self.stacks: dict[tuple[Frame, ...], int] = {}
        self.notes: list[str] = []

    # -- scalars
    def integer(self, raw: dict, key: str, where: str, default: Any = ...) -> int | None:
        value = raw.get(key, default)
        if value is ...:
            raise _BadEntry(f"{where}: '{key}' is missing")
        if value is None and default is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where an integer belongs")

    def optional_time(self, raw: dict, key: str, where: str) -> int | None:
        value = raw.get(key)
        if isinstance(value, float) and value == value and abs(value) < 2**63:  # a JSON writer's float
            value = int(value)
        else:
            value = self.integer(raw, key, where, None)
        return value or None  # JSON writes 0 for unset

    def text(self, raw: dict, key: str, where: str, default: Any = ...) -> str:
        value = raw.get(key, default)
        if value is ...:
            raise _BadEntry(f"{where}: '{key}' is missing")
        if not isinstance(value, str):
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where a string belongs")
        return sys.intern(value)

    def shapes_of(self, raw: dict, key: str, where: str) -> tuple:
        value = raw.get(key, ...)
        if value is ...:
            raise _BadEntry(f"{where}: '{key}' is missing")
        cache_key = _freeze(value)
        cached = self.shapes.get(cache_key) if cache_key is not None else None
        if cached is not None:
            return cached
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(shape, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
            for shape in value
        ):
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where a list of shapes belongs")
        result = tuple(tuple(shape) for shape in value)
        if cache_key is not None:
            self.shapes[cache_key] = result
        return result

    def dtypes_of(self, raw: dict, key: str, where: str) -> tuple:
        value = raw.get(key, [])
        frozen = _freeze(value)
        cache_key = ("dtypes", frozen) if frozen is not None else None
        cached = self.shapes.get(cache_key) if cache_key is not None else None
        if cached is not None:
            return cached
        if not isinstance(value, (list, tuple)) or not all(isinstance(d, str) for d in value):
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where a list of dtype names belongs")
        result = tuple(map(dtype_name, value))
        if cache_key is not None:
            self.shapes[cache_key] = result
        return result

    def stack_id(self, raw: dict) -> int:
        frames = raw.get("frames")
        if not frames or not isinstance(frames, list):
            return -1
        stack = tuple(
            Frame(str(f.get("name", "?")), str(f.get("filename", "?")), f.get("line") if isinstance(f.get("line"), int) else 0)
            for f in frames
            if isinstance(f, dict)
        )
        return self.stacks.setdefault(stack, len(self.stacks))

    # -- records
    def entry(self, raw: Any, index: int) -> Entry:
        where = f"entry {index}"
        if not isinstance(raw, dict):
            raise _BadEntry(f"{where} is {_shown(raw)} where a dict belongs")
        backend, op = split_profiling_name(self.text(raw, "profiling_name", where, ""))
        is_p2p = raw.get("is_p2p")
        if not isinstance(is_p2p, bool):
            is_p2p = op.startswith(_P2P_PREFIXES)

        pg_id = raw.get("pg_id")
        group = raw.get("process_group")
        if isinstance(group, (list, tuple)) and len(group) == 2 and all(isinstance(g, str) for g in group):
            pg_name, pg_desc = sys.intern(group[0]), sys.intern(group[1])
        elif group is None and isinstance(pg_id, int):
            pg_name, pg_desc = sys.intern(str(pg_id)), ""
        else:
            raise _BadEntry(f"{where}: 'process_group' is {_shown(group)} where a (name, desc) pair belongs")

        if "collective_seq_id" in raw or "p2p_seq_id" in raw:
            collective_seq_id = self.integer(raw, "collective_seq_id", where)
            p2p_seq_id = self.integer(raw, "p2p_seq_id", where, 0)
        else:  # before 2.0 one counter served both kinds
            seq = self.integer(raw, "seq_id", where)
            collective_seq_id, p2p_seq_id = (0, seq) if is_p2p else (seq, 0)

        state = self.text(raw, "state", where, "scheduled")
        duration = raw.get("duration_ms")
        return Entry(
            rank=self.rank,
            index=index,
            record_id=self.integer(raw, "record_id", where, None),
            pg_name=pg_name,
            pg_desc=pg_desc,
            collective_seq_id=collective_seq_id,
            p2p_seq_id=p2p_seq_id,
            op=op,
            backend=backend,
            input_sizes=self.shapes_of(raw, "input_sizes", where),
            output_sizes=self.shapes_of(raw, "output_sizes", where),
            input_dtypes=self.dtypes_of(raw, "input_dtypes", where),
            output_dtypes=self.dtypes_of(raw, "output_dtypes", where),
            state=state,
            is_p2p=is_p2p,
            time_created_ns=self.optional_time(raw, "time_created_ns", where),
            time_started_ns=self.optional_time(raw, "time_discovered_started_ns", where),
            time_completed_ns=self.optional_time(raw, "time_discovered_completed_ns", where),
            duration_ms=float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None,
            stack_id=self.stack_id(raw),
        )

    def group_configs(self, raw: Any) -> tuple[GroupConfig, ...]:
        if not isinstance(raw, dict):
            return ()
        configs = []
        for key, value in raw.items():
            if isinstance(value, dict):
                name = value.get("name", key)
                desc = value.get("desc", "")
                ranks = value.get("ranks")
            else:  # 1.4: {pg_id: [ranks]}
                name, desc, ranks = key, "", value
            if isinstance(ranks, str):
                parsed = _parse_ranks_text(ranks)
                if parsed is None:
                    self.notes.append(f"pg_config of group {name!r} has ranks {ranks[:40]!r}, not a list of numbers; ignored")
                    continue
                ranks = parsed
            if not isinstance(ranks, (list, tuple)) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
                continue
            name = str(name)
            if not name or not ranks:  # the placeholder real gloo dumps carry
                continue
            configs.append(GroupConfig(sys.intern(name), sys.intern(str(desc)), tuple(sorted(set(ranks)))))
        return tuple(configs)


@lru_cache(maxsize=256)
def _parse_ranks_text(text: str) -> tuple[int, ...] | None:
    """"[0, 1, 2]" -> (0, 1, 2), never by eval. Every rank's dump repeats the world's list: cached."""
    if not _RANKS_TEXT.match(text.strip()):
        return None
    return tuple(int(r) for r in re.findall(r"\d+", text))


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a raw value, for the intern cache; None when there is none."""
    if isinstance(value, (list, tuple)):
        parts = tuple(_freeze(v) for v in value)
        return None if any(p is None for p in parts) else parts
    if isinstance(value, (int, str, float)):  # bool is an int; None has no stand-in
        return (type(value), value)
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def normalize(raw: Any, rank: int, path: str, file_format: str) -> Dump:
    """Typed Dump from the raw object of one file; DumpError when its shape is not a dump's."""
    return _Shared().dump(compact(raw, rank, path, file_format))


@dataclass(frozen=True, slots=True)
class CompactDump:
    """One dump reduced to what the analysis needs, by column: cheap to send between processes."""

    rank: int
    path: str
    file_format: str
    version: tuple[int, int]
    entries: EntryColumns
    group_configs: tuple[GroupConfig, ...]
    stacks: tuple[tuple[Frame, ...], ...]
    notes: tuple[str, ...]


def compact(raw: Any, rank: int, path: str, file_format: str) -> CompactDump:
    """The compact form of one raw dump: the fast path, or the careful one where it must."""
    normalizer = _Normalizer(rank, path)
    if isinstance(raw, list):  # before version 1.0: a bare list of entries
        version, raw_entries, raw_configs = (0, 0), raw, None
    elif isinstance(raw, dict):
        if not ({"entries", "version", "pg_config"} & raw.keys()):
            raise DumpError(path, "a dict without 'entries', 'version' or 'pg_config': not a Flight Recorder dump; leave it out")
        parsed = parse_version(raw.get("version"))
        if parsed is None:
            normalizer.notes.append(f"unknown version {raw.get('version')!r}; read by the fields present")
            parsed = (0, 0)
        version = parsed
        raw_entries = raw.get("entries", [])
        raw_configs = raw.get("pg_config")
        if not isinstance(raw_entries, list):
            raise DumpError(path, f"'entries' is {_shown(raw_entries)} where a list belongs; the file is damaged, leave it out")
    else:
        raise DumpError(path, f"holds {type(raw).__name__} {_shown(raw)}, not a Flight Recorder dump; leave it out")

    entries = fastpath.fast_columns(raw_entries, rank, normalizer.stacks)
    if entries is None:
        normalizer.stacks.clear()  # the fast path may have stopped half way through the frames
        try:
            entries = EntryColumns.from_entries(rank, [normalizer.entry(e, i) for i, e in enumerate(raw_entries)])
        except _BadEntry as exc:
            raise DumpError(path, f"{exc}; the dump is damaged or from an unknown writer, re-dump the rank or leave the file out") from None
    entries.runs = make_runs(entries)  # made here, in the worker, and sent along
    stacks = tuple(normalizer.stacks)  # stack ids were given in insertion order
    return CompactDump(rank, path, file_format, version, entries, normalizer.group_configs(raw_configs), stacks,
                       tuple(normalizer.notes))


class _Shared:
    """One object for each equal kind and group config across the dumps of one load: every rank
    lists the world group and repeats the same few kinds."""

    def __init__(self) -> None:
        self.values: dict = {}

    def dump(self, part: CompactDump) -> Dump:
        entries = part.entries
        entries.kinds = tuple(self.values.setdefault(k, k) for k in entries.kinds)
        entries.states = tuple(self.values.setdefault(s, s) for s in entries.states)
        group_configs = tuple(self.values.setdefault(c, c) for c in part.group_configs)
        return Dump(part.rank, part.path, part.file_format, part.version, entries, group_configs, part.stacks, part.notes)


def read_dump(path: str, rank: int) -> Dump:
    """Read and normalize one dump file; DumpError names the file and what to do."""
    raw, file_format = read_raw(path)
    return normalize(raw, rank, path, file_format)


def _load_one(job: tuple[str, int]) -> CompactDump | DumpError:
    """Read one file into its compact form; runs in a worker process. Errors come back as values."""
    path, rank = job
    try:
        raw, file_format = read_raw(path)
        return compact(raw, rank, path, file_format)
    except DumpError as exc:
        return exc
    except Exception as exc:  # a bug of ours must cost one rank, not the analysis
        return DumpError(path, f"could not be read ({type(exc).__name__}: {_short(exc)}); please report this")


_POOL_MIN_FILES = 16  # below this, starting worker processes costs more than it saves


def _load_all(jobs: list[tuple[str, int]], workers: int, progress: bool) -> Iterator[CompactDump | DumpError]:
    """Results in job order; in worker processes when there is enough to share."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="loading dumps", unit="file", file=sys.stderr, leave=False)
    try:
        if workers <= 1 or len(jobs) < _POOL_MIN_FILES:
            results = map(_load_one, jobs)
        else:
            results = worker_processes.in_workers(_load_one, jobs, min(workers, len(jobs)))
        for result in results:
            yield result
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()


def load_dumps(discovery: Discovery, *, progress: bool = False, workers: int = 1) -> LoadResult:
    """Read every rank's dump; a file that cannot be used is skipped with its reason.

    `workers` > 1 reads files in that many processes, each sending back a compact form. When a
    rank has several files (pickle and JSON, or two prefixes) the first readable one in discovery
    order is used and the others are noted (same name, other format) or reported as skipped.
    """
    choices: dict[int, list[DumpFile]] = {}
    for dump_file in discovery.files:
        choices.setdefault(dump_file.rank, []).append(dump_file)
    skipped: list[SkippedFile] = list(discovery.skipped)
    notes: list[str] = [f"{path}: ignored, the name does not end in a rank number" for path in discovery.ignored]
    dumps: dict[int, Dump] = {}
    used: dict[int, DumpFile] = {}
    shared = _Shared()

    def take(rank: int, dump_file: DumpFile, result: CompactDump | DumpError) -> None:
        if isinstance(result, DumpError):
            skipped.append(SkippedFile(display_path(result.path), result.reason))
        else:
            dumps[rank] = shared.dump(result)
            used[rank] = dump_file

    firsts = [files[0] for files in choices.values()]
    for dump_file, result in zip(firsts, _load_all([(f.path, f.rank) for f in firsts], workers, progress)):
        take(dump_file.rank, dump_file, result)
    for rank, files in choices.items():
        for dump_file in files[1:]:
            if rank not in used:  # the first choice failed: fall back to the next file
                take(rank, dump_file, _load_one((dump_file.path, rank)))
            elif used[rank].prefix == dump_file.prefix:  # the same dump in the other format
                notes.append(f"{display_path(dump_file.path)}: another format of {display_path(used[rank].path)}; not read")
            else:
                skipped.append(SkippedFile(display_path(dump_file.path),
                                           f"a second dump for rank {rank}, which was read from {display_path(used[rank].path)}; "
                                           "pass --prefix to choose between them"))
    ranks_named = frozenset(choices)
    return LoadResult(dict(sorted(dumps.items())), tuple(skipped), ranks_named, tuple(notes))
