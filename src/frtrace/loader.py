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
import signal
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from operator import itemgetter, methodcaller
from typing import Any

from .discover import Discovery, DumpFile
from .errors import DumpError, display_path
from .types import ENTRY_FIELDS, Dump, Entry, Frame, GroupConfig, LoadResult, SkippedFile

_P2P_PREFIXES = ("send", "recv")
_DTYPE_NAMES = {
    "float": "Float", "double": "Double", "half": "Half", "bfloat16": "BFloat16", "c10::bfloat16": "BFloat16",
    "c10::half": "Half", "int": "Int", "long": "Long", "short": "Short", "char": "Char", "bool": "Bool",
    "unsigned char": "Byte", "signed char": "Char", "int64_t": "Long", "int32_t": "Int", "uint8_t": "Byte",
}
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
        result = tuple(sys.intern(_DTYPE_NAMES.get(d.lower(), d)) for d in value)
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
        name = self.text(raw, "profiling_name", where, "")
        backend, sep, op = name.partition(":")
        if not sep:
            backend, op = "", name
        op = sys.intern(op.strip())
        backend = sys.intern(backend)
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
    return _build_dump(compact(raw, rank, path, file_format))


@dataclass(frozen=True, slots=True)
class CompactDump:
    """One dump reduced to what the analysis needs, by column: cheap to send between processes."""

    rank: int
    path: str
    file_format: str
    version: tuple[int, int]
    columns: tuple[tuple, ...]  # one per Entry field after rank and index
    count: int
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

    fast = _fast_columns(raw_entries, normalizer)
    if fast is not None:
        columns, stacks = fast
    else:
        try:
            entries = [normalizer.entry(e, i) for i, e in enumerate(raw_entries)]
        except _BadEntry as exc:
            raise DumpError(path, f"{exc}; the dump is damaged or from an unknown writer, re-dump the rank or leave the file out") from None
        columns = tuple(zip(*entries))[2:] if entries else ((),) * (len(ENTRY_FIELDS) - 2)
        stacks = tuple(stack for stack, _ in sorted(normalizer.stacks.items(), key=lambda item: item[1]))
    return CompactDump(rank, path, file_format, version, columns, len(raw_entries),
                       normalizer.group_configs(raw_configs), stacks, tuple(normalizer.notes))


_SMALL_INTS = tuple(range(1 << 16))


def _shared_ints(column: tuple) -> tuple:
    """The column with small ints replaced by one shared object each: 28 bytes saved per value."""
    try:
        if column and min(column) >= 0 and max(column) < len(_SMALL_INTS):
            return tuple(map(_SMALL_INTS.__getitem__, column))
    except TypeError:  # None among them (formats before 1.4 have no record_id)
        pass
    return column


def _shared_values(column: tuple) -> tuple:
    seen: dict = {}
    return tuple(map(seen.setdefault, column, column))


_INT_COLUMNS = {ENTRY_FIELDS.index(name) - 2 for name in ("record_id", "collective_seq_id", "p2p_seq_id")}
_VALUE_COLUMNS = {ENTRY_FIELDS.index(name) - 2 for name in ("duration_ms", "stack_id")}


def _build_dump(part: CompactDump, configs: dict[GroupConfig, GroupConfig] | None = None) -> Dump:
    """Entries from columns: one C-level map over the columns, equal small values shared."""
    columns = [
        _shared_ints(column) if i in _INT_COLUMNS else _shared_values(column) if i in _VALUE_COLUMNS else column
        for i, column in enumerate(part.columns)
    ]
    index = _SMALL_INTS[:part.count] if part.count <= len(_SMALL_INTS) else range(part.count)
    entries = tuple(map(Entry, repeat(part.rank, part.count), index, *columns))
    # every rank lists the world group: `configs`, shared by one load, keeps one copy of each
    shared = configs if configs is not None else {}
    group_configs = tuple(shared.setdefault(config, config) for config in part.group_configs)
    return Dump(part.rank, part.path, part.file_format, part.version, entries, group_configs, part.stacks, part.notes)


# The fast path. Entries of one dump repeat the same few groups, ops, shapes and dtypes, so every
# field of every entry is fetched at C speed (itemgetter over the list), and validation and
# interning run once per distinct value, not once per entry. Any irregularity (a missing key, an
# odd type, an old format) returns None, and the careful path reads the dump field by field.
_FAST_KEYS = ("record_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name",
              "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state", "is_p2p")
_FAST_OPTIONAL = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms", "frames")
_fetch = itemgetter(*_FAST_KEYS)
_INT = {int}
_OPTIONAL_INT = {int, type(None)}
_NUMBER = {int, float, type(None)}
_frame_fields = itemgetter("name", "filename", "line")


def _shape_key(shapes: Any) -> tuple:
    return tuple(map(tuple, shapes))


def _fast_columns(raw_entries: list, normalizer: "_Normalizer"):
    if not raw_entries:
        return ((),) * (len(ENTRY_FIELDS) - 2), ()
    try:
        rows = list(map(_fetch, raw_entries))
        optional = [list(map(methodcaller("get", key), raw_entries)) for key in _FAST_OPTIONAL]
    except (KeyError, TypeError, AttributeError):
        return None
    (record_ids, groups, coll_seqs, p2p_seqs, names, sizes_in, sizes_out,
     dtypes_in, dtypes_out, states, p2p_flags) = zip(*rows)
    created, started, completed, durations, frames = optional

    if not (set(map(type, coll_seqs)) <= _INT and set(map(type, p2p_seqs)) <= _INT
            and set(map(type, record_ids)) <= _OPTIONAL_INT and set(map(type, p2p_flags)) <= {bool}
            and set(map(type, created)) <= _OPTIONAL_INT and set(map(type, started)) <= _OPTIONAL_INT
            and set(map(type, completed)) <= _OPTIONAL_INT and set(map(type, durations)) <= _NUMBER
            and set(map(type, names)) <= {str} and set(map(type, states)) <= {str}):
        return None
    try:
        groups = list(map(tuple, groups))
        shapes_in = list(map(_shape_key, sizes_in))
        shapes_out = list(map(_shape_key, sizes_out))
        types_in = list(map(tuple, dtypes_in))
        types_out = list(map(tuple, dtypes_out))
        distinct_shapes = set(shapes_in) | set(shapes_out)
        distinct_types = set(types_in) | set(types_out)
        distinct_groups = set(groups)
    except TypeError:  # something unhashable or not a sequence
        return None
    if not all(type(d) is int for shape_list in distinct_shapes for shape in shape_list for d in shape):
        return None
    if not all(type(d) is str for dtype_list in distinct_types for d in dtype_list):
        return None
    if not all(len(g) == 2 and type(g[0]) is str and type(g[1]) is str for g in distinct_groups):
        return None
    if any(isinstance(s, str) for s in sizes_in + sizes_out):  # a string is a sequence too
        return None

    shape_of = {s: s for s in distinct_shapes}
    dtype_of = {t: tuple(sys.intern(_DTYPE_NAMES.get(d.lower(), d)) for d in t) for t in distinct_types}
    group_of = {g: (sys.intern(g[0]), sys.intern(g[1])) for g in distinct_groups}
    name_of = {}
    for name in set(names):
        backend, sep, op = name.partition(":")
        name_of[name] = (sys.intern(backend), sys.intern(op.strip())) if sep else ("", sys.intern(name.strip()))
    stack_ids = _fast_stacks(frames, normalizer)
    if stack_ids is None:
        return None

    pg = list(map(group_of.__getitem__, groups))
    op = list(map(name_of.__getitem__, names))
    columns = (
        record_ids,
        tuple(g[0] for g in pg),
        tuple(g[1] for g in pg),
        coll_seqs,
        p2p_seqs,
        tuple(o[1] for o in op),
        tuple(o[0] for o in op),
        tuple(map(shape_of.__getitem__, shapes_in)),
        tuple(map(shape_of.__getitem__, shapes_out)),
        tuple(map(dtype_of.__getitem__, types_in)),
        tuple(map(dtype_of.__getitem__, types_out)),
        tuple(map(sys.intern, states)),
        p2p_flags,
        tuple(v or None for v in created),
        tuple(v or None for v in started),  # JSON writes 0 for unset
        tuple(v or None for v in completed),
        tuple(None if v is None else float(v) for v in durations),
        stack_ids,
    )
    stacks = tuple(stack for stack, _ in sorted(normalizer.stacks.items(), key=lambda item: item[1]))
    return columns, stacks


def _fast_stacks(frames: list, normalizer: "_Normalizer") -> tuple | None:
    by_object: dict[int, int] = {}  # pickles share one frames list between entries: key on it
    by_fields: dict[tuple, int] = {}
    ids = []
    for frame_list in frames:
        if not frame_list:
            ids.append(-1)
            continue
        known = by_object.get(id(frame_list))
        if known is None:
            if type(frame_list) is not list:
                return None
            try:
                fields = tuple(map(_frame_fields, frame_list))
            except (KeyError, TypeError):
                return None
            known = by_fields.get(fields)
            if known is None:
                stack = tuple(Frame(str(n), str(f), ln if type(ln) is int else 0) for n, f, ln in fields)
                known = by_fields[fields] = normalizer.stacks.setdefault(stack, len(normalizer.stacks))
            by_object[id(frame_list)] = known
        ids.append(known)
    return tuple(ids)


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


def _worker(jobs: list[tuple[str, int]], connection) -> None:
    """A worker process: its share of the files, each result sent back in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    try:
        for job in jobs:
            connection.send(_load_one(job))
    except (BrokenPipeError, EOFError):  # the main process stopped listening
        pass
    finally:
        connection.close()


def _in_workers(jobs: list[tuple[str, int]], workers: int) -> Iterator[CompactDump | DumpError]:
    """Results in job order from `workers` processes, worker i taking jobs i, i + n, i + 2n...

    No shared queue or lock: each worker has its own pipe, so stopping early (Ctrl-C) is only
    killing the workers, which cannot leave anything locked behind.
    """
    import multiprocessing
    import threading

    context = multiprocessing.get_context()
    in_main_thread = threading.current_thread() is threading.main_thread()
    # Ctrl-C ignored while forking, so no child can catch one before it ignores it itself.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    processes, pipes = [], []
    try:
        for i in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(jobs[i::workers], sender), daemon=True)
            process.start()
            sender.close()
            processes.append(process)
            pipes.append(receiver)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
    try:
        for i in range(len(jobs)):
            try:
                yield pipes[i % workers].recv()
            except EOFError:  # the worker died (killed, out of memory): its files count as unread
                path, rank = jobs[i]
                yield DumpError(path, "the worker process reading it died; run again with --jobs 1 to see why")
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join()
        for pipe in pipes:
            pipe.close()


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
            results = _in_workers(jobs, min(workers, len(jobs)))
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
    configs: dict[GroupConfig, GroupConfig] = {}

    def take(rank: int, dump_file: DumpFile, result: CompactDump | DumpError) -> None:
        if isinstance(result, DumpError):
            skipped.append(SkippedFile(display_path(result.path), result.reason))
        else:
            dumps[rank] = _build_dump(result, configs)
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
