"""The Chrome trace event file: one process per rank, one thread per group, for Perfetto UI and
chrome://tracing. Events are written one at a time, never held as one big list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TextIO

from .align import tracks_completion
from .groups import GroupTable
from .types import Analysis, Dump, Entry

CATEGORY_DONE = "completed"
CATEGORY_STUCK = "not_completed"  # runs to the end of the trace
CATEGORY_UNTRACKED = "no_completion_data"  # gloo: ends where the rank's next op begins


def _start(entry: Entry) -> int | None:
    return entry.time_started_ns or entry.time_created_ns


def _events(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable) -> Iterator[dict]:
    firsts, lasts = [], []  # per time column (0: not recorded), read in C
    for dump in dumps.values():
        for column in (dump.entries.time_created_ns, dump.entries.time_started_ns, dump.entries.time_completed_ns):
            first = min(filter(None, column), default=None)
            if first is not None:
                firsts.append(first)
                lasts.append(max(column))
    if not firsts:
        return
    origin, last = min(firsts), max(lasts)

    def us(ns: int) -> float:
        return round((ns - origin) / 1000, 3)

    thread_of = {g.key: i for i, g in enumerate(table.groups)}
    for rank, dump in dumps.items():
        yield {"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}}
        yield {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}}
        named: set[int] = set()
        tracks = tracks_completion(dump)  # the matcher's rule, so the picture agrees with the verdict
        entries = dump.entries
        for i, entry in enumerate(entries):
            group = table.group_of(rank, entry.pg_name)
            tid = thread_of[group.key] if group else len(thread_of)
            if tid not in named:
                named.add(tid)
                label = f"{group.label} (pg {group.name})" if group else f"pg {entry.pg_name}"
                yield {"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": label}}
            start = _start(entry)
            if start is None:
                continue
            if entry.state == "completed" and (entry.time_completed_ns or entry.duration_ms is not None):
                end = entry.time_completed_ns or start + int(entry.duration_ms * 1e6)
                category = CATEGORY_DONE
            elif tracks or i == len(entries) - 1:
                end, category = last, CATEGORY_STUCK
            else:
                following = _start(entries[i + 1])
                end, category = (following, CATEGORY_UNTRACKED) if following else (last, CATEGORY_STUCK)
            yield {
                "name": entry.op or "unnamed op", "cat": category, "ph": "X", "pid": rank, "tid": tid,
                "ts": us(start), "dur": max(round((end - start) / 1000, 3), 0.001),
                "args": {
                    "op": entry.op, "group": entry.pg_name, "desc": entry.pg_desc, "state": entry.state,
                    "collective_seq_id": entry.collective_seq_id, "p2p_seq_id": entry.p2p_seq_id,
                    "record_id": entry.record_id, "input_sizes": entry.input_sizes, "output_sizes": entry.output_sizes,
                    "input_dtypes": entry.input_dtypes, "output_dtypes": entry.output_dtypes,
                },
            }

    for finding in analysis.findings:
        if not finding.root_cause:
            continue
        for rank in finding.ranks or finding.expected_ranks[:1]:
            entry = analysis.culprit_entries.get(rank)
            when = _start(entry) if entry else last
            yield {"name": f"ROOT CAUSE: {finding.kind} in {finding.op} of {finding.group.label}", "ph": "i", "s": "p",
                   "pid": rank, "tid": thread_of.get(finding.group.key, 0), "ts": us(when or last),
                   "cat": "finding", "args": {"detail": finding.detail, "headline": analysis.headline}}
    for rank, entry in analysis.culprit_entries.items():
        group = table.group_of(rank, entry.pg_name)
        yield {"name": f"culprit rank {rank}: {entry.op} #{entry.collective_seq_id}", "ph": "i", "s": "t",
               "pid": rank, "tid": thread_of[group.key] if group else 0, "ts": us(_start(entry) or last),
               "cat": "culprit", "args": {"state": entry.state}}


def write_chrome_trace(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, out: TextIO) -> int:
    """Stream the trace into `out`; returns the number of events written."""
    out.write('{"displayTimeUnit": "ms", "otherData": {"verdict": ')
    out.write(json.dumps(analysis.headline))
    out.write('}, "traceEvents": [\n')
    count = 0
    for event in _events(analysis, dumps, table):
        if count:
            out.write(",\n")
        out.write(json.dumps(event, separators=(",", ":")))
        count += 1
    out.write("\n]}\n")
    return count
