"""Read per-rank dump files into typed Dump records.

Each file is read and parsed by safe_read (a dump is data and must never run code), in worker
processes. Every format version is normalized here, once, by looking at the fields that are
present rather than at the version string.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from operator import methodcaller
from typing import Any

from .reading import fastpath, progress
from .reading import wire
from .reading import workers as worker_processes
from .reading.discover import Discovery, DumpFile
from .errors import DumpError, InternalError, LimitError, display_path, printable
from .reading.fastpath import clean_text, dtype_name, is_p2p_name, split_profiling_name
from .reading.groups import distinct_configs, is_default_group, outvoted_configs, replica_size
from .reading.limits import MAX_DIMS, MAX_ENTRIES, MAX_FRAMES, MAX_INT, MAX_RANK, MAX_SHAPES, MAX_TEXT, memory_limit_text
from .reading.safe_read import HugeInt, read_raw, short_reason
from .reading.runs import make_runs
from .types import (
    SEQ_PER_GROUP,
    SEQ_PROCESS,
    SEQ_PROCESS_WRAPPED,
    SEQ_UNCLEAR,
    Dump,
    Entry,
    EntryColumns,
    Frame,
    GroupConfig,
    GroupMoment,
    HealthCheck,
    LoadResult,
    SkippedFile,
    code_column,
    int_column,
)

_RANKS_TEXT = re.compile(r"^\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]$")


class _BadEntry(Exception):
    pass


def parse_version(value: Any) -> tuple[int, int] | None:
    """"2.10" -> (2, 10); None when the value is not a "major.minor" string."""
    if not isinstance(value, str):
        return None
    match = re.match(r"^\s*(\d{1,6})\.(\d{1,6})", value)
    return (int(match.group(1)), int(match.group(2))) if match else None


class _Normalizer:
    """Turns one raw dump into typed records field by field: the careful path, for dumps the
    fast path will not take. Every raw value is type-checked, level by level and within the caps
    of limits.py, before it is hashed, converted or shown; values met again through shared
    references are checked once (caches keyed by object identity, valid while the raw dump lives).
    """

    def __init__(self, rank: int, path: str) -> None:
        self.rank = rank
        self.path = path
        self.shapes: dict[int, tuple | None] = {}  # id(raw list) -> its shapes, None when invalid
        self.dims: dict[int, tuple | None] = {}  # id(raw shape) -> its dims, None when invalid
        self.dtypes: dict[int, tuple | None] = {}
        self.stacks: dict[tuple[Frame, ...], int] = {}
        self.stack_of: dict[int, int] = {}  # id(raw frames list) -> stack id
        self.notes: list[str] = []
        self.dropped: dict[str, list] = {}  # field -> [first problem, count]: one note per field

    def drop(self, key: str, problem: str) -> None:
        """A bad optional field costs the field, not the rank: noted once per field."""
        seen = self.dropped.setdefault(key, [problem, 0])
        seen[1] += 1

    def drop_notes(self) -> list[str]:
        return [f"{problem}; the field was dropped" + (f" (in {count} entries)" if count > 1 else "")
                for problem, count in self.dropped.values()]

    # -- scalars
    def integer(self, raw: dict, key: str, where: str, default: Any = ...) -> int | None:
        value = raw.get(key, default)
        if value is ...:
            raise _BadEntry(f"{where}: '{key}' is missing")
        if value is None and default is None:
            return None
        if isinstance(value, str) and 0 < len(value.strip()) <= 20 and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if -MAX_INT - 1 <= value <= MAX_INT:
                return value
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)}, beyond a 64-bit integer")
        raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where an integer belongs")

    def optional_integer(self, raw: dict, key: str, where: str) -> int | None:
        try:
            return self.integer(raw, key, where, None)
        except _BadEntry as exc:
            self.drop(key, str(exc))
            return None

    def optional_time(self, raw: dict, key: str, where: str) -> int | None:
        value = raw.get(key)
        if isinstance(value, float):  # a JSON writer's float; NaN and inf are no time
            if value == value and abs(value) <= MAX_INT:
                return int(value) or None
            self.drop(key, f"{where}: '{key}' is {_shown(value)} where a time belongs")
            return None
        return self.optional_integer(raw, key, where) or None  # JSON writes 0 for unset

    def text(self, raw: dict, key: str, where: str, default: Any = ...) -> str:
        value = raw.get(key, default)
        if value is ...:
            raise _BadEntry(f"{where}: '{key}' is missing")
        if not isinstance(value, str):
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where a string belongs")
        return clean_text(value)

    def shapes_of(self, raw: dict, key: str, where: str) -> tuple:
        value = raw.get(key, ...)
        if value is ...:
            raise _BadEntry(f"{where}: '{key}' is missing")
        found = self.shapes.get(id(value), ...)
        if found is ...:
            found = self.shapes[id(value)] = self._shapes(value)
        if found is None:
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where a list of shapes belongs")
        return found

    def _shapes(self, value: Any) -> tuple | None:
        if type(value) not in (list, tuple) or len(value) > MAX_SHAPES:
            return None
        shapes = []
        for shape in value:
            dims = self.dims.get(id(shape), ...)
            if dims is ...:
                ok = (type(shape) in (list, tuple) and len(shape) <= MAX_DIMS
                      and all(type(d) is int and -1 <= d <= MAX_INT for d in shape))
                dims = self.dims[id(shape)] = tuple(shape) if ok else None
            if dims is None:
                return None
            shapes.append(dims)
        return tuple(shapes)

    def dtypes_of(self, raw: dict, key: str, where: str) -> tuple:
        value = raw.get(key, [])
        found = self.dtypes.get(id(value), ...)
        if found is ...:
            ok = (type(value) in (list, tuple) and len(value) <= MAX_SHAPES
                  and all(type(d) is str and len(d) <= MAX_TEXT for d in value))
            found = self.dtypes[id(value)] = tuple(dtype_name(clean_text(d)) for d in value) if ok else None
        if found is None:
            raise _BadEntry(f"{where}: '{key}' is {_shown(value)} where a list of dtype names belongs")
        return found

    def stack_id(self, raw: dict, where: str) -> int:
        frames = raw.get("frames")
        if not frames:
            return -1
        known = self.stack_of.get(id(frames))
        if known is not None:
            return known
        if type(frames) is not list or len(frames) > MAX_FRAMES:
            self.drop("frames", f"{where}: 'frames' is {_shown(frames)} where a list of up to {MAX_FRAMES} frames belongs")
            return -1
        stack = []
        for frame in frames:
            if type(frame) is not dict:
                self.drop("frames", f"{where}: a frame is {_shown(frame)} where a dict belongs")
                return -1
            name, filename, line = frame.get("name"), frame.get("filename"), frame.get("line")
            if type(name) is not str or type(filename) is not str or not (type(line) is int and 0 <= line <= MAX_INT):
                self.drop("frames", f"{where}: a frame holds {_shown(name)}, {_shown(filename)}, {_shown(line)} "
                                    "where a name, a file name and a line number belong")
                return -1
            stack.append(Frame(clean_text(name), clean_text(filename), line))
        known = self.stack_of[id(frames)] = self.stacks.setdefault(tuple(stack), len(self.stacks))
        return known

    # -- records
    def entry(self, raw: Any, index: int) -> Entry:
        where = f"entry {index}"
        if not isinstance(raw, dict):
            raise _BadEntry(f"{where} is {_shown(raw)} where a dict belongs")
        backend, op = split_profiling_name(self.text(raw, "profiling_name", where, ""))
        is_p2p = raw.get("is_p2p") is True or is_p2p_name(op)

        pg_id = raw.get("pg_id")
        group = raw.get("process_group")
        if isinstance(group, (list, tuple)) and len(group) == 2 and all(isinstance(g, str) for g in group):
            pg_name, pg_desc = clean_text(group[0]), clean_text(group[1])
        elif group is None and type(pg_id) is int and 0 <= pg_id <= MAX_INT:
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
        if isinstance(duration, bool) or not (duration is None or isinstance(duration, (int, float))) or (
                isinstance(duration, (int, float)) and not abs(duration) <= MAX_INT):  # NaN fails <=
            self.drop("duration_ms", f"{where}: 'duration_ms' is {_shown(duration)} where milliseconds belong")
            duration = None
        return Entry(
            rank=self.rank,
            index=index,
            record_id=self.optional_integer(raw, "record_id", where),
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
            duration_ms=None if duration is None else float(duration),
            stack_id=self.stack_id(raw, where),
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
            if type(name) is int and 0 <= name <= MAX_INT:
                name = str(name)
            if not isinstance(name, str) or not isinstance(desc, str):
                self.notes.append(f"pg_config has a group named {_shown(name)} ({_shown(desc)}), not text; ignored")
                continue
            name, desc = clean_text(name), clean_text(desc)
            if isinstance(ranks, str):
                config = _text_config(name, desc, ranks)
                if isinstance(config, str):
                    self.notes.append(config)
                elif config is not None:
                    configs.append(config)
                continue
            if not isinstance(ranks, (list, tuple)) or len(ranks) > MAX_RANK or not all(
                    type(r) is int and 0 <= r < MAX_RANK for r in ranks):
                if ranks:
                    self.notes.append(_ignored(name, ranks))
                continue
            if not name or not ranks:  # the placeholder real gloo dumps carry
                continue
            configs.append(GroupConfig(name, desc, tuple(sorted(set(ranks)))))
        return tuple(configs)


def _ignored(name: str, ranks: Any) -> str:
    return f"pg_config of group {name!r} has ranks {_shown(ranks)}, not a list of ranks; ignored"


_CACHED_TEXT = 1 << 20  # ranks text up to this many characters is cached (100,000 ranks take 700,000)


def _text_config(name: str, desc: str, text: str) -> GroupConfig | str | None:
    """_config_of_text, cached up to _CACHED_TEXT characters; text past what a list of MAX_RANK
    ranks takes is not parsed at all."""
    if len(text) > 8 * MAX_RANK:
        return _ignored(name, text)
    return (_config_of_text if len(text) <= _CACHED_TEXT else _config_of_text.__wrapped__)(name, desc, text)


@lru_cache(maxsize=128)
def _config_of_text(name: str, desc: str, text: str) -> GroupConfig | str | None:
    """The config of a group whose ranks are text, as PyTorch writes them; the note why it is
    ignored; or None for the placeholder real gloo dumps carry (no name or no rank). Cached:
    every rank's dump lists the world, and a 16,384-rank list costs a millisecond to check, where
    the cache gives back the same object (one object per config, which wire.Packer names once)."""
    parsed = parse_ranks_text(text)
    if parsed is None:
        return _ignored(name, text)
    if len(parsed) > MAX_RANK:
        return _ignored(name, parsed)
    return GroupConfig(name, desc, tuple(sorted(set(parsed)))) if name and parsed else None


def parse_ranks_text(text: str) -> tuple[int, ...] | None:
    """"[0, 1, 2]" -> (0, 1, 2), never by eval."""
    if not _RANKS_TEXT.match(text.strip()):
        return None
    numbers = re.findall(r"\d+", text)
    if any(len(n) > 7 for n in numbers):
        return None
    ranks = tuple(map(int, numbers))
    return ranks if all(r < MAX_RANK for r in ranks) else None


def _shown(value: Any) -> str:
    """A short, printable description of a raw value. Never repr of a container: shared
    references can make that text astronomically long."""
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**20 else f"a {value.bit_length()}-bit integer"
    if isinstance(value, str):
        text = repr(value[:37] + "..." if len(value) > 40 else value)
        return printable(text)
    if isinstance(value, (list, tuple)) and len(value) <= 4 and all(
            v is None or isinstance(v, (bool, float)) or (isinstance(v, int) and abs(v) < 10**20)
            or (isinstance(v, str) and len(v) <= 10) for v in value):
        return printable(repr(value))
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    return printable(repr(value)) if isinstance(value, HugeInt) else f"a {type(value).__name__}"


def normalize(raw: Any, rank: int, path: str, file_format: str) -> Dump:
    """Typed Dump from the raw object of one file; DumpError when its shape is not a dump's."""
    return wire.Unpacker().dump(wire.Packer().pack(compact(raw, rank, path, file_format)))


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
    health: tuple[HealthCheck, ...] = ()
    restarted: bool = False
    seq_counter: str = SEQ_PER_GROUP
    moments: tuple[GroupMoment, ...] = ()
    recorder_off: bool = False


_FAILED = {"fail", "failed", "failure", "error", "unhealthy", "bad", "down", "false"}
_MAX_CHECKS = 64
_MAX_FIELDS = 16  # fields kept of one check
_MESSAGE_KEYS = ("detail", "message", "error", "reason")
_FLAG_KEYS = ("passed", "healthy", "ok", "success")


def health_checks(raw: Any) -> tuple[HealthCheck, ...]:
    """The checks of a dump's health_check_results (NVIDIA's resiliency extension writes GPU and
    NIC checks there), each with every field it gave: the device's index and uuid and the error
    text are often the root cause. Its layout is not fixed: a check is a key whose value is a
    bool, a status word, or a dict with a passed/healthy/ok flag or a status word; at most
    _MAX_CHECKS, nested one level (gpu: {0: ..., 1: ...})."""
    if not isinstance(raw, dict):
        return ()
    found: list[HealthCheck] = []

    def label(key: Any) -> str:
        if isinstance(key, str):
            return clean_text(key[:80])
        return str(key) if isinstance(key, int) and abs(key) < 10**18 else "?"

    def text(value: Any) -> str | None:
        if isinstance(value, str):
            return clean_text(value[:200])
        if value is None or isinstance(value, bool) or (isinstance(value, int) and abs(value) < 10**18):
            return str(value)
        if isinstance(value, float):
            return repr(value)
        return None  # a list, a dict, a huge number: not shown

    def check(name: str, value: Any) -> HealthCheck | None:
        if isinstance(value, bool):
            return HealthCheck(name, value, "passed" if value else "failed")
        if isinstance(value, str):
            return HealthCheck(name, value.strip().lower() not in _FAILED, clean_text(value[:80]))
        if not isinstance(value, dict):
            return None
        fields = tuple((label(k), shown) for k, v in islice(value.items(), _MAX_FIELDS) if (shown := text(v)) is not None)
        message_key = next((k for k in _MESSAGE_KEYS if isinstance(value.get(k), str)), None)
        flag_key = next((k for k in _FLAG_KEYS if isinstance(value.get(k), bool)), None)
        status = value.get("status")
        if flag_key is not None:
            passed, said, used = value[flag_key], f"{flag_key}={value[flag_key]}", flag_key
        elif isinstance(status, str):
            passed, said, used = status.strip().lower() not in _FAILED, clean_text(status[:80]), "status"
        else:
            return None
        others = [f"{k} {v}" for k, v in fields if k not in (used, message_key)]
        message = clean_text(value[message_key][:200]) if message_key else ""
        detail = " ".join(part for part in (message, f"({', '.join(others)})" if others else "") if part)
        return HealthCheck(name, passed, said, detail, fields)

    for key, value in islice(raw.items(), _MAX_CHECKS):
        said = check(label(key), value)
        if said is not None:
            found.append(said)
        elif isinstance(value, dict):
            for inner, item in islice(value.items(), _MAX_CHECKS):
                said = check(f"{label(key)} {label(inner)}", item)
                if said is not None:
                    found.append(said)
    return tuple(found[:_MAX_CHECKS])


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
            normalizer.notes.append(f"unknown version {_shown(raw.get('version'))}; read by the fields present")
            parsed = (0, 0)
        version = parsed
        raw_entries = raw.get("entries", [])
        raw_configs = raw.get("pg_config")
        if not isinstance(raw_entries, list):
            raise DumpError(path, f"'entries' is {_shown(raw_entries)} where a list belongs; the file is damaged, leave it out")
    else:
        raise DumpError(path, f"holds {type(raw).__name__} {_shown(raw)}, not a Flight Recorder dump; leave it out")
    if len(raw_entries) > MAX_ENTRIES:
        raise DumpError(path, f"holds {len(raw_entries):,} entries, far more entries than a Flight Recorder keeps (2,000 by "
                              f"default; frtrace reads up to {MAX_ENTRIES:,} from one dump); leave it out, or cut it down")

    entries = fastpath.fast_columns(raw_entries, rank, normalizer.stacks)
    if entries is None:
        normalizer.stacks.clear()  # the fast path may have stopped half way through the frames
        try:
            entries = EntryColumns.from_entries(rank, [normalizer.entry(e, i) for i, e in enumerate(raw_entries)])
        except _BadEntry as exc:
            raise DumpError(path, f"{exc}; the dump is damaged or from an unknown writer, re-dump the rank or leave the file out") from None
    process_wide = _process_wide_seq(entries)
    # where the values fit both readings (no gaps in view), a reset must show under both
    restarted = _restarted(entries, bool(process_wide)) and (process_wide is not None or _restarted(entries, True))
    if restarted:
        normalizer.notes.append("record ids start at 0 but a group's first op in the dump is past its #1: the recorder "
                                "was reset (reset_fr_trace), older ops are not in the dump; read as a wrapped buffer")
    counter = SEQ_UNCLEAR if process_wide is None else SEQ_PER_GROUP
    if process_wide:
        counter = renumber_per_group(entries, restarted)
        normalizer.notes.append(process_counter_note(counter))
    if _completion_from_retired(entries, raw_entries):
        normalizer.notes.append("no entry is 'completed' or 'started' but some are retired and some not: completion "
                                "read from 'retired' (a recorder with a completion hook and no start events)")
    entries.runs = make_runs(entries)  # made here, in the worker, and sent along
    stacks = tuple(normalizer.stacks)  # stack ids were given in insertion order
    configs = normalizer.group_configs(raw_configs)
    health = health_checks(raw.get("health_check_results")) if isinstance(raw, dict) else ()
    moments = progress.group_moments(entries, raw_entries, raw.get("pg_status") if isinstance(raw, dict) else None)
    return CompactDump(rank, path, file_format, version, entries, configs, stacks, tuple(normalizer.notes + normalizer.drop_notes()),
                       health, restarted, counter, moments, progress.recorder_off(raw))


_INDEXED_KINDS = 64  # up to this many kinds, each one's first entry is searched for in C


def _restarted(entries: EntryColumns, process_wide: bool) -> bool:
    """Whether the buffer starts at record 0 yet a group's first collective in it is past #1
    (every group's counter starts at 1 when the group is made): the recorder was reset since.
    With a process-wide counter (torchcomms) only the first op of the dump is checked: the
    process's first op is #1. A kind's first entry is found in C (bytes.index / list.index)."""
    if not len(entries) or entries.record_id[0] != 0:
        return False
    if len(entries.kinds) > _INDEXED_KINDS:  # one pass, not one search per kind (50,000 one-op groups)
        first_of_code: dict[int, int] = {}
        for index, code in enumerate(entries.kind):
            first_of_code.setdefault(code, index)
        index_of = first_of_code.__getitem__
    else:
        index_of = (entries.kind if isinstance(entries.kind, bytes) else list(entries.kind)).index
    first_of_group: dict[str, int] = {}
    for code, kind in enumerate(entries.kinds):
        if kind.is_p2p:
            continue
        index = index_of(code)
        if index < first_of_group.get(kind.pg_name, index + 1):
            first_of_group[kind.pg_name] = index
    if not first_of_group:
        return False
    if process_wide:
        return entries.collective_seq_id[min(first_of_group.values())] > 1
    return any(entries.collective_seq_id[i] > 1 for i in first_of_group.values())


def _process_wide_seq(entries: EntryColumns) -> bool | None:
    """Whether the dump's collective seq ids are one counter for the whole process: they never
    decrease along the buffer, no value is shared by two groups (per-group counters all start at
    1), and some group's values have gaps (the other groups' ops took them). None where the values
    fit both readings: two groups or more, no value shared, none decreasing, no gap in view."""
    groups: dict[str, list[int]] = {}
    owner: dict[int, str] = {}
    last = -1
    for kind_code, seq in zip(entries.kind, entries.collective_seq_id):
        kind = entries.kinds[kind_code]
        if kind.is_p2p:
            continue
        if seq < last or owner.setdefault(seq, kind.pg_name) != kind.pg_name:
            return False
        last = seq
        groups.setdefault(kind.pg_name, []).append(seq)
    if len(groups) < 2:
        return False
    return True if any(b - a > 1 for seqs in groups.values() for a, b in zip(seqs, seqs[1:])) else None


def renumber_per_group(entries: EntryColumns, restarted: bool) -> str:
    """Per-group seq ids (1, 2, ... in buffer order) for a dump whose seq ids count the whole
    process: the group's own numbers where the buffer holds the process's first op (SEQ_PROCESS),
    else numbers from the oldest op the buffer holds (SEQ_PROCESS_WRAPPED, see anchor.py). Ops
    sharing a seq id (a coalesced group) keep sharing the new one. Returns which it was."""
    next_seq: dict[str, int] = {}
    seen: dict[int, int] = {}
    renumbered = []
    for kind_code, seq in zip(entries.kind, entries.collective_seq_id):
        kind = entries.kinds[kind_code]
        if kind.is_p2p:
            renumbered.append(seq)
            continue
        if seq not in seen:
            seen[seq] = next_seq[kind.pg_name] = next_seq.get(kind.pg_name, 0) + 1
        renumbered.append(seen[seq])
    entries.collective_seq_id = int_column(renumbered)
    return SEQ_PROCESS_WRAPPED if restarted or entries.record_id[0] != 0 else SEQ_PROCESS


def process_counter_note(counter: str) -> str:
    return ("collective seq ids count every op of the process, not of each group (a torchcomms recorder): renumbered "
            "per group in buffer order" + (", from the oldest op the buffer still holds (it wrapped or was reset); each "
                                           "group is then lined up with its other members by its completed ops"
                                           if counter == SEQ_PROCESS_WRAPPED else ""))


_retired_of = methodcaller("get", "retired")


def _completion_from_retired(entries: EntryColumns, raw_entries: list) -> bool:
    """Where a dump's completion is recorded by `retired` alone, read it so: True if it was.

    A hook-based recorder (FlightRecorderHook: the nccl2 backend, custom backends) has no start
    events and, where the backend has a completion hook, retires an op when the backend reports
    it finished: a dump with no "completed" or "started" entry whose ops are partly retired and
    partly not is such a dump, its retired ops completed, the others in flight. Not gloo's:
    PyTorch 2.13's gloo recorder leaves ops un-retired at random (fixtures/skip_rank2: of three
    ranks waiting in one all_reduce, one shows it un-retired), so its dumps carry no completion.
    """
    if {"completed", "started"} & set(entries.states) or not raw_entries:
        return False
    if entries.from_gloo:
        return False
    try:
        retired = list(map(_retired_of, raw_entries))
    except (AttributeError, TypeError):
        return False
    if not ({True, False} <= set(retired)):
        return False
    states = [*entries.states, "completed"]
    done = len(states) - 1
    entries.states = tuple(states)
    entries.state = code_column([done if r is True else c for c, r in zip(entries.state, retired)], len(states))
    return True


def read_dump(path: str, rank: int) -> Dump:
    """Read and normalize one dump file; DumpError names the file and what to do."""
    raw, file_format = read_raw(path)
    return normalize(raw, rank, path, file_format)


def _load_one(job: tuple) -> CompactDump | DumpError | InternalError:
    """Read one file, (path, rank) or (name, rank, the file holding it: an archive member's copy),
    into its compact form; runs in a worker process. Errors come back as values: a DumpError
    costs the file, an InternalError (a bug of ours) stops the run."""
    path, rank = job[0], job[1]
    try:
        raw, file_format = read_raw(job[2], shown=path, span=job[3]) if len(job) > 2 else read_raw(path)
        return compact(raw, rank, path, file_format)
    except (DumpError, LimitError) as exc:
        # as a value, without the frames it was raised through: they hold the file's bytes, and
        # through their callers' frames the error itself, a cycle that a worker (its collector
        # off, as the main process's) would keep, a whole file for each file that failed
        exc.__traceback__ = exc.__context__ = exc.__cause__ = None
        return exc
    except MemoryError:  # past parsing, which is bounded: the machine's memory, never the rank's fault
        return LimitError(f"{display_path(path)}: reading it ran out of memory under {memory_limit_text()}: the "
                          "machine's limit, not the file's fault; raise the limit or pass fewer --jobs, and run again")
    except Exception as exc:  # never blamed on the rank: the rank's file may be fine
        return InternalError(display_path(path), f"{type(exc).__name__}: {short_reason(exc)}", traceback.format_exc())


class _Reader:
    """_load_one in a worker, its dump packed for the pipe (wire.Packer: a value many ranks
    share is sent whole once per worker, the entries' times only where `times`)."""

    def __init__(self, times: bool) -> None:
        self.packer = wire.Packer(times)

    def __call__(self, job: tuple) -> tuple | DumpError | InternalError:
        result = _load_one(job)
        return self.packer.pack(result) if isinstance(result, CompactDump) else result


def read_pickled(jobs: list[tuple], workers: int, times: bool) -> Iterator[bytes]:
    """The answers to `jobs`, in order, each the pickle a worker sent (for a Ray task to send
    on: reading.cluster); a file that crashes or exhausts its reader costs that file."""
    return worker_processes.in_workers(_Reader(times), jobs, min(workers, len(jobs)), pickled=True)


def _load_all(jobs: list[tuple[str, int]], workers: int, progress: bool,
              times: bool, read: Callable | None = None) -> Iterator[tuple | DumpError | InternalError]:
    """Results in job order, from worker processes: a file that crashes or exhausts its reader
    costs that file, never the run. workers=0 reads in this process (for tests only). A dump
    comes packed (wire.Packer), for a wire.Unpacker of the same load. `read(jobs, times)`:
    results in job order from elsewhere (a Ray cluster: reading.cluster)."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="loading dumps", unit="file", file=sys.stderr, leave=False)
    reader = _Reader(times)  # in each worker its own copy, which has sent nothing yet
    if read is not None:
        results = read(jobs, times)
    elif workers <= 0:
        results = map(reader, jobs)
    else:
        results = worker_processes.in_workers(reader, jobs, min(workers, len(jobs)))
    try:
        for result in results:
            yield result
            if bar is not None:
                bar.update()
    finally:
        if hasattr(results, "close"):
            results.close()
        if bar is not None:
            bar.close()


def _world_from_configs(dumps: dict[int, Dump]) -> int | None:
    """The world size the default group's pg_config gives, where any dump has one that the
    other ranks' configs do not outvote."""
    outvoted, _ = outvoted_configs(dumps)
    if outvoted:
        standing = [c for rank, d in dumps.items() for c in d.group_configs if (rank, id(c)) not in outvoted]
    else:  # most often
        standing = distinct_configs(dumps)
    sizes = [max(c.ranks) + 1 for c in standing if is_default_group(c.name, c.desc)]
    return max(sizes) if sizes else None


def load_dumps(discovery: Discovery, *, progress: bool = False, workers: int = 1, bound_by_configs: bool = True,
               times: bool = True, read: Callable | None = None) -> LoadResult:
    """Read every rank's dump; a file that cannot be used is skipped with its reason.

    Files are read in `workers` processes, each sending back a compact form. When a rank has a
    pickle and a JSON of one dump, the first readable one is used and the other noted. With
    `bound_by_configs`, ranks beyond the world that the dumps' default-group pg_config describes
    are ignored (a file such as `backup_100` beside a 4-rank job). An InternalError from any
    file is raised: a bug of frtrace's is never turned into a skipped, then blamed, rank.
    A file from an archive is read from its copy (DumpFile.source) and named by its member.
    Without `times`, the entries' times are checked as ever but stay in the workers (their
    columns Unread): for callers whose outputs never read them. `read`: where the files are
    read instead of local workers (a Ray cluster's tasks: reading.cluster.Cluster.read).
    """

    def job(dump_file: DumpFile) -> tuple:
        if dump_file.source:
            return dump_file.path, dump_file.rank, dump_file.source, dump_file.span
        return dump_file.path, dump_file.rank

    choices: dict[int, list[DumpFile]] = {}
    for dump_file in discovery.files:
        choices.setdefault(dump_file.rank, []).append(dump_file)
    unreadable: dict[int, list[SkippedFile]] = {}
    notes: list[str] = []
    dumps: dict[int, Dump] = {}
    used: dict[int, DumpFile] = {}
    unpacker = wire.Unpacker()

    def take(rank: int, dump_file: DumpFile, result: tuple | DumpError | InternalError) -> None:
        if isinstance(result, (InternalError, LimitError)):  # a bug, or the machine: never a skipped, blamed rank
            raise result
        if isinstance(result, DumpError):
            unreadable.setdefault(rank, []).append(SkippedFile(display_path(result.path), result.reason))
        else:
            dumps[rank] = unpacker.dump(result)
            used[rank] = dump_file

    firsts = [files[0] for files in choices.values()]
    for dump_file, result in zip(firsts, _load_all([job(f) for f in firsts], workers, progress, times, read)):
        take(dump_file.rank, dump_file, result)
    for rank, files in choices.items():
        for dump_file in files[1:]:
            if rank not in used:  # the first choice failed: fall back to its twin in the other format
                take(rank, dump_file, next(_load_all([job(dump_file)], workers, False, times, read)))
            else:
                notes.append(f"{display_path(dump_file.path)}: another format of {display_path(used[rank].path)}; not read")

    for dump_file, reason in discovery.unread:  # named like the job's dumps and not readable: counted as skipped
        unreadable.setdefault(dump_file.rank, []).append(SkippedFile(display_path(dump_file.path), reason))
        choices.setdefault(dump_file.rank, []).append(dump_file)  # after the readable ones: never read
    # torchft replica groups list replica-local ranks in their default group: no bound on the world
    replicas = replica_size(dumps) if bound_by_configs else None
    world = _world_from_configs(dumps) if bound_by_configs and replicas is None else None
    outside = sorted(r for r in choices if world is not None and r >= world)
    ignored = list(discovery.ignored)
    for rank in outside:
        ignored.extend(SkippedFile(display_path(f.path), f"rank {rank} is outside the {world} ranks the dumps' pg_config describes")
                       for f in choices[rank])
        dumps.pop(rank, None)
        unreadable.pop(rank, None)
    skipped = [*discovery.skipped, *(item for rank in sorted(unreadable) for item in unreadable[rank])]
    notes[:0] = [f"{item.path}: ignored, {item.reason}" for item in ignored]
    ranks_named = frozenset(choices).difference(outside)
    sources = {rank: used.get(rank, files[0]) for rank, files in choices.items() if rank not in outside}
    unread = {rank: unreadable[rank][0].reason for rank in ranks_named if rank not in dumps and unreadable.get(rank)}
    return LoadResult(dict(sorted(dumps.items())), tuple(skipped), ranks_named, tuple(notes), tuple(ignored), sources, unread,
                      replicas)
