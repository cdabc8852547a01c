"""The flat database's records, laid out as torchfrtrace's so scripts written for it keep working.

The same table names, row type names (Group, Membership, Traceback, Collective, NCCLCall), field
names and value formats: `collective_name` and `collective_type` keep the backend prefix
("nccl:all_reduce"), `pg_desc` reads "3:tp", a group's id is its name followed by the hash of its
rank set, `types` lists TypeInfo(name, [(field, type)]), a mismatched rank's collective carries a
MatchInfo. frtrace adds the `findings` table and fields after torchfrtrace's. Each table is a
read-only sequence of rows stored by column, so loading the pickle needs frtrace (as loading
torchfrtrace's needs torch).
"""

from __future__ import annotations

import typing
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from enum import Enum, auto
from itertools import accumulate, chain, repeat
from operator import add
from typing import NamedTuple


class TypeInfo(NamedTuple):
    """A row type as the pickled database's `types` list describes it."""

    name: str
    fields: list[tuple[str, type]]

    @classmethod
    def from_type(cls, row_type: type) -> "TypeInfo":
        hints = typing.get_type_hints(row_type)
        return cls(row_type.__name__, [(f, hints[f]) for f in row_type._fields])


class MatchState(Enum):
    """How a rank's collective differs from the group's (torchfrtrace's names)."""

    FULLY_MATCHED = auto()
    COLLECTIVE_TYPE_MISMATCH = auto()
    SIZE_OR_SYNTAX_MISMATCH = auto()
    COLLECTIVE_STATE_MISMATCH = auto()
    COLLECTIVE_DTYPE_MISMATCH = auto()
    UNDECIDED = auto()


class MatchInfo:
    """A mismatch's state and, as text, what the rank did instead."""

    def __init__(self, state: MatchState, culprit: str | None = None) -> None:
        self._state = state
        self.culprit = culprit

    @property
    def state(self) -> MatchState:
        return self._state

    def __str__(self) -> str:
        details = f", {self.culprit}" if self.culprit else ""
        return f"Error type: {self._state.name}{details}"

    def __repr__(self) -> str:
        return f"MatchInfo({self._state.name}, {self.culprit!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MatchInfo) and (self._state, self.culprit) == (other._state, other.culprit)

    def __hash__(self) -> int:
        return hash((self._state, self.culprit))


MATCH_STATE_OF_FINDING = {
    "type_mismatch": MatchState.COLLECTIVE_TYPE_MISMATCH,
    "size_mismatch": MatchState.SIZE_OR_SYNTAX_MISMATCH,
    "dtype_mismatch": MatchState.COLLECTIVE_DTYPE_MISMATCH,
    "not_completed": MatchState.COLLECTIVE_STATE_MISMATCH,
}


class Group(NamedTuple):
    id: str  # the group's name followed by hash(frozenset(ranks)), as torchfrtrace writes it
    desc: str
    size: int
    name: str = ""  # frtrace: the group's name, which collectives' and ncclcalls' group_id hold


class Membership(NamedTuple):
    group_id: str
    global_rank: int


class Traceback(NamedTuple):
    id: int
    frames: str


class Collective(NamedTuple):
    id: int
    group_id: str
    pass_check: bool
    collective_seq_id: int
    p2p_seq_id: int
    record_id: int
    pg_desc: str
    collective_name: str
    input_sizes: list[list[int]]
    output_sizes: list[list[int]]
    expected_ranks: frozenset[int]
    collective_state: str
    collective_frames: list[dict[str, str]]
    input_numel: int | None = None
    output_numel: int | None = None
    missing_ranks: frozenset[int] | None = None
    mismatch_collectives: dict[int, "Collective"] | None = None
    type_of_mismatch: MatchInfo | None = None


class NCCLCall(NamedTuple):
    id: int
    collective_id: int | None  # None where the call matched no collective (p2p, unaligned)
    group_id: str
    global_rank: int
    traceback_id: int  # -1 where the dump had no stack (torchfrtrace writes 0 for every call)
    collective_type: str
    sizes: list[list[int]]


class Finding(NamedTuple):
    """frtrace's own table: what the analysis found, root causes marked."""

    id: int
    kind: str
    group_id: str
    pg_desc: str
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    ranks: list[int]
    expected_ranks: list[int]
    detail: str
    root_cause: bool


def group_guid(name: str, ranks: Iterable[int]) -> str:
    """A group's id in the groups table: torchfrtrace's name + str(hash(frozenset(ranks)))."""
    return name + str(hash(frozenset(ranks)))


def pg_desc(name: str, desc: str) -> str:
    """torchfrtrace's pg_desc: "3:tp", or the bare name where the desc is "undefined"."""
    return f"{name}:{desc}" if desc != "undefined" else name


def profiling_name(backend: str, op: str) -> str:
    return f"{backend}:{op}" if backend else op


class OptionalIds(Sequence):
    """Ints in an array with -1 read as None: the collective ids of a million calls in 8 bytes each.
    What databases written before OffsetIds hold; kept so that they still load."""

    __slots__ = ("values",)

    def __init__(self, values: array) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [None if v < 0 else v for v in self.values[index]]
        value = self.values[index]
        return None if value < 0 else value

    def __iter__(self):
        return (None if v < 0 else v for v in self.values)

    def __reduce__(self):
        return (OptionalIds, (self.values,))


class _Rows(Sequence):
    """A column kept in runs of rows (_lengths), read a row at a time (_row, given the row's run
    by bisecting where the runs start): slices and negative indices read as a list's."""

    __slots__ = ("_found",)

    def __init__(self) -> None:
        self._found: list[int] | None = None  # made when first asked for: a database written is often never read

    def _lengths(self) -> Iterable[int]:
        raise NotImplementedError

    @property
    def _starts(self) -> list[int]:
        if self._found is None:
            self._found = list(accumulate(self._lengths(), initial=0))
        return self._found

    def __len__(self) -> int:
        return self._starts[-1]

    def _row(self, index: int):
        raise NotImplementedError

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._row(index)


class _Blocks(_Rows):
    """A column kept as blocks, a rank's calls each (the first item of a block holds one value per
    call); a row is found by bisecting where the blocks start."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: list[tuple]) -> None:
        super().__init__()
        self.blocks = blocks

    def _lengths(self) -> Iterable[int]:
        return (len(block[0]) for block in self.blocks)

    def _read(self, block: tuple, at: int):
        raise NotImplementedError

    def _row(self, index: int):
        which = bisect_right(self._starts, index) - 1
        return self._read(self.blocks[which], index - self._starts[which])

    def __reduce__(self):
        return (type(self), (self.blocks,))


class OffsetIds(_Blocks):
    """Collective ids kept, a rank's calls at a time, as each call's seq id plus its kind's offset
    (a block of (seq ids, kind codes, offset per kind), an offset of None where the kind's calls
    have no collective: p2p ops), or as ids in an array where a rank's calls do not follow their
    seq ids (a block of (ids, None, None)); -1 reads as None, as OptionalIds.

    Adding them up when the database is built took a C-level map per call, a second at 4096
    ranks; a reader pays it for the ids it reads. The seq ids and kind codes are the dumps' own
    columns, shared, not copied."""

    __slots__ = ()

    def _raw(self) -> Iterable[int]:
        """Every id in row order, -1 for none: each block's seq ids plus offsets, or its ids."""
        return chain.from_iterable(map(_ids_of_block, self.blocks))

    @property
    def values(self) -> array:
        """Every id, -1 for none, in one array (what OptionalIds holds)."""
        return array("q", self._raw())

    def _read(self, block: tuple, at: int):
        numbers, kinds, offsets = block
        if kinds is None:
            value = numbers[at]
        else:
            offset = offsets[kinds[at]]
            value = -1 if offset is None else numbers[at] + offset
        return None if value < 0 else value

    def __iter__(self):
        return (None if v < 0 else v for v in self._raw())


def _ids_of_block(block: tuple) -> Iterable[int]:
    numbers, kinds, offsets = block
    if kinds is None:
        return numbers
    if None not in offsets:
        return map(add, numbers, map(offsets.__getitem__, kinds))
    return (-1 if offset is None else number + offset for number, offset in zip(numbers, map(offsets.__getitem__, kinds)))


class BlockCodes(_Blocks):
    """A column kept a rank's calls at a time, as (codes, values) per block: each row reads
    values[code]. The codes are a dump's own column (its kind codes or stack ids, shared, not
    copied: several columns and OffsetIds hold the same object, which a pickle writes once), and
    the values a short list per rank, so building one costs nothing per call; a code of -1 reads
    the last value.

    Recoding every call into one table-wide code column took 0.3 s at 4,096 ranks, and wrote 4
    bytes a call where the codes of a whole set pass 256."""

    __slots__ = ()

    def _read(self, block: tuple, at: int):
        codes, values = block
        return values[codes[at]]

    def __iter__(self):
        return chain.from_iterable(map(values.__getitem__, codes) for codes, values in self.blocks)


class Repeats(_Rows):
    """A column of runs of one value: values[i] over counts[i] rows (a rank over its calls). Two
    arrays for a table, where a block per rank (BlockCodes) cost a tuple and a list each to build
    and to pickle."""

    __slots__ = ("values", "counts")

    def __init__(self, values: Sequence, counts: Sequence[int]) -> None:
        super().__init__()
        self.values = values
        self.counts = counts

    def _lengths(self) -> Iterable[int]:
        return self.counts

    def _row(self, index: int):
        return self.values[bisect_right(self._starts, index) - 1]

    def __iter__(self):
        return chain.from_iterable(map(repeat, self.values, self.counts))

    def __reduce__(self):
        return (Repeats, (self.values, self.counts))


class CodedColumn(Sequence):
    """A column of few distinct values stored as small integer codes: 2 to 4 bytes a row."""

    __slots__ = ("codes", "values")

    def __init__(self, codes: Sequence[int], values: list) -> None:
        self.codes = codes
        self.values = values

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.values[c] for c in self.codes[index]]
        return self.values[self.codes[index]]

    def __iter__(self):
        return map(self.values.__getitem__, self.codes)

    def __reduce__(self):
        return (CodedColumn, (self.codes, self.values))


class Table(Sequence):
    """One database table: a read-only sequence of `row_type` NamedTuples, stored by column.

    Millions of rows cost a few lists, not millions of objects; a row is built when it is read.
    """

    __slots__ = ("row_type", "columns")

    def __init__(self, row_type: type, columns: Iterable[Sequence]) -> None:
        self.row_type = row_type
        self.columns = tuple(columns)
        if len(self.columns) != len(row_type._fields):
            raise ValueError(f"{row_type.__name__} has {len(row_type._fields)} fields, got {len(self.columns)} columns")

    @classmethod
    def from_rows(cls, row_type: type, rows: Iterable[tuple]) -> "Table":
        columns = [list(c) for c in zip(*rows)]
        return cls(row_type, columns or [[] for _ in row_type._fields])

    def column(self, name: str) -> Sequence:
        return self.columns[self.row_type._fields.index(name)]

    def __len__(self) -> int:
        return len(self.columns[0])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.row_type._make(column[index] for column in self.columns)

    def __iter__(self):
        return map(self.row_type, *self.columns)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Table) and self.row_type is other.row_type and list(self) == list(other)

    def __repr__(self) -> str:
        return f"<Table of {len(self)} {self.row_type.__name__} rows>"

    def __reduce__(self):
        return (Table, (self.row_type, self.columns))


class Database(NamedTuple):
    groups: Table
    memberships: Table
    tracebacks: Table
    collectives: Table
    ncclcalls: Table
    findings: Table


ROW_TYPES = [Database, NCCLCall, Collective, Traceback, Membership, Group, Finding]


def db_types() -> list[TypeInfo]:
    """The `types` list pickled beside the database, in torchfrtrace's order, then findings."""
    return [TypeInfo.from_type(t) for t in ROW_TYPES]
