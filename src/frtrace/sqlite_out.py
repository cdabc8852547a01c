"""The database as SQLite: the flat tables plus one row per raw entry, indexed for the usual
questions. Rows are streamed into executemany, never collected first."""

from __future__ import annotations

import json
import sqlite3

from .builder import frames_text, group_ids
from .groups import GroupTable
from .database import Database
from .types import Dump

SCHEMA = """
CREATE TABLE groups (id TEXT PRIMARY KEY, desc TEXT, size INTEGER, name TEXT);
CREATE TABLE memberships (group_id TEXT, global_rank INTEGER);
CREATE TABLE tracebacks (id INTEGER PRIMARY KEY, frames TEXT);
CREATE TABLE collectives (id INTEGER PRIMARY KEY, group_id TEXT, pass_check INTEGER, collective_seq_id INTEGER,
    p2p_seq_id INTEGER, record_id INTEGER, pg_desc TEXT, collective_name TEXT, input_sizes TEXT, output_sizes TEXT,
    expected_ranks TEXT, collective_state TEXT, input_numel INTEGER, output_numel INTEGER, missing_ranks TEXT,
    mismatch_collectives TEXT, type_of_mismatch TEXT);
CREATE TABLE ncclcalls (id INTEGER PRIMARY KEY, collective_id INTEGER, group_id TEXT, global_rank INTEGER,
    traceback_id INTEGER, collective_type TEXT, sizes TEXT);
CREATE TABLE findings (id INTEGER PRIMARY KEY, kind TEXT, group_id TEXT, pg_desc TEXT, collective_seq_id INTEGER,
    p2p_seq_id INTEGER, op TEXT, ranks TEXT, expected_ranks TEXT, detail TEXT, root_cause INTEGER);
CREATE TABLE entries (rank INTEGER, idx INTEGER, record_id INTEGER, group_id TEXT, pg_name TEXT, pg_desc TEXT,
    collective_seq_id INTEGER, p2p_seq_id INTEGER, op TEXT, backend TEXT, input_sizes TEXT, output_sizes TEXT,
    input_dtypes TEXT, output_dtypes TEXT, state TEXT, is_p2p INTEGER, time_created_ns INTEGER,
    time_started_ns INTEGER, time_completed_ns INTEGER, duration_ms REAL, traceback_id INTEGER);
"""
INDEXES = """
CREATE INDEX entries_by_rank ON entries (rank, group_id, collective_seq_id);
CREATE INDEX entries_by_collective ON entries (group_id, collective_seq_id);
CREATE INDEX entries_by_state ON entries (state);
CREATE INDEX calls_by_collective ON ncclcalls (collective_id);
CREATE INDEX calls_by_rank ON ncclcalls (global_rank);
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


def write_sqlite(db: Database, dumps: dict[int, Dump], table: GroupTable, path: str) -> None:
    """Write every table and the raw entries into a new SQLite file at `path`."""
    ids = group_ids(table.groups)
    shared = _SharedJson()  # sizes and dtypes: a few objects shared by every row (db and dumps outlive it)
    connection = sqlite3.connect(path)
    try:
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
            "INSERT INTO ncclcalls VALUES (?, ?, ?, ?, ?, ?, ?)",
            ((c.id, c.collective_id, c.group_id, c.global_rank,
              c.traceback_id if c.traceback_id >= 0 else None, c.collective_type, shared(c.sizes)) for c in db.ncclcalls))
        connection.executemany(
            "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((f.id, f.kind, f.group_id, f.pg_desc, f.collective_seq_id, f.p2p_seq_id, f.op, _json(f.ranks),
              _json(f.expected_ranks), f.detail, int(f.root_cause)) for f in db.findings))
        by_text = {t.frames: t.id for t in db.tracebacks}
        traceback_of = {rank: [by_text[frames_text(stack)] for stack in dump.stacks] for rank, dump in dumps.items()}
        connection.executemany(
            "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((e.rank, e.index, e.record_id, ids[g.key] if (g := table.group_of(e.rank, e.pg_name)) else e.pg_name,
              e.pg_name, e.pg_desc, None if e.is_p2p else e.collective_seq_id, e.p2p_seq_id if e.is_p2p else None,
              e.op, e.backend, shared(e.input_sizes), shared(e.output_sizes), shared(e.input_dtypes), shared(e.output_dtypes),
              e.state, int(e.is_p2p), e.time_created_ns, e.time_started_ns, e.time_completed_ns, e.duration_ms,
              traceback_of[e.rank][e.stack_id] if e.stack_id >= 0 else None)
             for dump in dumps.values() for e in dump.entries))
        connection.executescript(INDEXES)
        connection.commit()
    finally:
        connection.close()
