"""The flattened database: findings and aligned collectives as flat tables.

Pickled as (types, db) like torchfrtrace's output, in its layout (frtrace.database) so that
scripts written for it keep working, plus a `findings` table.
"""

from __future__ import annotations

import pickle
from array import array
from collections import Counter
from itertools import chain, repeat
from operator import attrgetter
from typing import IO

from .analysis.size_rules import COALESCED_TERMINATORS
from .outputs.collectives_table import CollectiveColumns
from .database import (
    BlockCodes,
    Collective,
    Database,
    Finding,
    Membership,
    NCCLCall,
    OffsetIds,
    Repeats,
    Table,
    Traceback,
    db_types,
    group_guid,
    pg_desc,
    profiling_name,
)
from .database import Group as GroupRow
from .reading.groups import GroupTable
from .types import Analysis, Dump, Group, once_per_object


def frames_text(stack) -> str:
    """A stack as the tracebacks table stores it: one `name at file:line` per line."""
    return "\n".join(map(str, stack))


_pg_name, _is_p2p, _op = attrgetter("pg_name"), attrgetter("is_p2p"), attrgetter("op")  # of a Kind, read in C


def group_ids(groups: tuple[Group, ...]) -> dict[tuple, str]:
    """A DB id per group: its name, or name:ranks where split_group reused the name."""
    names = Counter(g.name for g in groups)
    return {g.key: g.name if names[g.name] == 1 else f"{g.name}:{','.join(map(str, g.ranks))}" for g in groups}


class _Shared:
    """One list object per distinct value, so a million equal rows share their lists."""

    def __init__(self) -> None:
        self.shapes: dict = {}
        self.frames: dict = {}
        self.kinds_read: dict[int, tuple[str, list]] = {}  # id of a kind -> its op and sizes as the calls table reads them
        self.readings: dict[tuple[str, int], tuple[str, list]] = {}  # (op, id of its sizes' list) -> one reading
        self.call_lists: dict[tuple, list] = {}  # ("ops", ...) or ("sizes", ids of shape lists) -> one list
        self.calls_of: dict[tuple, tuple[list, list]] = {}  # ids of a dump's kinds' readings -> its two lists

    def shape_list(self, shapes: tuple) -> list:
        found = self.shapes.get(shapes)
        if found is None:
            found = self.shapes[shapes] = [list(s) for s in shapes]
        return found

    def calls_values(self, kinds: tuple) -> tuple[list, list]:
        """The op and the input sizes of each of a dump's kinds as the calls table reads them, each
        list one object for every dump that reads alike: where no two ranks' kinds are one tuple (a
        kind names its group), each kind, which ranks share (wire.Unpacker), is read once, and its
        reading is one object for the kinds that read alike, so that a dump's lists are found by
        the identities of its readings in one look-up (the dumps outlive the database's building,
        so no id is reused meanwhile)."""
        read = tuple(map(self.kinds_read.get, map(id, kinds)))
        if None in read:
            read = tuple(map(self._read, kinds))
        key = tuple(map(id, read))
        found = self.calls_of.get(key)
        if found is None:
            ops = [op for op, _ in read]
            sizes = [shapes for _, shapes in read]
            found = self.calls_of[key] = (self.call_lists.setdefault(("ops", *ops), ops),
                                          self.call_lists.setdefault(("sizes", *map(id, sizes)), sizes))
        return found

    def _read(self, kind) -> tuple[str, list]:
        found = self.kinds_read.get(id(kind))
        if found is None:
            op, shapes = profiling_name(kind.backend, kind.op), self.shape_list(kind.input_sizes)
            found = self.kinds_read[id(kind)] = self.readings.setdefault((op, id(shapes)), (op, shapes))
        return found

    def frame_list(self, dump: Dump, stack_id: int) -> list:
        """One list for each stack of each tuple of stacks, which ranks share (wire.Unpacker;
        the dumps outlive the database's building, so no id is reused meanwhile)."""
        key = (id(dump.stacks), stack_id)
        found = self.frames.get(key)
        if found is None:
            found = self.frames[key] = [{"name": f.name, "filename": f.filename, "line": f.line} for f in dump.stack_of(stack_id)]
        return found


def _traceback_id(text: str, by_text: dict[str, int], rows: list[Traceback]) -> int:
    if text not in by_text:
        by_text[text] = len(rows)
        rows.append(Traceback(len(rows), text))
    return by_text[text]


def build_database(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable) -> Database:
    """Flatten an Analysis (and the dumps' entries and stacks) into the database's tables."""
    ids = group_ids(analysis.groups)
    shared = _Shared()
    guids = {g.key: group_guid(g.name, g.ranks) for g in analysis.groups}
    groups = Table.from_rows(GroupRow, (GroupRow(guids[g.key], g.desc, len(g.ranks), ids[g.key]) for g in analysis.groups))
    memberships = Table(Membership, [  # by column, no row made, nor a step of Python's a member
        list(chain.from_iterable(repeat(guids[g.key], len(g.ranks)) for g in analysis.groups)),
        list(chain.from_iterable(g.ranks for g in analysis.groups))])

    traceback_rows: list[Traceback] = []
    by_text: dict[str, int] = {}
    # rank -> its traceback ids by stack id, then -1 (stack id -1, no frames, reads the last): one
    # list for each tuple of stacks that ranks share, its stacks made text once
    traceback_of = once_per_object(
        {rank: dump.stacks for rank, dump in dumps.items()},
        lambda stacks: [*(_traceback_id(frames_text(stack), by_text, traceback_rows) for stack in stacks), -1])

    built = CollectiveColumns(dumps, {g: ids[g.key] for g in analysis.groups}, shared)
    built.add(analysis.checks)
    collectives = Table(Collective, built.columns())
    spans, offsets = built.spans, built.offsets()

    # one call per entry of every rank, kept a rank at a time as its own kind codes and stack ids
    # with what each code reads as (BlockCodes, OffsetIds): nothing is made or copied per call
    collective_ids: list[tuple] = []  # OffsetIds' blocks
    group_blocks, op_blocks, size_blocks, traceback_blocks = [], [], [], []
    called, calls = array("q"), array("q")  # the ranks with calls, and how many each: the rank column (Repeats)
    group_of = table.by_rank
    of_kinds: dict[tuple, tuple] = {}  # (rank's groups' ids, id of its kinds) -> their values: made once for ranks alike
    call_count = 0
    for rank, dump in dumps.items():
        entries = dump.entries
        if not len(entries.kind):
            continue
        names = tuple(map(_pg_name, entries.kinds))
        kind_groups = tuple(map(group_of.get, zip(repeat(rank), names)))  # a Group is its own key in ids
        group_of_kind = tuple(map(ids.get, kind_groups, names))  # a name of no group: itself
        made = of_kinds.get((group_of_kind, id(entries.kinds)))
        if made is None:
            made = of_kinds[(group_of_kind, id(entries.kinds))] = (list(group_of_kind), *shared.calls_values(entries.kinds))
        groups_read, ops_read, sizes_read = made
        offset_of_kind = _offsets_of_kinds(rank, entries.kinds, kind_groups, offsets, spans)
        if offset_of_kind is not None:  # every entry's collective id is its seq id + its group's offset: added when read
            collective_ids.append((entries.collective_seq_id, entries.kind, offset_of_kind))
        else:
            collective_group_of_kind = [None if kind.is_p2p else group_id  # p2p entries find no collective: -1
                                        for kind, group_id in zip(entries.kinds, group_of_kind)]
            keys = zip(map(collective_group_of_kind.__getitem__, entries.kind), entries.collective_seq_id)
            collective_ids.append((array("q", map(built.collective_of.get, keys, repeat(-1))), None, None))
        group_blocks.append((entries.kind, groups_read))
        op_blocks.append((entries.kind, ops_read))
        size_blocks.append((entries.kind, sizes_read))
        called.append(rank)
        calls.append(len(entries.kind))
        traceback_blocks.append((entries.stack_id, traceback_of[rank]))
        call_count += len(entries.kind)
    ncclcalls = Table(NCCLCall, [
        range(call_count),
        OffsetIds(collective_ids),
        BlockCodes(group_blocks),
        Repeats(called, calls),
        BlockCodes(traceback_blocks),
        BlockCodes(op_blocks),
        BlockCodes(size_blocks),
    ])

    findings = Table.from_rows(Finding, (
        Finding(i, f.kind, ids[f.group.key], pg_desc(f.group.name, f.group.desc), f.collective_seq_id, f.p2p_seq_id, f.op,
                  list(f.ranks), list(f.expected_ranks), f.detail, f.root_cause)
        for i, f in enumerate(analysis.findings)
    ))
    return Database(groups, memberships, Table.from_rows(Traceback, traceback_rows), collectives, ncclcalls, findings)


def _offsets_of_kinds(rank: int, kinds: tuple, groups: tuple, offsets: dict, spans: dict) -> list[int | None] | None:
    """Per kind of a rank's entries (its group in `groups`), the offset from seq id to collective
    id (None for a p2p op: it has none); None unless every other entry is a collective (or a
    coalesced group's part) of a group whose collective ids follow its seq ids over a span holding
    the rank's. A rank whose ops hold both a p2p op and a coalesced group's end may end a p2p
    batch (no collective of its own, though it looks like one): its ids are looked up call by call."""
    if any(map(_is_p2p, kinds)) and not COALESCED_TERMINATORS.isdisjoint(map(_op, kinds)):
        return None
    found: list[int | None] = []
    for kind, group in zip(kinds, groups):
        if kind.is_p2p:
            found.append(None)
            continue
        if group is None or group not in offsets:
            return None
        _, first, last, view = spans[group]
        track = view.tracks.get(rank)
        if track is None or track.first_seq is None or not first <= track.first_seq <= track.last_seq <= last:
            return None
        found.append(offsets[group])
    return found


def write_database(db: Database, handle: IO[bytes]) -> None:
    """Pickle (types, db) into an open binary file."""
    pickle.dump((db_types(), db), handle, protocol=pickle.HIGHEST_PROTOCOL)
