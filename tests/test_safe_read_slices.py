"""Survivors of the mutation run's `safety` slices in reading/safe_read.py (session 41), each test
seen failing on its mutant in the test's process: where reading is confined to roots (frtrace
mcp), an archive member's copy, which frtrace made itself in its private folder outside them, is
still read."""

from __future__ import annotations

import pickle

from conftest import make_dump, ops
from frtrace.reading import limits
from frtrace.reading.safe_read import read_raw


def test_an_archive_members_copy_is_read_where_reading_is_confined_to_roots_it_lies_outside(tmp_path, monkeypatch):
    root, private = tmp_path / "root", tmp_path / "private"
    root.mkdir()
    private.mkdir()
    dump = pickle.dumps(make_dump(ops(2)), protocol=2)
    copy = private / "members"
    copy.write_bytes(b"another member's bytes" + dump)
    monkeypatch.setattr(limits, "_confined", ())
    limits.confine((str(root),))
    raw, file_format = read_raw(str(copy), shown=str(root / "set.tar:nccl_trace_rank_0"), span=(22, len(dump)))
    assert file_format == "pickle" and len(raw["entries"]) == 2
