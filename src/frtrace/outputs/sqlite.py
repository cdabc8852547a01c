"""The database as SQLite: the flat tables plus one row per raw entry, indexed for the usual
questions. Rows are streamed into executemany, never collected first, and the entry rows are
zipped from their columns in C: per-kind values (group, op, sizes as JSON) are made once per kind
and picked per entry by its kind code; no entry object is built. The database's ncclcalls (one
per entry) are a view over the entry rows, which carry each call's id and collective id: the
same million rows are not written twice."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, islice, repeat

from ..builder import frames_text, group_ids
from ..reading.groups import GroupTable
from ..database import Database, profiling_name
from ..types import Dump, once_per_object

_ZERO_TO_NONE = {0: None}  # .get(v, v): None for 0 (a time not recorded), v otherwise, in C
_NEGATIVE_TO_NONE = {-1: None}  # .get(v, v): None for -1 (no id), v otherwise

SCHEMA = """
CREATE TABLE groups (id TEXT PRIMARY KEY, desc TEXT, size INTEGER, name TEXT);
CREATE TABLE memberships (group_id TEXT, global_rank INTEGER);
CREATE TABLE tracebacks (id INTEGER PRIMARY KEY, frames TEXT);
CREATE TABLE collectives (id INTEGER PRIMARY KEY, group_id TEXT, pass_check INTEGER, collective_seq_id INTEGER,
    p2p_seq_id INTEGER, record_id INTEGER, pg_desc TEXT, collective_name TEXT, input_sizes TEXT, output_sizes TEXT,
    expected_ranks TEXT, collective_state TEXT, input_numel INTEGER, output_numel INTEGER, missing_ranks TEXT,
    mismatch_collectives TEXT, type_of_mismatch TEXT);
CREATE TABLE findings (id INTEGER PRIMARY KEY, kind TEXT, group_id TEXT, pg_desc TEXT, collective_seq_id INTEGER,
    p2p_seq_id INTEGER, op TEXT, ranks TEXT, expected_ranks TEXT, detail TEXT, root_cause INTEGER);
CREATE TABLE entry_kinds (kind_id INTEGER PRIMARY KEY, pg_name TEXT, pg_desc TEXT, op TEXT, backend TEXT,
    input_sizes TEXT, output_sizes TEXT, input_dtypes TEXT, output_dtypes TEXT, is_p2p INTEGER, collective_type TEXT);
CREATE TABLE entry_rows (call_id INTEGER PRIMARY KEY, rank INTEGER, idx INTEGER, record_id INTEGER, group_id TEXT,
    kind_id INTEGER, collective_seq_id INTEGER, p2p_seq_id INTEGER, state TEXT, time_created_ns INTEGER,
    time_started_ns INTEGER, time_completed_ns INTEGER, duration_ms REAL, traceback_id INTEGER, collective_id INTEGER);
CREATE VIEW entries AS SELECT rank, idx, record_id, group_id, pg_name, pg_desc, collective_seq_id, p2p_seq_id, op,
    backend, input_sizes, output_sizes, input_dtypes, output_dtypes, state, is_p2p, time_created_ns, time_started_ns,
    time_completed_ns, duration_ms, traceback_id
    FROM entry_rows JOIN entry_kinds USING (kind_id);
-- the database's ncclcalls (one per entry, in the same order) are the entries seen another way
CREATE VIEW ncclcalls AS SELECT call_id AS id, collective_id, group_id, rank AS global_rank, traceback_id, collective_type,
    input_sizes AS sizes
    FROM entry_rows JOIN entry_kinds USING (kind_id);
"""
INDEXES = """
CREATE INDEX entries_by_rank ON entry_rows (rank, group_id, collective_seq_id);
CREATE INDEX entries_by_collective ON entry_rows (group_id, collective_seq_id);
CREATE INDEX calls_by_collective ON entry_rows (collective_id);
CREATE INDEX collectives_by_seq ON collectives (group_id, collective_seq_id);
CREATE INDEX memberships_by_rank ON memberships (global_rank);
"""


class _SharedJson:
    """JSON text of values that many rows share (one sizes tuple per kind): made once per object.
    Keyed by identity, so only for objects that live as long as this does."""

    def __init__(self) -> None:
        self._texts: dict[int, str | None] = {}

    def __call__(self, value) -> str | None:
        text = self._texts.get(id(value), ...)
        if text is ...:
            text = self._texts[id(value)] = _json(value)
        return text


def _json(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, (set, frozenset)):
        value = sorted(value)
    return json.dumps(value)


def _none_for(column: Sequence, table: dict) -> Iterator:
    return map(table.get, column, column)


def _entry_rows(rank: int, dump: Dump, table: GroupTable, ids: dict, kind_ids: dict, tracebacks: dict[int, int],
                call_ids: range, collective_ids: Iterator) -> Iterator[tuple]:
    """The entry_rows of one dump, zipped from its columns; its kinds get ids in `kind_ids`.
    Its entries' calls (the database's ncclcalls) are `call_ids`, with their collective ids."""
    entries = dump.entries
    group_of_kind, id_of_kind = [], []
    for kind in entries.kinds:
        group = table.group_of(rank, kind.pg_name)
        group_of_kind.append(ids[group.key] if group else kind.pg_name)
        id_of_kind.append(kind_ids.setdefault(kind, len(kind_ids)))
    p2p = [kind.is_p2p for kind in entries.kinds]
    p2p_of = list(map(p2p.__getitem__, entries.kind))
    collective = [None if is_p2p else seq for is_p2p, seq in zip(p2p_of, entries.collective_seq_id)]
    point_to_point = [seq if is_p2p else None for is_p2p, seq in zip(p2p_of, entries.p2p_seq_id)]
    return zip(call_ids, repeat(rank), range(len(entries)), entries.record_id, map(group_of_kind.__getitem__, entries.kind),
               map(id_of_kind.__getitem__, entries.kind), collective, point_to_point,
               map(entries.states.__getitem__, entries.state),
               _none_for(entries.time_created_ns, _ZERO_TO_NONE), _none_for(entries.time_started_ns, _ZERO_TO_NONE),
               _none_for(entries.time_completed_ns, _ZERO_TO_NONE), entries.duration_ms,  # NaN binds as NULL
               map(tracebacks.get, entries.stack_id), collective_ids)


_ROWS_PER_INSERT = 64  # rows bound into one INSERT: a quarter less time than a statement per row


def _insert_rows(connection: sqlite3.Connection, table: str, width: int, rows: Iterator[tuple]) -> None:
    """executemany, _ROWS_PER_INSERT rows to a statement (the rest one by one): SQLite steps and
    resets once per statement, and 512k entries are 8k statements instead of 512k."""
    one = f"({', '.join('?' * width)})"
    rows = iter(rows)
    batch = list(islice(rows, _ROWS_PER_INSERT))
    if len(batch) == _ROWS_PER_INSERT:
        many = f"INSERT INTO {table} VALUES {', '.join([one] * _ROWS_PER_INSERT)}"
        connection.execute(many, tuple(chain.from_iterable(batch)))
        while len(batch := list(islice(rows, _ROWS_PER_INSERT))) == _ROWS_PER_INSERT:
            connection.execute(many, tuple(chain.from_iterable(batch)))
    connection.executemany(f"INSERT INTO {table} VALUES {one}", batch)


def write_sqlite(db: Database, dumps: dict[int, Dump], table: GroupTable, path: str,
                 opened: Callable[[], None] | None = None) -> None:
    """Write every table and the raw entries into a new SQLite file at `path` (a temporary file
    that output.py renames into place: no journal is needed, nothing is read back half-written).
    `opened` is called once SQLite has the file open (output.py then takes its name away)."""
    ids = group_ids(table.groups)
    shared = _SharedJson()  # sizes and dtypes: a few objects shared by every row (db and dumps outlive it)
    try:
        with closing(sqlite3.connect(path)) as connection:
            if opened is not None:
                opened()
            connection.execute("PRAGMA journal_mode = OFF")
            connection.execute("PRAGMA synchronous = OFF")
            connection.executescript(SCHEMA)
            connection.executemany("INSERT INTO groups VALUES (?, ?, ?, ?)", db.groups)
            connection.executemany("INSERT INTO memberships VALUES (?, ?)", db.memberships)
            connection.executemany("INSERT INTO tracebacks VALUES (?, ?)", db.tracebacks)
            connection.executemany(
                "INSERT INTO collectives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((c.id, c.group_id, int(c.pass_check), c.collective_seq_id, c.p2p_seq_id, c.record_id, c.pg_desc,
                  c.collective_name, shared(c.input_sizes), shared(c.output_sizes), shared(c.expected_ranks), c.collective_state,
                  c.input_numel, c.output_numel, _json(c.missing_ranks),
                  _json({r: m.collective_name for r, m in c.mismatch_collectives.items()}) if c.mismatch_collectives else None,
                  c.type_of_mismatch.culprit if c.type_of_mismatch else None)
                 for c in db.collectives))
            connection.executemany(
                "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((f.id, f.kind, f.group_id, f.pg_desc, f.collective_seq_id, f.p2p_seq_id, f.op, _json(f.ranks),
                  _json(f.expected_ranks), f.detail, int(f.root_cause)) for f in db.findings))
            by_text = {t.frames: t.id for t in db.tracebacks}
            kind_ids: dict = {}
            # one call per entry, in the same order as the database's ncclcalls: they are a view
            collective_ids = db.ncclcalls.column("collective_id")
            collective_ids = _none_for(getattr(collective_ids, "values", collective_ids), _NEGATIVE_TO_NONE)  # OptionalIds
            calls = 0
            tracebacks_of = once_per_object({rank: dump.stacks for rank, dump in dumps.items()},  # each shared tuple made text once
                                            lambda stacks: {i: by_text[frames_text(s)] for i, s in enumerate(stacks)})
            for rank, dump in dumps.items():
                tracebacks = tracebacks_of[rank]
                count = len(dump.entries)
                _insert_rows(connection, "entry_rows", 15, _entry_rows(rank, dump, table, ids, kind_ids, tracebacks,
                                                                      range(calls, calls + count), islice(collective_ids, count)))
                calls += count
            if calls != len(db.ncclcalls):  # a call without an entry, or an entry without a call
                raise ValueError(f"SQLite: {calls} entries but {len(db.ncclcalls)} calls")
            connection.executemany(
                "INSERT INTO entry_kinds VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((i, k.pg_name, k.pg_desc, k.op, k.backend, shared(k.input_sizes), shared(k.output_sizes), shared(k.input_dtypes),
                  shared(k.output_dtypes), int(k.is_p2p), profiling_name(k.backend, k.op)) for k, i in kind_ids.items()))
            connection.executescript(INDEXES)
            connection.commit()
    except sqlite3.OperationalError as exc:  # a full disk, an I/O error: the output's fault, not frtrace's
        raise OSError(0, f"SQLite: {exc}") from None
