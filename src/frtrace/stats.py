"""Statistics: per group and op (count, bytes, durations) and stragglers (who arrives last)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import pairwise
from dataclasses import dataclass
from typing import TextIO

from tabulate import tabulate

from . import rules
from .align import format_ranks
from .types import Analysis, Dump, Entry

DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "UInt32": 4, "UInt64": 8,
}


@dataclass(frozen=True, slots=True)
class OpStats:
    group: str
    op: str
    count: int  # collectives (aligned across ranks), or p2p ops
    bytes_moved: int | None  # summed over ranks' inputs; None when a dtype has no known size
    durations_ms: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Straggler:
    rank: int
    times_last: int
    collectives: int  # matched collectives the rank took part in
    median_late_ms: float  # how far behind the median arrival, when last
    max_late_ms: float
    impossible: int  # times it 'arrived' after another member had left: clock skew, not slowness
    skew_ms: float  # the largest such overlap


@dataclass(frozen=True, slots=True)
class Spread:
    group: str
    collective_seq_id: int
    op: str
    spread_ms: float  # last arrival minus first
    last_rank: int


@dataclass(frozen=True, slots=True)
class Stats:
    ops: tuple[OpStats, ...]
    stragglers: tuple[Straggler, ...]
    spreads: tuple[Spread, ...]  # every matched collective, in group and seq order

    @property
    def spreads_ms(self) -> tuple[float, ...]:
        return tuple(s.spread_ms for s in self.spreads)


def _bytes(entry: Entry) -> int | None:
    size = DTYPE_BYTES.get(entry.input_dtypes[0]) if entry.input_dtypes else 0
    return None if size is None else rules.numel(entry.input_sizes) * size


def _duration_ms(entry: Entry) -> float | None:
    if entry.duration_ms is not None:
        return entry.duration_ms
    if entry.time_started_ns and entry.time_completed_ns:
        return (entry.time_completed_ns - entry.time_started_ns) / 1e6
    return None


def compute_stats(analysis: Analysis, dumps: dict[int, Dump]) -> Stats:
    """Per-op statistics and stragglers from the aligned collectives of an analysis.

    One pass over the collectives: their entries are read from the columns at each look."""
    per_op: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0, [], True])
    next_start = _next_starts(dumps)
    last_counts: dict[int, list[float]] = defaultdict(list)
    taking_part: dict[int, int] = defaultdict(int)
    impossible: dict[int, list[float]] = defaultdict(list)
    spreads = []
    for check in analysis.checks:
        label = check.group.label
        units = check.entries
        for unit in units.values():
            for entry in unit:
                record = per_op[(label, entry.op)]
                size = _bytes(entry)
                record[1] += size or 0
                record[3] = record[3] and size is not None
                if (d := _duration_ms(entry)) is not None:
                    record[2].append(d)
        for op in {e.op for unit in units.values() for e in unit}:
            per_op[(label, op)][0] += 1
        if not check.missing_ranks and not check.mismatch and len(units) >= max(2, len(check.group.ranks)):
            _arrivals(check, units, next_start, taking_part, last_counts, impossible, spreads)
    for dump in dumps.values():
        for entry in dump.entries:
            if entry.is_p2p:
                record = per_op[(entry.pg_desc or entry.pg_name, entry.op.split()[0])]
                record[0] += 1
                record[1] += _bytes(entry) or 0
                if (d := _duration_ms(entry)) is not None:
                    record[2].append(d)
    ops = tuple(OpStats(g, op, n, b if known else None, tuple(sorted(d))) for (g, op), (n, b, d, known) in sorted(per_op.items()))
    stragglers = tuple(sorted(
        (Straggler(r, len(lates), taking_part[r], statistics.median(lates), max(lates), len(impossible[r]),
                   max(impossible[r], default=0.0)) for r, lates in last_counts.items()),
        key=lambda s: (-s.times_last, -s.median_late_ms, s.rank)))
    return Stats(ops, stragglers, tuple(spreads))


def _arrivals(check, units: dict, next_start: dict, taking_part: dict, last_counts: dict, impossible: dict,
              spreads: list) -> None:
    """Who arrived last at one collective every member issued, how late, and whether a clock lies."""
    arrivals = {r: unit[0].time_created_ns for r, unit in units.items() if unit[0].time_created_ns}
    if len(arrivals) < 2:
        return
    for r in arrivals:
        taking_part[r] += 1
    last = max(arrivals, key=arrivals.get)
    middle = statistics.median(arrivals.values())
    spreads.append(Spread(check.group.label, check.collective_seq_id, units[last][-1].op,
                          (max(arrivals.values()) - min(arrivals.values())) / 1e6, last))
    last_counts[last].append((arrivals[last] - middle) / 1e6)
    # another member left the collective before `last` arrived: only a clock can do that
    left = [_left_at(unit, next_start) for r, unit in units.items() if r != last]
    earliest_exit = min((t for t in left if t), default=None)
    if earliest_exit and arrivals[last] > earliest_exit:
        impossible[last].append((arrivals[last] - earliest_exit) / 1e6)


def _next_starts(dumps: dict[int, Dump]) -> dict[tuple[int, int], int]:
    """(rank, index) -> when that rank created its next op: a synchronous op had ended by then."""
    starts = {}
    for rank, dump in dumps.items():
        for entry, following in pairwise(dump.entries):
            if following.time_created_ns:
                starts[(rank, entry.index)] = following.time_created_ns
    return starts


def _left_at(unit: tuple[Entry, ...], next_start: dict) -> int | None:
    last = unit[-1]
    if last.time_completed_ns:
        return last.time_completed_ns
    if last.backend == "gloo":  # gloo collectives block: the next op starts after this one ended
        return next_start.get((last.rank, last.index))
    return None  # an enqueued NCCL op without completion time says nothing about when it ended


def render_stats(stats: Stats, out: TextIO, top: int = 10) -> None:
    """The per-op table and the stragglers table, with a clock-skew warning where it applies."""
    print("\nPer-op statistics", file=out)
    rows = [[s.group, s.op, s.count, "?" if s.bytes_moved is None else _human_bytes(s.bytes_moved),
             *((f"{min(s.durations_ms):.3f}", f"{statistics.median(s.durations_ms):.3f}", f"{max(s.durations_ms):.3f}")
               if s.durations_ms else ("-", "-", "-"))] for s in stats.ops]
    print(tabulate(rows, headers=["group", "op", "count", "bytes", "min ms", "median ms", "max ms"], tablefmt="simple"), file=out)

    print("\nStragglers (last to arrive at matched collectives)", file=out)
    if not stats.stragglers:
        print("  no matched collective with creation times on two or more ranks", file=out)
        return
    spread = statistics.median(stats.spreads_ms) if stats.spreads_ms else 0.0
    rows = [[s.rank, f"{s.times_last}/{s.collectives}", f"{s.median_late_ms:.3f}", f"{s.max_late_ms:.3f}",
             f"clock skew? arrived after a peer left, {s.impossible}x, by up to {s.skew_ms:.3f} ms" if s.impossible else ""]
            for s in stats.stragglers[:top]]
    print(tabulate(rows, headers=["rank", "last", "median late ms", "max late ms", "note"], tablefmt="simple"), file=out)
    print(f"median arrival spread: {spread:.3f} ms over {len(stats.spreads)} collectives", file=out)
    widest = sorted(stats.spreads, key=lambda s: -s.spread_ms)[:top]
    print("\nWidest arrival spreads", file=out)
    print(tabulate([[s.group, f"#{s.collective_seq_id}", s.op, f"{s.spread_ms:.3f}", s.last_rank] for s in widest],
                   headers=["group", "seq", "op", "spread ms", "last rank"], tablefmt="simple"), file=out)
    if spread < 1.0:
        print("note: spreads under a millisecond are within the usual clock difference between hosts (NTP keeps "
              "them about that close): they do not show a slow rank", file=out)
    skewed = [s.rank for s in stats.stragglers if s.impossible]
    if skewed:
        print(f"warning: ranks {format_ranks(skewed)} 'arrive' after another member already left the same collective; "
              "no rank can do that, so their clocks are ahead of their peers' (hosts not in sync): lateness "
              "there is clock skew, not a slow rank", file=out)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
