"""Alignment: each rank's entries split by group into units, and per group an index of who
issued which collective, by sequence id (never by record_id, a per-process counter).

A member's status for collective #s of a group is one of: issued (its buffer holds it), not
issued (its buffer ends before #s in that group), or unknown (no dump, or #s fell out of its
ring buffer)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import rules
from .groups import GroupTable
from .types import Dump, Entry, Group

_P2P_NAME = re.compile(r"^(send|recv)\s*(\d+)\s*(->|<-)\s*(\d+)")
_TRACKING_BACKENDS = frozenset({"nccl", "ncclx", "rccl", "xccl", "hccl", "mccl"})


# ------------------------------------------------------------------------------ per-rank views
# A unit is one collective as one rank issued it: a tuple of its entries, one entry or a coalesced
# group's entries ending in the terminator, which carries the group's real state.
UnitEntries = tuple  # tuple[Entry, ...]


def unit_state(unit: UnitEntries) -> str:
    return unit[-1].state


def unit_ops(unit: UnitEntries) -> tuple[str, ...]:
    return tuple(e.op for e in unit)


def unit_label(unit: UnitEntries) -> str:
    ops = [e.op for e in unit if e.op not in rules.COALESCED_TERMINATORS]
    if len(unit) == 1 or not ops:
        return unit[-1].op or "unnamed op"
    counts = Counter(ops)
    return "coalesced(" + ", ".join(f"{op} x{n}" if n > 1 else op for op, n in counts.items()) + ")"


def signature(unit: UnitEntries) -> tuple:
    """What ranks must agree on, as one hashable value (a single entry, the common case, is fast)."""
    if len(unit) == 1:
        e = unit[0]
        return (e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes)
    return tuple((e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes) for e in unit)


@dataclass(frozen=True, slots=True)
class P2POp:
    entry: Entry
    kind: str  # "send" or "recv"
    src: int  # global ranks
    dst: int
    state: str  # a batched op takes its batch terminator's state

    @property
    def peer(self) -> int:
        return self.dst if self.kind == "send" else self.src


@dataclass(slots=True)
class Track:
    """One rank's ops in one group: its p2p ops in buffer order and the range of its collectives.

    The collectives themselves go straight into the group's index (see build_tracks)."""

    p2p: list[P2POp] = field(default_factory=list)
    first_seq: int | None = None
    last_seq: int = 0


_KNOWN_BACKENDS = _TRACKING_BACKENDS | {"gloo", "c10d", ""}


def unknown_names(dumps: dict[int, Dump]) -> list[str]:
    """Notes on backends and op names frtrace has no rules for; such ops are compared by name only."""
    ops: dict[str, int] = {}
    backends: dict[str, int] = {}
    for rank, dump in dumps.items():
        for entry in dump.entries:
            if not entry.is_p2p and entry.op not in rules.KNOWN_OPS:
                ops.setdefault(entry.op or "(empty name)", rank)
            if entry.backend not in _KNOWN_BACKENDS:
                backends.setdefault(entry.backend, rank)
    notes = []
    if ops:
        notes.append("op names without size rules, compared by name only: "
                     + ", ".join(f"{op!r} (first on rank {r})" for op, r in sorted(ops.items())))
    if backends:
        notes.append("unknown backends, read like NCCL: " + ", ".join(f"{b!r} (rank {r})" for b, r in sorted(backends.items())))
    return notes


def tracks_completion(dump: Dump) -> bool:
    return any(e.backend in _TRACKING_BACKENDS or e.state in ("completed", "started") for e in dump.entries)


GroupIndex = dict  # group -> {seq: {rank: unit}}: the one copy of every unit


def build_tracks(dump: Dump, table: GroupTable, index: GroupIndex) -> tuple[dict[tuple, Track], list[str]]:
    """Split one rank's entries by group into units (coalesced groups joined) and p2p ops.

    Units are added to `index`, shared by all ranks, as each rank is read: no rank keeps a copy.
    """
    notes: list[str] = []
    group_of = {name: table.group_of(dump.rank, name) for name in {e.pg_name for e in dump.entries}}
    pending: dict[tuple, dict[int, list[Entry]]] = {}
    p2p: dict[tuple, list[tuple[Entry, str, int, int]]] = defaultdict(list)
    batch_state: dict[tuple, dict[int, str]] = defaultdict(dict)
    last_coll: dict[tuple, int] = {}
    prev_was_p2p: dict[tuple, bool] = {}
    terminators = rules.COALESCED_TERMINATORS
    for entry in dump.entries:
        group = group_of[entry.pg_name]
        if group is None:
            continue
        key = group.key
        if entry.is_p2p:
            parsed = _P2P_NAME.match(entry.op)
            src = dst = None
            if parsed:
                kind, a, arrow, b = parsed.group(1), int(parsed.group(2)), parsed.group(3), int(parsed.group(4))
                local_src, local_dst = (a, b) if arrow == "->" else (b, a)
                src, dst = group.global_rank(local_src), group.global_rank(local_dst)
            if src is None or dst is None:
                notes.append(f"rank {dump.rank}: p2p op {entry.op!r} in {group.label} names no rank of the group; not matched")
            else:
                p2p[key].append((entry, kind, src, dst))
            prev_was_p2p[key] = True
            continue
        seq = entry.collective_seq_id
        if entry.op in terminators and prev_was_p2p.get(key) and seq == last_coll.get(key, seq):
            # ends a batch of p2p ops: its collective seq id was not bumped
            batch_state[key][entry.p2p_seq_id] = entry.state
            prev_was_p2p[key] = False
            continue
        by_seq = pending.get(key)
        if by_seq is None:
            by_seq = pending[key] = {}
        unit = by_seq.get(seq)
        if unit is None:
            by_seq[seq] = [entry]
        else:
            unit.append(entry)
        last_coll[key] = seq
        prev_was_p2p[key] = False

    tracks: dict[tuple, Track] = defaultdict(Track)
    rank = dump.rank
    for key, by_seq in pending.items():
        position = bisect_left(key.ranks, rank)
        if position == len(key.ranks) or key.ranks[position] != rank:
            continue  # a config naming a group without this rank in it: not a member's ops
        track = tracks[key]
        track.first_seq = next(iter(by_seq))
        track.last_seq = max(by_seq)
        group_index = index.setdefault(key, {})
        for seq, entries in by_seq.items():
            found = group_index.get(seq)
            if found is None:
                group_index[seq] = {rank: tuple(entries)}
            else:
                found[rank] = tuple(entries)
    for key, ops in p2p.items():
        states = batch_state.get(key, {})
        tracks[key].p2p = [P2POp(e, kind, src, dst, states.get(e.p2p_seq_id, e.state)) for e, kind, src, dst in ops]
    return dict(tracks), notes


class GroupView:
    """Everything known about one group: each member's track and status per sequence id."""

    def __init__(self, group: Group, tracks: dict[int, Track], dumps: dict[int, Dump],
                 by_seq: dict[int, dict[int, UnitEntries]]) -> None:
        self.group = group
        self.tracks = tracks
        self.size = len(group.ranks)
        self.known_last: dict[int, int] = {}  # members whose status past their last op is known
        self.unknown: set[int] = set()
        for rank in group.ranks:
            dump = dumps.get(rank)
            track = tracks.get(rank)
            if dump is None:
                self.unknown.add(rank)
            elif track is not None and track.first_seq is not None:
                self.known_last[rank] = track.last_seq
            elif not dump.wrapped:
                self.known_last[rank] = 0
            else:
                self.unknown.add(rank)
        self.cut: dict[int, int] = {}  # a wrapped buffer's first unit may be a cut coalesced group
        for rank, track in tracks.items():
            dump = dumps.get(rank)
            if dump is not None and dump.wrapped and track.first_seq is not None:
                self.cut[rank] = track.first_seq
        # seq -> {rank: unit}, shared with the CollectiveChecks
        self.by_seq = by_seq

    def issuers(self, seq: int) -> dict[int, UnitEntries]:
        return self.by_seq.get(seq, {})

    def not_issued(self, seq: int) -> tuple[int, ...]:
        return tuple(sorted(r for r, last in self.known_last.items() if last < seq))

    def seqs(self) -> list[int]:
        return sorted(self.by_seq)


def format_ranks(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for r in ordered:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            parts.append(f"{start}-{prev}" if prev > start else str(start))
            start = prev = r
    if start is not None:
        parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def count_of(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def ranks_word(ranks: Iterable[int]) -> str:
    ranks = sorted(set(ranks))
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"
