"""The Chrome trace event file: one process per rank, one thread per group, for Perfetto UI and
chrome://tracing. Events are written one at a time, never held as one big list.

What a person should see first is the hang: ops that never completed run to a horizon well past
the last recorded time (as long again as the whole trace), in a colour no completed op has; the
culprit's row is marked where it stopped, the collective it never joined is drawn on its row
where it should have been, and flow arrows tie the root collective across its ranks (where one
rank alone issued it, from its op to each NEVER ISSUED span). The colours are the trace viewer's
reserved names (it rejects any other `cname`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TextIO

from ..analysis.align import tracks_completion
from ..reading.groups import GroupTable
from ..types import Analysis, Dump, Entry, Finding

CATEGORY_DONE = "completed"
CATEGORY_STUCK = "not_completed"  # runs to the horizon
CATEGORY_UNTRACKED = "no_completion_data"  # gloo: ends where the rank's next op begins
CATEGORY_NEVER = "never_issued"  # the root collective, drawn on a culprit's row where it should have been

COLOUR = {CATEGORY_DONE: "good", CATEGORY_UNTRACKED: "grey", CATEGORY_STUCK: "terrible", CATEGORY_NEVER: "yellow"}

DEFAULT_TRACE_RANKS = 8  # --trace-ranks without a number: culprits, their group peers, and 8 others
TRACE_EVERY_RANK_UP_TO = 64  # bigger jobs get --trace-ranks by default (256 x 2000 entries: 157 MB whole)


def chosen_ranks(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, others: int) -> list[int]:
    """What --trace-ranks keeps of a big job, in rank order: the culprits; their peers, the
    members of the root findings' groups where those are smaller than the world, else of each
    culprit's smallest groups (its tp or pp peers); and `others` more ranks (the lowest)."""
    keep = set(analysis.culprit_ranks)
    world = len(table.world)
    roots = [f.group for f in analysis.findings if f.root_cause and len(f.group.ranks) < world]
    for group in roots:
        keep.update(group.ranks)
    if not roots:
        for rank in analysis.culprit_ranks:
            theirs = [g for g in table.groups if rank in g.ranks and 1 < len(g.ranks) < world]
            smallest = min((len(g.ranks) for g in theirs), default=0)
            keep.update(r for g in theirs if len(g.ranks) == smallest for r in g.ranks)
    keep &= dumps.keys()
    rest = [r for r in dumps if r not in keep]
    return sorted(keep | set(rest[:others]))


def _start(entry: Entry) -> int | None:
    return entry.time_started_ns or entry.time_created_ns


def _time_span(dumps: Iterable[Dump]) -> tuple[int, int] | None:
    firsts, lasts = [], []  # per time column (0: not recorded), read in C
    for dump in dumps:
        for column in (dump.entries.time_created_ns, dump.entries.time_started_ns, dump.entries.time_completed_ns):
            first = min(filter(None, column), default=None)
            if first is not None:
                firsts.append(first)
                lasts.append(max(column))
    return (min(firsts), max(lasts)) if firsts else None


def root_entries(finding: Finding, dumps: dict[int, Dump], table: GroupTable) -> dict[int, Entry]:
    """Rank -> its entry of the finding's collective, for the members that issued it."""
    found: dict[int, Entry] = {}
    seq = finding.collective_seq_id
    if seq is None:
        return found
    for rank in finding.expected_ranks:
        dump = dumps.get(rank)
        if dump is None:
            continue
        entries = dump.entries
        for i in range(len(entries) - 1, -1, -1):
            if entries.collective_seq_id[i] == seq and not entries.kinds[entries.kind[i]].is_p2p:
                entry = entries[i]
                if table.group_of(rank, entry.pg_name) is finding.group:
                    found[rank] = entry
                    break
    return found


def _events(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, ranks: list[int], last_n: int | None) -> Iterator[dict]:
    span = _time_span(dumps.values())
    if span is None:
        return
    origin, last = span
    horizon = last + max(last - origin, 1_000_000_000)  # stuck ops end here: past everything that ended

    def us(ns: int) -> float:
        return round((ns - origin) / 1000, 3)

    thread_of = {g.key: i for i, g in enumerate(table.groups)}
    for rank in ranks:
        dump = dumps[rank]
        culprit = rank in analysis.culprit_ranks
        yield {"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}" + ("  << CULPRIT" if culprit else "")}}
        # culprits first, so that they are on screen without scrolling
        yield {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank - (1 << 30 if culprit else 0)}}
        named: set[int] = set()
        tracks = tracks_completion(dump)  # the matcher's rule, so the picture agrees with the verdict
        entries = dump.entries
        first = max(0, len(entries) - last_n) if last_n else 0
        for i in range(first, len(entries)):
            entry = entries[i]
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
                end, category = horizon, CATEGORY_STUCK
            else:
                following = _start(entries[i + 1])
                end, category = (following, CATEGORY_UNTRACKED) if following else (horizon, CATEGORY_STUCK)
            seq = entry.p2p_seq_id if entry.is_p2p else entry.collective_seq_id
            yield {
                "name": f"{entry.op or 'unnamed op'} #{seq}" + (" (never completed)" if category == CATEGORY_STUCK else ""),
                "cat": category, "cname": COLOUR[category], "ph": "X", "pid": rank, "tid": tid,
                "ts": us(start), "dur": max(round((end - start) / 1000, 3), 0.001),
                "args": {  # op, group and rank are the event's name, thread and process
                    "state": entry.state, "collective_seq_id": entry.collective_seq_id, "p2p_seq_id": entry.p2p_seq_id,
                    "record_id": entry.record_id, "input_sizes": entry.input_sizes, "output_sizes": entry.output_sizes,
                    "input_dtypes": entry.input_dtypes, "output_dtypes": entry.output_dtypes,
                },
            }

    shown = set(ranks)
    flow = 0
    for finding in analysis.findings:
        if not finding.root_cause:
            continue
        tid = thread_of.get(finding.group.key, 0)
        issued = {r: e for r, e in root_entries(finding, dumps, table).items() if r in shown}
        starts = [s for s in map(_start, issued.values()) if s]
        begun = min(starts) if starts else last
        never = [rank for rank in finding.ranks if rank in shown and rank not in issued]
        for rank in never:
            # the collective it never joined, where it should have been: from when the others began it
            yield {"name": f"NEVER ISSUED: {finding.op} #{finding.collective_seq_id} of {finding.group.label}",
                   "cat": CATEGORY_NEVER, "cname": COLOUR[CATEGORY_NEVER], "ph": "X", "pid": rank, "tid": tid,
                   "ts": us(begun), "dur": max(round((horizon - begun) / 1000, 3), 0.001),
                   "args": {"detail": finding.detail, "headline": analysis.headline}}
        linked = sorted(issued.items(), key=lambda item: (_start(item[1]) or last, item[0]))

        def arrow(ph: str, rank: int, ts: float) -> dict:
            """One step of a flow arrow of the root collective; its end binds to the slice around it."""
            event = {"name": f"{finding.op} #{finding.collective_seq_id}", "cat": "root_collective", "id": flow,
                     "pid": rank, "tid": tid, "ts": ts, "ph": ph}
            return {**event, "bp": "e"} if ph == "f" else event

        if len(linked) > 1:  # arrows from the first issuer to each other member that issued it
            flow += 1
            for step, (rank, entry) in enumerate(linked):
                yield arrow("s" if step == 0 else "t" if step < len(linked) - 1 else "f", rank, us(_start(entry) or last))
        elif linked:  # one issuer: an arrow from its op to each NEVER ISSUED span it waits for
            issuer, entry = linked[0]
            for rank in never:
                flow += 1
                yield arrow("s", issuer, us(_start(entry) or last))
                yield arrow("f", rank, us(begun))
        for rank in finding.ranks:
            if rank not in shown:
                continue
            entry = analysis.culprit_entries.get(rank)
            when = _start(entry) if entry else last
            yield {"name": f"ROOT CAUSE: {finding.kind} in {finding.op} of {finding.group.label}", "ph": "i", "s": "p",
                   "pid": rank, "tid": tid, "ts": us(when or last), "cname": "black",
                   "cat": "finding", "args": {"detail": finding.detail, "headline": analysis.headline}}
    for rank, entry in analysis.culprit_entries.items():
        if rank not in shown:
            continue
        group = table.group_of(rank, entry.pg_name)
        yield {"name": f"CULPRIT rank {rank} stopped here: {entry.op} #{entry.collective_seq_id}", "ph": "i", "s": "t",
               "pid": rank, "tid": thread_of[group.key] if group else 0, "ts": us(_start(entry) or last),
               "cname": "black", "cat": "culprit", "args": {"state": entry.state}}


def write_chrome_trace(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, out: TextIO,
                       trace_ranks: int | None = None, trace_last: int | None = None) -> int:
    """Stream the trace into `out`; returns the number of events written. `trace_ranks`: only the
    culprits, their groups' members and that many other ranks; `trace_last`: each rank's last N
    entries."""
    ranks = chosen_ranks(analysis, dumps, table, trace_ranks) if trace_ranks is not None else sorted(dumps)
    out.write('{"displayTimeUnit": "ms", "otherData": {"verdict": ')
    out.write(json.dumps(analysis.headline))
    out.write(', "ranks_shown": ')
    out.write(json.dumps(f"{len(ranks)} of {len(dumps)}"))
    out.write('}, "traceEvents": [\n')
    count = 0
    for event in _events(analysis, dumps, table, ranks, trace_last):
        if count:
            out.write(",\n")
        out.write(json.dumps(event, separators=(",", ":")))
        count += 1
    out.write("\n]}\n")
    return count
