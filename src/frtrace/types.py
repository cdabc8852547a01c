"""Typed records that flow between the layers: loader -> matcher -> builder -> report.

Raw dicts from the dump files are converted once, in the loader; after it nothing indexes a dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Frame:
    name: str
    filename: str
    line: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One Flight Recorder record, normalized across format versions."""

    rank: int
    index: int  # position in the rank's buffer, oldest first
    record_id: int | None
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int | None
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
    retired: bool | None = None
    timeout_ms: int | None = None
    stack_id: int = -1  # index into Dump.stacks, -1 when the dump has no frames

    @property
    def completed(self) -> bool:
        return self.state == "completed"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A process group as one rank's pg_config describes it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Dump:
    """Everything frtrace uses from one rank's dump file."""

    rank: int
    path: str
    file_format: str  # "pickle" or "json"
    version: tuple[int, int]
    entries: tuple[Entry, ...]
    group_configs: tuple[GroupConfig, ...]  # empty when pg_config is absent or useless
    stacks: tuple[tuple[Frame, ...], ...] = ()
    notes: tuple[str, ...] = ()  # oddities worth a warning that did not stop the load

    @property
    def wrapped(self) -> bool:
        """True when older entries may have been dropped from the ring buffer.

        record_id counts every record the process made; a first record_id above 0 means the
        buffer no longer holds the oldest. Without record_id (formats before 1.4) we cannot tell
        and assume it wrapped, which only makes the analysis more careful.
        """
        if not self.entries:
            return False
        first = self.entries[0].record_id
        return first is None or first > 0


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


@dataclass(frozen=True, slots=True)
class Group:
    """A process group, identified by name and ranks (names repeat after split_group)."""

    name: str
    desc: str
    ranks: tuple[int, ...]
    inferred: bool = False  # membership guessed from entries, not read from pg_config

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        return (self.name, self.ranks)

    @property
    def label(self) -> str:
        if self.desc and self.desc != "undefined":
            return self.desc
        return f"pg {self.name}"

    def global_rank(self, local_rank: int) -> int | None:
        if 0 <= local_rank < len(self.ranks):
            return self.ranks[local_rank]
        return None


FINDING_KINDS = (
    "missing_ranks",
    "type_mismatch",
    "size_mismatch",
    "dtype_mismatch",
    "p2p_unmatched",
    "not_completed",
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


@dataclass(frozen=True, slots=True)
class CollectiveCheck:
    """One aligned collective of one group, as every member that issued it recorded it."""

    group: Group
    collective_seq_id: int
    entries: dict[int, tuple[Entry, ...]]  # rank -> the entries of its unit (coalesced: several)
    missing_ranks: tuple[int, ...]
    mismatch: str | None  # the finding kind, when this collective is where a desync was found


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the matcher concluded: the input of the builder and the report."""

    verdict: str  # "clean" | "desync" | "stuck" | "inconclusive"
    headline: str
    culprit_ranks: tuple[int, ...]
    findings: tuple[Finding, ...]
    groups: tuple[Group, ...]
    checks: tuple[CollectiveCheck, ...]
    ranks_loaded: tuple[int, ...]
    ranks_missing: tuple[int, ...]
    culprit_entries: dict[int, Entry] = field(default_factory=dict)  # rank -> the op it is blocked in
    warnings: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- the flat database
# Table and field names follow torchfrtrace's database so scripts written for it keep working.


class DbGroup(NamedTuple):
    id: str
    desc: str
    size: int


class Membership(NamedTuple):
    group_id: str
    global_rank: int


class Traceback(NamedTuple):
    id: int
    frames: str


class DbCollective(NamedTuple):
    id: int
    group_id: str
    pass_check: bool
    collective_seq_id: int
    p2p_seq_id: int
    record_id: int
    pg_desc: str
    collective_name: str
    input_sizes: list
    output_sizes: list
    expected_ranks: set
    collective_state: str
    collective_frames: list
    input_numel: int | None = None
    output_numel: int | None = None
    missing_ranks: set | None = None
    mismatch_collectives: dict | None = None
    type_of_mismatch: str | None = None


class NCCLCall(NamedTuple):
    id: int
    collective_id: int
    group_id: str
    global_rank: int
    traceback_id: int
    collective_type: str
    sizes: list


class DbFinding(NamedTuple):
    id: int
    kind: str
    group_id: str
    pg_desc: str
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    ranks: list
    expected_ranks: list
    detail: str
    root_cause: bool


class Database(NamedTuple):
    groups: list
    memberships: list
    tracebacks: list
    collectives: list
    ncclcalls: list
    findings: list
