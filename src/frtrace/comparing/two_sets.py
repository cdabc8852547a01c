"""Two dump sets of one job side by side (`frtrace compare A B`): is it hung, or just slow?

A is the earlier set, B the later. A rank moved when B holds records A does not (its last
record id grew), or ops A shows in flight completed. No rank moved: the job was stuck before A,
and B's own analysis says who it waits for. Some moved and some did not: the frozen ones, and
the collective they sit in. Every rank moved: it is progressing. Ranks and groups present in
only one set are compared on what the sets share, and named.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from tabulate import tabulate

from ..analysis.align import entry_label, format_ranks, ranks_word, tracks_completion
from ..reading.groups import GroupTable
from ..types import Analysis, Dump

COMPARE_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Standing:
    """Where one rank stood in one group in one set."""

    issued: int | None  # its last collective seq id issued
    completed: int | None  # its last collective seq id completed; None where the dump does not record completion


@dataclass(frozen=True, slots=True)
class RankStep:
    rank: int
    records: tuple[int, int]  # records made up to each dump (last record id + 1)
    done: tuple[int, int]  # entries completed in each dump
    moved: bool
    groups: dict[str, tuple[Standing, Standing]]  # group label -> (in A, in B), for groups it has in both
    sits_in: str  # what it is doing in B: the op it waits in, or its last op


@dataclass(frozen=True, slots=True)
class OpTiming:
    group: str
    op: str
    a: tuple[float, ...]  # durations in A (ms)
    b: tuple[float, ...]

    @property
    def change(self) -> float | None:
        """B's mean over A's, where both have durations."""
        if not self.a or not self.b or not statistics.fmean(self.a):
            return None
        return statistics.fmean(self.b) / statistics.fmean(self.a)


@dataclass
class Comparison:
    verdict: str  # "progressing" | "stuck" | "partly_stuck"
    headline: str
    steps: list[RankStep]
    frozen: list[int]
    moving: list[int]
    only_in_a: list[int]
    only_in_b: list[int]
    groups_only_in_a: list[str]
    groups_only_in_b: list[str]
    analysis_b: Analysis
    notes: list[str] = field(default_factory=list)


def _label(group) -> str:
    return f"{group.label} (pg {group.name})"


def _records(dump: Dump) -> int:
    ids = [r for r in dump.entries.record_id[-1:] if r is not None]
    return ids[0] + 1 if ids else len(dump.entries)


def _completed(dump: Dump) -> int:
    entries = dump.entries
    if "completed" not in entries.states:
        return 0
    code = entries.states.index("completed")
    return sum(1 for s in entries.state if s == code)


def _standings(dump: Dump, table: GroupTable) -> dict[str, Standing]:
    entries = dump.entries
    tracking = tracks_completion(dump)
    found: dict[str, Standing] = {}
    for name, run in (entries.runs or {}).items():
        group = table.group_of(dump.rank, name)
        if group is None:
            continue
        issued = completed = None
        for p in run.positions:
            if entries.kinds[entries.kind[p]].is_p2p:
                continue
            seq = entries.collective_seq_id[p]
            issued = seq if issued is None else max(issued, seq)
            if entries.states[entries.state[p]] == "completed":
                completed = seq if completed is None else max(completed, seq)
        if issued is not None:
            found[_label(group)] = Standing(issued, completed if tracking else None)
    return found


def _sits_in(rank: int, dump: Dump, analysis: Analysis, table: GroupTable) -> str:
    blocked = analysis.blocked_in.get(rank)
    if blocked is not None:
        return f"waits in {blocked[0]}"
    if not len(dump.entries):
        return "no op in its dump"
    last = dump.entries[-1]
    return f"last op {entry_label(last, table)} ({last.state})"


def older(dumps_a: dict[int, Dump], dumps_b: dict[int, Dump]) -> bool:
    """Whether every rank both sets hold made fewer records by B than by A: B was taken first."""
    shared = dumps_a.keys() & dumps_b.keys()
    return bool(shared) and all(_records(dumps_b[rank]) < _records(dumps_a[rank]) for rank in shared)


def same_set(dumps_a: dict[int, Dump], dumps_b: dict[int, Dump]) -> bool:
    """Whether A and B hold the same dumps: the same ranks, each with the same records, ops and
    states (one folder twice, a link to it, or its own archive)."""
    if dumps_a.keys() != dumps_b.keys():
        return False
    return all(_record_view(dumps_a[rank]) == _record_view(dumps_b[rank]) for rank in dumps_a)


def _record_view(dump: Dump) -> tuple:
    entries = dump.entries
    return (list(entries.record_id), [entries.kinds[k] for k in entries.kind], [entries.states[s] for s in entries.state],
            list(entries.collective_seq_id), list(entries.p2p_seq_id))


def not_one_job(dumps_a: dict[int, Dump], table_a: GroupTable, dumps_b: dict[int, Dump], table_b: GroupTable,
                forward: bool = True) -> str | None:
    """What shows that A and B are not one job dumped twice, in words, or None.

    One job keeps its groups (a name both sets use has the same desc, and, where both read it from
    pg_config, the same members), and the records both sets hold of a rank are the same ops. With
    `forward`, B also continues A on every rank both hold: no fewer records, no group's seq ids
    going back. Ranks and groups in one set only are no difference (a dump can be missing)."""
    descs_a, descs_b = _groups_by_name(table_a), _groups_by_name(table_b)
    for name in sorted(descs_a.keys() & descs_b.keys()):
        (desc_a, members_a), (desc_b, members_b) = descs_a[name], descs_b[name]
        if desc_a != desc_b:
            return f"group pg {name} is {desc_a or 'without a desc'} in A and {desc_b or 'without a desc'} in B"
        if members_a is not None and members_b is not None and members_a != members_b:
            return (f"group {desc_a or name} (pg {name}) has ranks {format_ranks(sorted(members_a))} in A and "
                    f"{format_ranks(sorted(members_b))} in B")
    for rank in sorted(dumps_a.keys() & dumps_b.keys()):
        said = _not_continued(rank, dumps_a[rank], table_a, dumps_b[rank], table_b, forward)
        if said:
            return said
    return None


def _groups_by_name(table: GroupTable) -> dict[str, tuple[str, frozenset | None]]:
    """Group name -> (desc, its members where pg_config gave them, else None); names that split_group
    repeats with other members are left out (their members are not one list)."""
    found: dict[str, list] = defaultdict(list)
    for group in table.groups:
        found[group.name].append(group)
    return {name: (groups[0].desc if groups[0].desc != "undefined" else "",
                   None if groups[0].inferred else frozenset(groups[0].ranks))
            for name, groups in found.items() if len(groups) == 1}


def _not_continued(rank: int, a: Dump, table_a: GroupTable, b: Dump, table_b: GroupTable, forward: bool) -> str | None:
    ids_a, ids_b = list(a.entries.record_id), list(b.entries.record_id)
    if ids_a and ids_b and None not in ids_a and None not in ids_b:
        if forward and ids_b[-1] < ids_a[-1]:
            return f"rank {rank} holds records up to {ids_a[-1]} in A but only to {ids_b[-1]} in B"
        where_b = {record: i for i, record in enumerate(ids_b)}
        for i, record in enumerate(ids_a):  # the records both hold are the same ops
            j = where_b.get(record)
            if j is None:
                continue
            op_a, op_b = _record_label(a, i, table_a), _record_label(b, j, table_b)
            if op_a != op_b:
                return f"rank {rank}'s record {record} is {op_a} in A and {op_b} in B"
    moments_b = {m.pg_name: m for m in b.moments}
    for moment in a.moments:  # the same last op of a group was created at one moment, in one run
        other = moments_b.get(moment.pg_name)
        if (other is not None and other.last_seq == moment.last_seq and moment.last_created_ns and other.last_created_ns
                and other.last_created_ns != moment.last_created_ns):
            group = table_a.group_of(rank, moment.pg_name)
            apart = abs(other.last_created_ns - moment.last_created_ns) / 1e9
            return (f"rank {rank}'s #{moment.last_seq} of {group.label if group else moment.pg_name} was created "
                    f"{apart:.3g} s apart in A and B: two runs of the program, not one run dumped twice")
    if not forward:
        return None
    standing_a, standing_b = _standings(a, table_a), _standings(b, table_b)
    for label in sorted(standing_a.keys() & standing_b.keys()):
        if standing_b[label].issued < standing_a[label].issued:
            return (f"rank {rank}'s last op in {label} is #{standing_a[label].issued} in A but #{standing_b[label].issued} "
                    "in B")
    return None


def _record_label(dump: Dump, index: int, table: GroupTable) -> str:
    entries = dump.entries
    kind = entries.kinds[entries.kind[index]]
    seq = f"p2p #{entries.p2p_seq_id[index]}" if kind.is_p2p else f"#{entries.collective_seq_id[index]}"
    group = table.group_of(dump.rank, kind.pg_name)
    sizes = "x".join(map(str, kind.input_sizes[0])) if kind.input_sizes and kind.input_sizes[0] else "-"
    return f"{kind.op} {seq} of {group.label if group else kind.pg_name} ({sizes})"


def compare_sets(dumps_a: dict[int, Dump], table_a: GroupTable, dumps_b: dict[int, Dump], table_b: GroupTable,
                 analysis_b: Analysis) -> Comparison:
    shared = sorted(dumps_a.keys() & dumps_b.keys())
    steps: list[RankStep] = []
    for rank in shared:
        a, b = dumps_a[rank], dumps_b[rank]
        records, done = (_records(a), _records(b)), (_completed(a), _completed(b))
        standing_a, standing_b = _standings(a, table_a), _standings(b, table_b)
        groups = {label: (standing_a[label], standing_b[label]) for label in standing_a.keys() & standing_b.keys()}
        moved = records[1] > records[0] or done[1] > done[0]
        steps.append(RankStep(rank, records, done, moved, dict(sorted(groups.items())), _sits_in(rank, b, analysis_b, table_b)))
    labels_a = {_label(g) for g in table_a.groups}
    labels_b = {_label(g) for g in table_b.groups}
    frozen = [s.rank for s in steps if not s.moved]
    moving = [s.rank for s in steps if s.moved]
    verdict, headline = _verdict(steps, frozen, moving, analysis_b)
    comparison = Comparison(verdict, headline, steps, frozen, moving, sorted(dumps_a.keys() - dumps_b.keys()),
                            sorted(dumps_b.keys() - dumps_a.keys()), sorted(labels_a - labels_b), sorted(labels_b - labels_a),
                            analysis_b)
    for name, ranks in (("only in A", comparison.only_in_a), ("only in B", comparison.only_in_b)):
        if ranks:
            comparison.notes.append(f"rank(s) {format_ranks(ranks)} {name}: compared on the ranks both sets hold")
    for name, labels in (("only in A", comparison.groups_only_in_a), ("only in B", comparison.groups_only_in_b)):
        if labels:
            comparison.notes.append(f"group(s) {', '.join(labels[:8])} {name}")
    return comparison


def _verdict(steps: list[RankStep], frozen: list[int], moving: list[int], analysis_b: Analysis) -> tuple[str, str]:
    by_step = {s.rank: s for s in steps}
    if not frozen:
        gains = [by_step[r].records[1] - by_step[r].records[0] for r in moving]
        return "progressing", (f"PROGRESSING: all {len(moving)} ranks moved between A and B, "
                               f"{min(gains)} to {max(gains)} new records each (median {statistics.median(gains):g})")
    culprits, waiting, idle = frozen_kinds(frozen, analysis_b)
    parts = []
    if culprits:
        parts.append(f"{ranks_word(culprits)} {'is' if len(culprits) == 1 else 'are'} frozen (B's culprit)")
    parts.extend(f"{ranks_word(ranks)} wait in {op}" for op, ranks in waiting.items())
    if idle:
        parts.append(f"{ranks_word(idle)} made no new record")
    if not moving:
        return "stuck", f"STUCK: no rank moved between A and B, so the hang predates A: {'; '.join(parts)}"
    return "partly_stuck", (f"PARTLY STUCK: {'; '.join(parts)}; {ranks_word(moving)} {'is' if len(moving) == 1 else 'are'} "
                            "still moving")


def frozen_kinds(frozen: list[int], analysis_b: Analysis) -> tuple[list[int], dict[str, list[int]], list[int]]:
    """The frozen ranks as B's analysis sees them: its culprits, the ranks waiting in an op (by
    op), and the rest."""
    culprits = [r for r in analysis_b.culprit_ranks if r in frozen]
    waiting: dict[str, list[int]] = defaultdict(list)
    idle = []
    for rank in frozen:
        if rank in culprits:
            continue
        if rank in analysis_b.blocked_in:
            waiting[analysis_b.blocked_in[rank][0]].append(rank)
        else:
            idle.append(rank)
    return culprits, dict(waiting), idle


def op_timings(dumps_a: dict[int, Dump], table_a: GroupTable, dumps_b: dict[int, Dump], table_b: GroupTable) -> list[OpTiming]:
    """Per group kind and op, the durations each set recorded (completed ops with a duration or
    start and completion times), most slowed-down first."""
    def durations(dumps: dict[int, Dump], table: GroupTable) -> dict[tuple[str, str], list[float]]:
        found: dict[tuple[str, str], list[float]] = defaultdict(list)
        for rank, dump in dumps.items():
            entries = dump.entries
            for i in range(len(entries)):
                if entries.states[entries.state[i]] != "completed":
                    continue
                took = entries.duration_ms[i]
                if took is None or math.isnan(took):
                    start, end = entries.time_started_ns[i], entries.time_completed_ns[i]
                    if not (start and end and end >= start):
                        continue
                    took = (end - start) / 1e6
                kind = entries.kinds[entries.kind[i]]
                group = table.group_of(rank, kind.pg_name)
                found[(group.label if group else kind.pg_name, kind.op)].append(took)
        return found

    a, b = durations(dumps_a, table_a), durations(dumps_b, table_b)
    rows = [OpTiming(group, op, tuple(a.get((group, op), ())), tuple(b.get((group, op), ()))) for group, op in a.keys() | b.keys()]
    return sorted(rows, key=lambda t: (t.change is None, -(t.change or 0), t.group, t.op))


def percentile(values: tuple[float, ...], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def comparison_dict(comparison: Comparison, timings: list[OpTiming] | None, version: str) -> dict:
    def pair(x, y):
        return [x, y]

    return {
        "schema_version": COMPARE_SCHEMA_VERSION,
        "frtrace_version": version,
        "verdict": comparison.verdict,
        "headline": comparison.headline,
        "frozen": comparison.frozen,
        "culprits": frozen_kinds(comparison.frozen, comparison.analysis_b)[0],
        "waiting": [{"op": op, "ranks": ranks} for op, ranks in frozen_kinds(comparison.frozen, comparison.analysis_b)[1].items()],
        "moving": comparison.moving,
        "only_in_a": comparison.only_in_a,
        "only_in_b": comparison.only_in_b,
        "groups_only_in_a": comparison.groups_only_in_a,
        "groups_only_in_b": comparison.groups_only_in_b,
        "ranks": [{"rank": s.rank, "moved": s.moved, "records": list(s.records), "completed": list(s.done), "in_b": s.sits_in,
                   "groups": [{"group": label, "issued": pair(a.issued, b.issued), "completed": pair(a.completed, b.completed)}
                              for label, (a, b) in s.groups.items()]}
                  for s in comparison.steps],
        "analysis_b": {"verdict": comparison.analysis_b.verdict, "headline": comparison.analysis_b.headline,
                       "culprit_ranks": list(comparison.analysis_b.culprit_ranks)},
        "notes": comparison.notes,
        "timing": None if timings is None else [
            {"group": t.group, "op": t.op, "count": [len(t.a), len(t.b)],
             "mean_ms": [statistics.fmean(t.a) if t.a else None, statistics.fmean(t.b) if t.b else None],
             "p50_ms": [percentile(t.a, 0.5), percentile(t.b, 0.5)], "p99_ms": [percentile(t.a, 0.99), percentile(t.b, 0.99)],
             "change": t.change} for t in timings],
    }


MAX_ROWS = 32


def render_comparison(comparison: Comparison, timings: list[OpTiming] | None, out, head: int = 20) -> None:
    print(comparison.headline, file=out)
    if comparison.verdict != "progressing":
        print(f"B's own analysis: {comparison.analysis_b.headline}", file=out)
    steps = sorted(comparison.steps, key=lambda s: (s.moved, s.rank))  # the frozen first
    rows = [[s.rank, "yes" if s.moved else "no", f"{s.records[0]} -> {s.records[1]}", f"{s.done[0]} -> {s.done[1]}", s.sits_in]
            for s in steps[:MAX_ROWS]]
    print("\nRanks (frozen first)", file=out)
    print(tabulate(rows, headers=["rank", "moved", "records A -> B", "completed A -> B", "in B"], tablefmt="simple"), file=out)
    if len(steps) > MAX_ROWS:
        print(f"... {len(steps) - MAX_ROWS} more rank(s); --json lists them all", file=out)
    groups: dict[str, list[tuple]] = defaultdict(list)
    for s in comparison.steps:
        for label, (a, b) in s.groups.items():
            groups[label].append((s.rank, a.issued, b.issued))
    if groups:
        print("\nGroups (last collective issued, lowest and highest over its ranks)", file=out)
        grows = []
        for label, seen in sorted(groups.items()):
            advanced = [r for r, x, y in seen if y is not None and x is not None and y > x]
            grows.append([label, _span(x for _, x, _ in seen), _span(y for _, _, y in seen),
                          format_ranks(advanced) if advanced else "none"])
        print(tabulate(grows[:MAX_ROWS], headers=["group", "in A", "in B", "ranks that advanced"], tablefmt="simple"), file=out)
    if timings is not None:
        print("\nOp durations, A vs B (most slowed down first)", file=out)
        timed = [t for t in timings if t.a or t.b]
        if not timed:
            print("  no durations recorded in either set (gloo records none; NCCL needs TORCH_NCCL_ENABLE_TIMING=1)", file=out)
        else:
            trows = [[t.group, t.op, f"{len(t.a)} / {len(t.b)}", _ms(t.a and statistics.fmean(t.a)), _ms(t.b and statistics.fmean(t.b)),
                      f"{_ms(percentile(t.a, 0.5))} / {_ms(percentile(t.b, 0.5))}", f"{_ms(percentile(t.a, 0.99))} / {_ms(percentile(t.b, 0.99))}",
                      f"{t.change:.2f}x" if t.change is not None else "-"] for t in timed[:head]]
            print(tabulate(trows, headers=["group", "op", "count A / B", "mean A ms", "mean B ms", "p50 A / B", "p99 A / B", "change"],
                           tablefmt="simple", disable_numparse=True), file=out)
            if len(timed) > head:
                print(f"... {len(timed) - head} more; raise --head to see them", file=out)
    if comparison.notes:
        print("\nNotes", file=out)
        for note in comparison.notes:
            print(f"  {note}", file=out)


def _span(values) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    low, high = min(present), max(present)
    return f"#{low}" if low == high else f"#{low}-#{high}"


def _ms(value) -> str:
    return "-" if value is None or value == () else f"{value:.3f}"
