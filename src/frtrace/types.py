"""Typed records that flow between the layers: loader -> matcher -> builder -> report.

Raw dicts from the dump files are converted once, in the loader; after it nothing indexes a dict.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, chain, repeat
from math import isnan
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Frame:
    name: str
    filename: str
    line: int

    def __str__(self) -> str:
        return f"{self.name} at {self.filename}:{self.line}"


class HealthCheck(NamedTuple):
    """One check of a dump's health_check_results (NVIDIA's resiliency extension: GPU, NIC)."""

    check: str  # what was checked: "gpu", "gpu 5", "nic0"
    passed: bool
    said: str  # its status in its own words: "failed", "passed=False", "FAIL"
    detail: str = ""  # the rest of what it said: "Xid 48: double-bit ECC error (index 5, uuid GPU-...)"
    fields: tuple[tuple[str, str], ...] = ()  # every field it gave, as text, in its order

    def failure_text(self) -> str:
        """"gpu: Xid 48: ... (index 5, uuid GPU-...)", or the check's name where it said no more."""
        return f"{self.check}: {self.detail}" if self.detail else self.check


class Entry(NamedTuple):
    """One Flight Recorder record, normalized across format versions.

    A NamedTuple rather than a dataclass: millions of these are built from columns at C speed.
    """

    rank: int
    index: int  # position in the rank's buffer, oldest first
    record_id: int | None
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op: str  # without the backend prefix: "all_reduce", "send 0->1", "coalesced"
    backend: str  # "nccl", "gloo", ... or "" when the name had no prefix
    input_sizes: tuple[Shape, ...]
    output_sizes: tuple[Shape, ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str
    is_p2p: bool
    time_created_ns: int | None = None
    time_started_ns: int | None = None
    time_completed_ns: int | None = None
    duration_ms: float | None = None
    stack_id: int = -1  # index into Dump.stacks, -1 when the dump has no frames

    @property
    def completed(self) -> bool:
        return self.state == "completed"


ENTRY_FIELDS = Entry._fields


class Kind(NamedTuple):
    """What an entry is, apart from when it ran and its place in the buffer.

    A dump's thousands of entries are a handful of kinds (the same groups, ops, shapes and
    dtypes again and again), so entries store a kind code and the kinds are stored once.
    """

    pg_name: str
    pg_desc: str
    op: str
    backend: str
    is_p2p: bool
    input_sizes: tuple[Shape, ...]
    output_sizes: tuple[Shape, ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]


_backend = attrgetter("backend")  # of a Kind, read in C
_NAN = float("nan")
_NO_TIMES = (None, None, None, None)  # an Entry's times where they were not loaded


def _duration(value: float) -> float | None:
    return None if value != value else value  # NaN: not recorded


def _whole(column: Sequence) -> Sequence:
    return column


_kind_fields = itemgetter(3, 4, 7, 8, 14, 9, 10, 11, 12)  # Entry -> Kind


def int_column(values: Sequence, narrow: bool = True) -> Sequence[int]:
    """4 bytes a value in an array where every value fits and `narrow` (record and seq ids: the
    main process keeps one per entry of every rank, and the database its seq ids), else 8; the
    values as they are where one does not fit (None, huge). The array checks each value as it
    takes it, in C."""
    if narrow:
        try:
            return array("i", values)
        except OverflowError:
            pass
        except TypeError:
            return tuple(values)
    try:
        return array("q", values)
    except (TypeError, OverflowError):
        return tuple(values)


def small_int_column(values: Iterable[int], top: int | None = None) -> Sequence[int]:
    """Ints of at least -1 in the narrowest array that holds them: one byte each below 128.
    With `top` (the largest of them, known beforehand) the values may be an iterator."""
    if top is None:
        top = max(values, default=0)
    return array("b" if top < 128 else "h" if top < 32768 else "i" if top < 2**31 else "q", values)


def time_column(values: Sequence) -> Sequence[int]:
    """Timestamps with 0 for "not recorded" (None too: JSON writes 0 for unset)."""
    unset = values.count(None)
    if unset == len(values):  # a time the writer never records (gloo's started): zeros, made in C
        return array("q", bytes(8 * unset))
    if unset:
        values = [v or 0 for v in values]
    return int_column(values, narrow=False)  # nanoseconds since 1970 take 8 bytes: not tried in 4


def code_column(values: Iterable[int], count: int) -> Sequence[int]:
    """Codes below `count`: bytes when they fit in one (1 byte each, and bytes.translate maps
    them at C speed), else an array of 4-byte ints."""
    return bytes(iter(values)) if count <= 256 else array("I", values)  # iter: not an array's raw buffer


def recode(local: Sequence[int], mapping: list[int], tables: tuple | None = None) -> array:
    """mapping[c] for each code c of `local`, as 4-byte ints: from one-byte codes by four
    translations (`tables` being wide_tables(mapping) where the caller keeps them). Codes that
    all fit in a byte are mapped by `local.translate(translation_table(mapping))` instead."""
    if isinstance(local, bytes) and len(mapping) <= 256 and _LITTLE_ENDIAN_INTS:
        return _widened(local, tables or wide_tables(mapping))
    return array("I", map(mapping.__getitem__, local))


def translation_table(mapping: list[int]) -> bytes:
    """bytes.translate's table for codes below 256 mapped by `mapping` (the rest to 0)."""
    return bytes(mapping) + bytes(256 - len(mapping))


_LITTLE_ENDIAN_INTS = array("I").itemsize == 4 and sys.byteorder == "little"


def wide_tables(mapping: list[int]) -> tuple[bytes | None, ...]:
    """Per byte of a 4-byte code (lowest first), the translation table giving that byte of each
    mapped code; None where it is 0 for every code. Empty for a map of more than 256 codes."""
    if len(mapping) > 256:
        return ()
    tables = []
    for shift in (0, 8, 16, 24):
        table = bytes([(code >> shift) & 0xFF for code in mapping]) + bytes(256 - len(mapping))
        tables.append(table if any(table) else None)
    return tuple(tables)


def _widened(local: bytes, tables: tuple[bytes | None, ...]) -> array:
    """The 4-byte codes of one-byte local codes, a byte of each at a time: translated in C and
    written every fourth byte, instead of a Python-level look-up per code (0.4 s at 4,096 ranks)."""
    raw = bytearray(4 * len(local))
    for at, table in enumerate(tables):
        if table is not None:
            raw[at::4] = local.translate(table)
    wide = array("I")
    wide.frombytes(raw)
    return wide


def once_per_object(values_of: dict[Any, Any], make: Callable[[Any], Any]) -> dict[Any, Any]:
    """Key -> make(its value), made once for each value object that keys share: ranks share
    their kinds', states' and stacks' tuples (wire.Unpacker), and thousands of ranks hold a few."""
    made: dict[int, Any] = {}
    found_of = {}
    for key, value in values_of.items():
        found = made.get(id(value))
        if found is None:
            found = made[id(value)] = make(value)
        found_of[key] = found
    return found_of


def float_column(values: Sequence) -> Sequence[float]:
    """Floats in an array, NaN for None."""
    unset = values.count(None)
    if unset == len(values):  # gloo writes no duration
        return array("d", [_NAN]) * unset
    if unset:
        values = [_NAN if v is None else v for v in values]
    try:
        return array("d", values)
    except (TypeError, OverflowError):
        return tuple(values)


class Unread(Sequence):
    """A column a worker read and kept to itself: EntryColumns' times where no output asked for
    them (64 of the 107 kB a 2,000-entry dump keeps in the main process). Its length only: a value
    read from it is a LookupError, so that a reader of times it was not given fails loudly instead
    of taking every time as not recorded."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):
        raise LookupError("the entries' times were not loaded: load with times=True to read them")


@dataclass(slots=True, eq=False)
class EntryColumns(Sequence):
    """One rank's entries, stored by column: a kind code per entry and its numbers in arrays.

    About 70 bytes an entry instead of an Entry tuple's 400 with its ints. Reads as a sequence
    of Entry (built when read); the matcher works on the columns themselves. Every kind and state
    listed is held by some entry, and they are listed in the order of their first entries.
    """

    rank: int
    kinds: tuple[Kind, ...]
    kind: Sequence[int]  # per entry, its kind's index in `kinds` (bytes when there are at most 256)
    states: tuple[str, ...]
    state: Sequence[int]  # per entry, its state's index in `states`
    record_id: Sequence  # ints; a tuple holding None in formats without record_id
    collective_seq_id: Sequence[int]
    p2p_seq_id: Sequence[int]
    time_created_ns: Sequence[int]  # 0: not recorded; Unread, as the next three, where not loaded
    time_started_ns: Sequence[int]
    time_completed_ns: Sequence[int]
    duration_ms: Sequence[float]  # NaN: not recorded
    stack_id: Sequence[int]  # index into Dump.stacks, -1 when the entry has no frames (small_int_column)
    runs: dict | None = None  # per group name, made by runs.make_runs

    @classmethod
    def from_entries(cls, rank: int, entries: Sequence[Entry]) -> "EntryColumns":
        kind_of: dict[Kind, int] = {}
        kinds = [kind_of.setdefault(Kind(*_kind_fields(e)), len(kind_of)) for e in entries]
        state_of: dict[str, int] = {}
        states = [state_of.setdefault(e.state, len(state_of)) for e in entries]
        by_field = list(zip(*entries)) if entries else [()] * len(ENTRY_FIELDS)
        column = dict(zip(ENTRY_FIELDS, by_field))
        return cls(
            rank, tuple(kind_of), code_column(kinds, len(kind_of)), tuple(state_of), code_column(states, len(state_of)),
            int_column(column["record_id"]), int_column(column["collective_seq_id"]), int_column(column["p2p_seq_id"]),
            time_column(column["time_created_ns"]), time_column(column["time_started_ns"]),
            time_column(column["time_completed_ns"]), float_column(column["duration_ms"]), small_int_column(column["stack_id"]),
        )

    def __len__(self) -> int:
        # a call of Python's: where it counts, frtrace asks len(entries.kind), the columns' own length
        return len(self.kind)

    @property
    def has_times(self) -> bool:
        """Whether the times were loaded: else their columns are Unread, and entries are built
        with None for each."""
        return not isinstance(self.time_created_ns, Unread)

    @property
    def from_gloo(self) -> bool:
        """Written by the gloo recorder: no send or recv, no completion recorded."""
        return "gloo" in map(_backend, self.kinds)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self.kind)
        k = self.kinds[self.kind[index]]
        times = _NO_TIMES
        if self.has_times:
            duration = self.duration_ms[index]
            times = (self.time_created_ns[index] or None, self.time_started_ns[index] or None,
                     self.time_completed_ns[index] or None, None if duration is None else _duration(duration))
        return Entry(self.rank, index, self.record_id[index], k.pg_name, k.pg_desc, self.collective_seq_id[index],
                     self.p2p_seq_id[index], k.op, k.backend, k.input_sizes, k.output_sizes, k.input_dtypes,
                     k.output_dtypes, self.states[self.state[index]], k.is_p2p, *times, self.stack_id[index])

    def __iter__(self) -> Iterator[Entry]:
        """Every entry, built by C-level maps over the columns (a Python call per entry only for
        durations, and only when some are missing)."""
        return self._built(range(len(self.kind)), _whole)

    def at(self, positions: Sequence[int]) -> list[Entry]:
        """The entries at `positions`, built the same way from the values picked out."""
        return list(self._built(positions, lambda column: list(map(column.__getitem__, positions))))

    def _built(self, indices: Sequence[int], take: Callable[[Sequence], Sequence]) -> Iterator[Entry]:
        kinds = list(map(self.kinds.__getitem__, take(self.kind)))
        part = [map(itemgetter(i), kinds) for i in range(len(Kind._fields))]
        if self.has_times:
            none_if_zero = {0: None}.get
            durations = take(self.duration_ms)
            if not isinstance(self.duration_ms, array) or any(map(isnan, self.duration_ms)):
                durations = map(_duration, durations)
            created, started, completed = (map(none_if_zero, column, column) for column in map(
                take, (self.time_created_ns, self.time_started_ns, self.time_completed_ns)))
        else:
            created, started, completed, durations = (repeat(None, len(indices)) for _ in range(4))
        return map(Entry, repeat(self.rank, len(indices)), indices, take(self.record_id), part[0], part[1],
                   take(self.collective_seq_id), take(self.p2p_seq_id), part[2], part[3], part[5], part[6], part[7], part[8],
                   map(self.states.__getitem__, take(self.state)), part[4], created, started, completed, durations,
                   take(self.stack_id))

    def __reversed__(self) -> Iterator[Entry]:
        return map(self.__getitem__, reversed(range(len(self.kind))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)



@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A process group as one rank's pg_config describes it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


class GroupMoment(NamedTuple):
    """What one dump says of a group's progress in time, read where the dump is read from fields
    the columns do not keep (`retired`, `timeout_ms`, `pg_status`): enough to tell a dump taken
    earlier than its peers' (it ends before ops they finished, which it must have joined) and a
    member that issued an op after its peers had given up on it (analysis/moments.py)."""

    pg_name: str
    # the highest collective seq id this dump shows finished of an op that waits for every member
    # (not a rooted op's, which finishes on some before others issue it): every member issued it (0: none)
    joined_through: int
    last_seq: int  # the group's last collective in the buffer (0: none)
    last_created_ns: int  # its creation time (0: not recorded)
    last_timeout_ms: int  # its timeout (0: not recorded)
    status_enqueued: int  # pg_status' last_enqueued_collective for the group (-1: none or not said)
    last_done: bool = False  # its last collective shown finished here, whatever the op


# what a dump's collective seq ids count
SEQ_PER_GROUP = "group"  # each group's own ops (PyTorch's recorders)
SEQ_PROCESS = "process"  # every op of the process (torchcomms), renumbered per group from the process's first op
SEQ_PROCESS_WRAPPED = "process, wrapped"  # the same, the buffer wrapped or was reset: numbered from its oldest op
SEQ_UNCLEAR = "group or process"  # values that fit both (no gap in view): decided by the other dumps (anchor.py)


@dataclass(frozen=True, slots=True)
class Dump:
    """Everything frtrace uses from one rank's dump file."""

    rank: int
    path: str
    file_format: str  # "pickle" or "json"
    version: tuple[int, int]
    entries: EntryColumns
    group_configs: tuple[GroupConfig, ...]  # empty when pg_config is absent or useless
    stacks: tuple[tuple[Frame, ...], ...] = ()
    notes: tuple[str, ...] = ()  # oddities worth a warning that did not stop the load
    health: tuple[HealthCheck, ...] = ()  # NVRx health_check_results
    restarted: bool = False  # reset_fr_trace(): records count from 0 again, older ops are gone
    seq_counter: str = SEQ_PER_GROUP  # what the collective seq ids count (SEQ_*)
    moments: tuple[GroupMoment, ...] = ()  # per group name, what the dump says of its progress in time
    recorder_off: bool = False  # a version and nothing else (TORCH_FR_BUFFER_SIZE=0): no evidence either way

    @property
    def relative_seqs(self) -> bool:
        """Seq ids count each group's ops from the oldest the buffer holds (see anchor.py)."""
        return self.seq_counter == SEQ_PROCESS_WRAPPED

    def stack_of(self, stack_id: int) -> tuple[Frame, ...]:
        """The frames of an entry's stack id; none for -1 or an id the dump does not hold."""
        return self.stacks[stack_id] if 0 <= stack_id < len(self.stacks) else ()

    @property
    def wrapped(self) -> bool:
        """True when older entries may have been dropped from the ring buffer.

        record_id counts every record the process made; a first record_id above 0 means the
        buffer no longer holds the oldest. Without record_id (formats before 1.4) we cannot tell
        and assume it wrapped, which only makes the analysis more careful. A recorder reset
        (`restarted`) drops the older entries too.
        """
        if not len(self.entries.kind):
            return False
        first = self.entries.record_id[0]
        return first is None or first > 0 or self.restarted


@dataclass(frozen=True, slots=True)
class SkippedFile:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class LoadResult:
    dumps: dict[int, Dump]
    skipped: tuple[SkippedFile, ...]
    ranks_named: frozenset[int]  # every rank a candidate file name pointed at, read or not
    notes: tuple[str, ...] = ()
    ignored: tuple[SkippedFile, ...] = ()  # files that are not dumps of this job, with why
    sources: dict = field(default_factory=dict)  # rank -> the DumpFile its dump was read from (or could not be)
    unread: dict[int, str] = field(default_factory=dict)  # rank -> why its file could not be read, for ranks named but not loaded
    replica_size: int | None = None  # torchft: ranks per replica group, where the configs show one (groups.replica_size)
    stacks: dict = field(default_factory=dict)  # rank -> its Python threads (reading.stacks.Thread), from stack files


@dataclass(frozen=True, slots=True, eq=False)
class Group:
    """A process group, identified by name and ranks (names repeat after split_group).

    resolve_groups makes one object per (name, ranks), so identity is equality; hashing by
    identity keeps lookups O(1), where hashing the ranks tuple cost O(group size) per entry.
    """

    name: str
    desc: str
    ranks: tuple[int, ...]
    inferred: bool = False  # membership guessed from entries, not read from pg_config

    @property
    def key(self) -> "Group":
        return self

    @property
    def label(self) -> str:
        if self.desc and self.desc != "undefined":
            return self.desc
        return f"pg {self.name}"


FINDING_KINDS = (
    "missing_ranks",
    "extra_op",
    "type_mismatch",
    "size_mismatch",
    "dtype_mismatch",
    "p2p_unmatched",
    "not_completed",
    "late_arrival",
    "unrecorded_op",
)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    group: Group
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    ranks: tuple[int, ...]  # the offending ranks; empty when the dumps cannot tell which
    expected_ranks: tuple[int, ...]
    detail: str
    root_cause: bool = False
    decided: bool = True  # False: a desync is certain but not who caused it


class CollectiveCheck(NamedTuple):
    """One aligned collective of one group, as every member that issued it recorded it.

    `source` is the matcher's view of the group; the entries are read from it when asked for,
    so a million checks hold no entries of their own. A NamedTuple: there is one per collective."""

    group: Group
    collective_seq_id: int
    missing_ranks: tuple[int, ...]
    mismatch: str | None  # the finding kind, when this collective is where a desync was found
    source: Any = None
    agreed: bool = False  # every issuer holds the same kind, breaking no size rule (see GroupView.agreed)

    @property
    def entries(self) -> dict[int, tuple[Entry, ...]]:
        """rank -> the entries of its unit (coalesced: several), in rank order."""
        return self.source.issuers(self.collective_seq_id) if self.source is not None else {}


_new_check = partial(tuple.__new__, CollectiveCheck)  # from a tuple of every field, in C (the NamedTuple's __new__ is Python)


class AgreedRun(NamedTuple):
    """Seq ids first..last of one group, each agreed (GroupView.agreed) and issued by every
    member: what Checks holds in place of a check per seq id."""

    group: Group
    first: int
    last: int
    source: Any

    def check(self, seq: int) -> CollectiveCheck:
        return CollectiveCheck(self.group, seq, (), None, self.source, True)

    def checks(self) -> Iterator[CollectiveCheck]:
        """check(seq) for each seq id of the run, made in C."""
        count = self.last - self.first + 1
        return map(_new_check, zip(repeat(self.group, count), range(self.first, self.last + 1), repeat(()), repeat(None),
                                   repeat(self.source), repeat(True)))


class Checks(Sequence):
    """The analysis's checks in order, a CollectiveCheck per aligned collective, held as `parts`:
    checks, and AgreedRuns that make theirs when read. Most collectives of a healthy job are
    agreed runs: 416,400 checks at 4,096 ranks cost a tuple each, made and then read one by one
    by the report, the verdict and the database; as runs they cost nothing per collective."""

    __slots__ = ("parts", "_starts")

    def __init__(self, parts: Iterable[CollectiveCheck | AgreedRun] = ()) -> None:
        self.parts = tuple(parts)
        self._starts = list(accumulate((p.last - p.first + 1 if type(p) is AgreedRun else 1 for p in self.parts), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        index = range(len(self))[index]  # from the end where negative; IndexError out of range
        at = bisect_right(self._starts, index) - 1
        part = self.parts[at]
        return part.check(part.first + index - self._starts[at]) if type(part) is AgreedRun else part

    def __iter__(self) -> Iterator[CollectiveCheck]:
        return chain.from_iterable(p.checks() if type(p) is AgreedRun else (p,) for p in self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checks) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def matched(self) -> int:
        """Collectives every member issued, with no mismatch."""
        return sum(p.last - p.first + 1 if type(p) is AgreedRun else not p.missing_ranks and p.mismatch is None
                   for p in self.parts)

    def at(self, group: Group, seq: int) -> CollectiveCheck | None:
        """The check of `group`'s #seq."""
        for part in self.parts:
            if part.group is group:
                if type(part) is AgreedRun:
                    if part.first <= seq <= part.last:
                        return part.check(seq)
                elif part.collective_seq_id == seq:
                    return part
        return None


@dataclass(frozen=True, slots=True)
class StackApart:
    """A rank's Python stack (its training thread's, from a stack file beside its dump) beside the
    one most of its peers in `group` share, both outermost frame first; frames are (file, line,
    function). `apart`: the index of the first frame where they part; `odd` where a majority of
    its peers share a stack that is not its own (the rank is the odd one out)."""

    rank: int
    group: Group
    frames: tuple[tuple[str, int, str], ...]
    peers_frames: tuple[tuple[str, int, str], ...]
    agreeing: int  # its peers at peers_frames
    peers: int  # its peers in the group
    apart: int
    odd: bool


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the matcher concluded: the input of the builder and the report."""

    verdict: str  # "clean" | "desync" | "stuck" | "inconclusive"
    headline: str
    culprit_ranks: tuple[int, ...]
    findings: tuple[Finding, ...]
    groups: tuple[Group, ...]
    checks: Checks  # a CollectiveCheck per aligned collective, in order
    ranks_loaded: tuple[int, ...]
    ranks_missing: tuple[int, ...]
    culprit_entries: dict[int, Entry] = field(default_factory=dict)  # rank -> the op it is blocked in
    warnings: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()  # what decided the verdict, a short sentence each
    waits: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()  # the wait-for graph: (op, its waiters, whom they wait for)
    blocked_in: dict[int, tuple[str, Group, int | None]] = field(default_factory=dict)  # rank -> (the op it waits in, its group, seq)
    causes: dict[int, tuple[str, str]] = field(default_factory=dict)  # culprit -> (cause, said in words); verdict.CAUSES
    cause: str | None = None  # the culprits' cause where they share one, "mixed" where not; None when clean
    blocked_entries: dict[int, Entry] = field(default_factory=dict)  # rank -> the op it waits in, as its own dump holds it
    stacks_apart: tuple[StackApart, ...] = ()  # culprits' stacks beside their peers', and every odd one out
    stale: dict[int, str] = field(default_factory=dict)  # rank -> why its dump is older than its peers' (analysis/moments.py)
    no_evidence: tuple[int, ...] = ()  # ranks whose recorder was off: their dumps hold nothing
