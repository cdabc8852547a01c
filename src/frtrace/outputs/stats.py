"""Statistics: per group and op (count, bytes, durations) and stragglers (who arrives last)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import pairwise, repeat
from dataclasses import dataclass
from typing import TextIO

from tabulate import tabulate

from ..analysis import size_rules
from ..analysis.align import format_ranks
from ..types import Analysis, Dump, Entry, Kind

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


def _bytes(entry: Entry | Kind) -> int | None:
    """An entry's input bytes, from its sizes and dtype (an entry's kind holds both)."""
    size = DTYPE_BYTES.get(entry.input_dtypes[0]) if entry.input_dtypes else 0
    return None if size is None else size_rules.numel(entry.input_sizes) * size


def _duration_ms(entry: Entry) -> float | None:
    return _duration_of(entry.duration_ms, entry.time_started_ns, entry.time_completed_ns)


def compute_stats(analysis: Analysis, dumps: dict[int, Dump]) -> Stats:
    """Per-op statistics and stragglers from the aligned collectives of an analysis.

    One pass over the collectives. An agreed collective (every issuer holds one kind) is read
    from its group's columns, zipped across the members at C speed (`_AgreedColumns`); the others
    (disputed, coalesced) entry by entry. Both give the same numbers: tests/test_columns.py."""
    tally = _Tally(dumps)
    columns = None  # the current group's: the checks come group by group
    for check in analysis.checks:
        view = check.source
        if check.agreed and getattr(view, "reference", None) is not None:
            if columns is None or columns.view is not view:
                columns = _AgreedColumns(view, dumps)
            columns.add(check, tally)
        else:
            tally.add_entries(check)
    for dump in dumps.values():
        entries = dump.entries
        p2p_kinds = [kind.is_p2p for kind in entries.kinds]
        if any(p2p_kinds):
            for entry in entries.at([i for i, code in enumerate(entries.kind) if p2p_kinds[code]]):
                record = tally.per_op[(entry.pg_desc or entry.pg_name, entry.op.split()[0])]
                record[0] += 1
                record[1] += _bytes(entry) or 0
                if (d := _duration_ms(entry)) is not None:
                    record[2].append(d)
    ops = tuple(OpStats(g, op, n, b if known else None, tuple(sorted(d))) for (g, op), (n, b, d, known) in sorted(tally.per_op.items()))
    stragglers = tuple(sorted(
        (Straggler(r, len(lates), tally.taking_part[r], statistics.median(lates), max(lates), len(tally.impossible[r]),
                   max(tally.impossible[r], default=0.0)) for r, lates in tally.last_counts.items()),
        key=lambda s: (-s.times_last, -s.median_late_ms, s.rank)))
    return Stats(ops, stragglers, tuple(tally.spreads))


class _Tally:
    """The sums compute_stats builds, collective by collective."""

    def __init__(self, dumps: dict[int, Dump]) -> None:
        self.dumps = dumps
        self.per_op: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0, [], True])  # count, bytes, durations, sizes known
        self.last_counts: dict[int, list[float]] = defaultdict(list)
        self.taking_part: dict[int, int] = defaultdict(int)
        self.impossible: dict[int, list[float]] = defaultdict(list)
        self.spreads: list[Spread] = []

    def add_entries(self, check) -> None:
        """One collective, read entry by entry."""
        label = check.group.label
        units = check.entries
        for unit in units.values():
            for entry in unit:
                record = self.per_op[(label, entry.op)]
                size = _bytes(entry)
                record[1] += size or 0
                record[3] = record[3] and size is not None
                if (d := _duration_ms(entry)) is not None:
                    record[2].append(d)
        for op in {e.op for unit in units.values() for e in unit}:
            self.per_op[(label, op)][0] += 1
        if not check.missing_ranks and not check.mismatch and len(units) >= max(2, len(check.group.ranks)):
            ranks = tuple(units)
            last_ops = {r: unit[-1].op for r, unit in units.items()}
            self.add_arrivals(check, ranks, tuple(unit[0].time_created_ns or 0 for unit in units.values()),
                              tuple(_left_at(unit[-1], self.dumps) for unit in units.values()), last_ops.__getitem__)

    def add_arrivals(self, check, ranks: tuple[int, ...], created: tuple[int, ...], left: tuple[int | None, ...],
                     op_of: Callable[[int], str]) -> None:
        """Who arrived last at one collective every member issued, how late, and whether a clock
        lies. `created` holds 0 where a member recorded no time; `left`, when each member left."""
        if not all(created):
            ranks, created, left = _where_recorded(ranks, created, left)
        if len(created) < 2:
            return
        taking_part = self.taking_part
        for r in ranks:
            taking_part[r] += 1
        latest = max(created)
        at = created.index(latest)  # the first of equals, as ranks go
        last = ranks[at]
        middle = statistics.median(created)
        self.spreads.append(Spread(check.group.label, check.collective_seq_id, op_of(last), (latest - min(created)) / 1e6, last))
        self.last_counts[last].append((latest - middle) / 1e6)
        # another member left the collective before `last` arrived: only a clock can do that, in
        # an op that waits for every member (a broadcast's root and the receivers served leave
        # before a late receiver arrives; a reduce's or gather's non-roots likewise)
        earliest_exit = min((t for i, t in enumerate(left) if i != at and t), default=None)
        if earliest_exit and latest > earliest_exit and op_of(last) not in size_rules.ROOTED_OPS:
            self.impossible[last].append((latest - earliest_exit) / 1e6)


def _where_recorded(ranks: tuple, created: tuple, left: tuple) -> tuple[tuple, tuple, tuple]:
    """Only the members that recorded when they arrived; the others' exits still count."""
    kept = [i for i, t in enumerate(created) if t]
    dropped = [left[i] for i, t in enumerate(created) if not t]
    # a member without an arrival time still tells when it left: kept after the arrivals
    return (tuple(ranks[i] for i in kept), tuple(created[i] for i in kept), tuple(left[i] for i in kept) + tuple(dropped))


class _AgreedColumns:
    """One group's agreed collectives read from its members' columns: per stretch of seq ids
    that the same members hold, each collective's arrival times, exits and durations as tuples
    zipped across the members at C speed. No entry is built."""

    def __init__(self, view, dumps: dict[int, Dump]) -> None:
        self.view = view
        self.label = view.group.label
        tracks = [(r, t) for r, t in view.tracks.items() if t.first_seq is not None and t.units is None]
        bounds = sorted({t.first_seq for _, t in tracks} | {t.last_seq + 1 for _, t in tracks})
        self.starts = bounds[:-1]
        self.stretches = []
        per_track = {id(t): _track_columns(t, dumps[r]) for r, t in tracks}
        for first, end in pairwise(bounds):
            holding = [(r, t) for r, t in tracks if t.first_seq <= first and end - 1 <= t.last_seq]
            cut = [(per_track[id(t)], first - t.first_seq, end - t.first_seq) for _, t in holding]
            self.stretches.append((tuple(r for r, _ in holding),
                                   *(list(zip(*(column[i][a:b] for column, a, b in cut))) for i in range(3))))
        self.bytes_of: dict[int, int | None] = {}

    def add(self, check, tally: _Tally) -> None:
        view, seq = self.view, check.collective_seq_id
        at = bisect_right(self.starts, seq) - 1
        ranks, created, left, durations = self.stretches[at]
        i = seq - self.starts[at]
        code = view.reference.kinds[seq - view.reference.first_seq]
        kind = view.codes.kinds[code]
        if code not in self.bytes_of:
            self.bytes_of[code] = _bytes(kind)
        size = self.bytes_of[code]
        record = tally.per_op[(self.label, kind.op)]
        record[0] += 1
        record[1] += (size or 0) * len(ranks)
        record[3] = record[3] and size is not None
        record[2].extend(d for d in durations[i] if d is not None)
        if not check.missing_ranks and not check.mismatch and len(ranks) >= max(2, view.size):
            tally.add_arrivals(check, ranks, created[i], left[i], lambda rank: kind.op)


def _track_columns(track, dump: Dump) -> tuple[list, list, list]:
    """A column track's arrival times (0: not recorded), exits (None: unknown) and durations
    (None: not recorded), one per seq id."""
    entries = dump.entries
    positions = track.positions
    created = list(map(entries.time_created_ns.__getitem__, positions))
    completed = list(map(entries.time_completed_ns.__getitem__, positions))
    started = list(map(entries.time_started_ns.__getitem__, positions))
    gloo = [kind.backend == "gloo" for kind in entries.kinds]
    left = list(map(_exit, completed, positions, map(gloo.__getitem__, map(entries.kind.__getitem__, positions)),
                    repeat(entries.time_created_ns)))
    durations = list(map(_duration_of, map(entries.duration_ms.__getitem__, positions), started, completed))
    return created, left, durations


def _duration_of(recorded: float | None, started: int | None, completed: int | None) -> float | None:
    """The duration recorded, else completion minus start where both were (0 or None: not)."""
    if recorded is not None and recorded == recorded:  # NaN: not recorded
        return recorded
    if started and completed:
        return (completed - started) / 1e6
    return None


def _left_at(last: Entry, dumps: dict[int, Dump]) -> int | None:
    """When a member left a collective, by its unit's last entry."""
    return _exit(last.time_completed_ns, last.index, last.backend == "gloo", dumps[last.rank].entries.time_created_ns)


def _exit(completed: int | None, position: int, gloo: bool, created: Sequence[int]) -> int | None:
    """When the op at `position` ended: its completion time; for gloo (its collectives block) when
    the rank created its next op; None when the dump cannot tell (an enqueued NCCL op without a
    completion time says nothing about when it ended)."""
    if completed:
        return completed
    if gloo and position + 1 < len(created):
        return created[position + 1] or None
    return None


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
