"""Align every process group's collectives across its ranks and find who caused the desync.

A pure function of its input: `analyze(dumps, table)` reads the typed dumps and returns an
Analysis; it never mutates what it was given and never reads the environment.

Alignment is by per-group sequence id, never by record_id (a per-process counter). A member's
status for collective #s of a group is one of: issued (its buffer holds it), not issued (its
buffer ends before #s in that group), or unknown (no dump, or #s fell out of its ring buffer).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from . import rules
from .groups import GroupTable
from .types import Analysis, CollectiveCheck, Dump, Entry, Finding, Group

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


def _signature(unit: UnitEntries) -> tuple:
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
class _Track:
    """One rank's ops in one group, in buffer order. `units` is emptied once the group indexed it."""

    units: dict[int, UnitEntries] = field(default_factory=dict)
    p2p: list[P2POp] = field(default_factory=list)
    first_seq: int | None = None
    last_seq: int = 0


_KNOWN_BACKENDS = _TRACKING_BACKENDS | {"gloo", "c10d", ""}


def _unknown_names(dumps: dict[int, Dump]) -> list[str]:
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


def _tracks_completion(dump: Dump) -> bool:
    return any(e.backend in _TRACKING_BACKENDS or e.state in ("completed", "started") for e in dump.entries)


def _build_tracks(dump: Dump, table: GroupTable) -> tuple[dict[tuple, _Track], list[str]]:
    """Split one rank's entries by group into units (coalesced groups joined) and p2p ops."""
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

    tracks: dict[tuple, _Track] = defaultdict(_Track)
    for key, by_seq in pending.items():
        track = tracks[key]
        track.units = {seq: tuple(entries) for seq, entries in by_seq.items()}
        track.first_seq = next(iter(by_seq))
        track.last_seq = max(by_seq)
    for key, ops in p2p.items():
        states = batch_state.get(key, {})
        tracks[key].p2p = [P2POp(e, kind, src, dst, states.get(e.p2p_seq_id, e.state)) for e, kind, src, dst in ops]
    return dict(tracks), notes


# ------------------------------------------------------------------------------ majority votes
def _odd_ones(keys: dict[int, Hashable]) -> tuple[Hashable, tuple[int, ...]] | None:
    """The key most ranks share and the ranks that differ; None on a tie."""
    counts = Counter(keys.values()).most_common(2)
    if len(counts) == 2 and counts[0][1] == counts[1][1]:
        return None
    reference = counts[0][0]
    return reference, tuple(sorted(r for r, k in keys.items() if k != reference))


@dataclass(frozen=True, slots=True)
class _Verdict:
    kind: str
    offenders: tuple[int, ...]
    detail: str
    decided: bool


class _GroupView:
    """Everything known about one group: each member's track and status per sequence id."""

    def __init__(self, group: Group, tracks: dict[int, _Track], dumps: dict[int, Dump]) -> None:
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
        # seq -> {rank: unit}: the one copy of the units, shared with the CollectiveChecks
        self.by_seq: dict[int, dict[int, UnitEntries]] = {}
        for rank, track in tracks.items():
            dump = dumps.get(rank)
            if dump is not None and dump.wrapped and track.first_seq is not None:
                self.cut[rank] = track.first_seq
            for seq, unit in track.units.items():
                found = self.by_seq.get(seq)
                if found is None:
                    self.by_seq[seq] = {rank: unit}
                else:
                    found[rank] = unit
            track.units = {}

    def issuers(self, seq: int) -> dict[int, UnitEntries]:
        return self.by_seq.get(seq, {})

    def not_issued(self, seq: int) -> tuple[int, ...]:
        return tuple(sorted(r for r, last in self.known_last.items() if last < seq))

    def seqs(self) -> list[int]:
        return sorted(self.by_seq)


class _Checker:
    """Compares the units of one aligned collective across the ranks that issued it."""

    def __init__(self, view: _GroupView, siblings: list[_GroupView]) -> None:
        self.view = view
        self.siblings = siblings

    def check(self, seq: int, units: dict[int, UnitEntries]) -> _Verdict | None:
        units = {r: u for r, u in units.items() if self.view.cut.get(r) != seq}
        if len(units) < 2 and not any(self._own_problems(u) for u in units.values()):
            return None
        if len(set(map(_signature, units.values()))) == 1:
            unit = next(iter(units.values()))
            problem = self._own_problems(unit)
            if problem is None:
                return self._all_to_all(seq, units)
            return _Verdict("size_mismatch", tuple(sorted(units)), f"every rank {problem}", True)

        ops = {r: unit_ops(u) for r, u in units.items()}
        if len(set(ops.values())) > 1:
            return self._vote("type_mismatch", seq, ops, unit_ops, _describe_ops)

        own = {r: p for r, u in units.items() if (p := self._own_problems(u))}
        sizes = {r: _size_keys(u) for r, u in units.items()}
        if own:
            offenders = tuple(sorted(own))
            detail = "; ".join(f"rank {r} {p}" for r, p in sorted(own.items()))
            return _Verdict("size_mismatch", offenders, detail, True)
        if len(set(sizes.values())) > 1:
            return self._vote("size_mismatch", seq, sizes, _size_keys, _describe_sizes(units))
        dtypes = {r: _dtype_keys(u) for r, u in units.items()}
        if len(set(dtypes.values())) > 1:
            return self._vote("dtype_mismatch", seq, dtypes, _dtype_keys, _describe_dtypes(units))
        return self._all_to_all(seq, units)

    def _own_problems(self, unit: UnitEntries) -> str | None:
        for entry in unit:
            problem = rules.own_size_problem(entry, self.view.size)
            if problem:
                return problem
        return None

    def _all_to_all(self, seq: int, units: dict[int, UnitEntries]) -> _Verdict | None:
        first = next(iter(units.values()))
        if len(first) != 1 or not rules.is_all_to_all(first[0].op) or len(units) < self.view.size:
            return None
        total_in = sum(rules.numel(u[0].input_sizes) for u in units.values())
        total_out = sum(rules.numel(u[0].output_sizes) for u in units.values())
        if total_in == total_out:
            return None
        keys = {r: (rules.numel(u[0].input_sizes), rules.numel(u[0].output_sizes)) for r, u in units.items()}
        return self._vote("size_mismatch", seq, keys, None, lambda k: f"sends {k[0]} / receives {k[1]} elements",
                          prefix=f"the group sends {total_in} elements but receives {total_out}; ")

    def _vote(self, kind: str, seq: int, keys: dict[int, Hashable], key_of: Callable | None,
              describe: Callable[[Hashable], str], prefix: str = "") -> _Verdict:
        voted = _odd_ones(keys)
        source = ""
        if voted is None and key_of is not None:
            voted = self._sibling_vote(seq, keys, key_of)
            source = f" (reference: the other {self.view.group.desc} groups)"
        if voted is None:
            parts = ", ".join(f"rank {r}: {describe(k)}" for r, k in sorted(keys.items()))
            reason = "two members cannot outvote each other" if len(keys) == 2 else "no majority"
            return _Verdict(kind, tuple(sorted(keys)), f"{prefix}{parts}; {reason} and no sibling group decides", False)
        reference, offenders = voted
        agreeing = [r for r, k in keys.items() if k == reference]
        others = _ranks_word(agreeing) if agreeing else "the reference"
        detail = (f"{prefix}{_ranks_word(offenders)}: "
                  + "; ".join(sorted({describe(keys[r]) for r in offenders}))
                  + f" where {others} {'has' if len(agreeing) == 1 else 'have'} {describe(reference)}{source}")
        return _Verdict(kind, offenders, detail, bool(offenders))

    def _sibling_vote(self, seq: int, keys: dict[int, Hashable], key_of: Callable) -> tuple[Hashable, tuple[int, ...]] | None:
        votes: Counter = Counter()
        for sibling in self.siblings:
            units = sibling.issuers(seq)
            found = {key_of(u) for r, u in units.items() if sibling.cut.get(r) != seq}
            if len(units) == sibling.size and len(found) == 1:
                votes[found.pop()] += 1
        if not votes:
            return None
        ranked = votes.most_common(2)
        if len(ranked) == 2 and ranked[0][1] == ranked[1][1]:
            return None
        reference = ranked[0][0]
        if reference not in keys.values():
            return None
        return reference, tuple(sorted(r for r, k in keys.items() if k != reference))


def _size_keys(unit: UnitEntries) -> tuple:
    return tuple(rules.size_key(e) for e in unit)


def _dtype_keys(unit: UnitEntries) -> tuple:
    return tuple(rules.dtype_key(e) for e in unit)


def _describe_ops(ops: Hashable) -> str:
    return "+".join(ops) if isinstance(ops, tuple) else str(ops)


def _describe_sizes(units: dict[int, UnitEntries]) -> Callable[[Hashable], str]:
    shown = {_size_keys(u): _sizes_text(u) for u in units.values()}
    return lambda key: shown.get(key, str(key))


def _sizes_text(unit: UnitEntries) -> str:
    return " | ".join(f"{list(map(list, e.input_sizes))} -> {list(map(list, e.output_sizes))}" for e in unit)


def _describe_dtypes(units: dict[int, UnitEntries]) -> Callable[[Hashable], str]:
    shown = {_dtype_keys(u): ",".join(sorted({d for e in u for d in e.input_dtypes + e.output_dtypes}))
             for u in units.values()}
    return lambda key: "dtype " + shown.get(key, str(key))


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


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _ranks_word(ranks: Iterable[int]) -> str:
    ranks = sorted(set(ranks))
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"


# ------------------------------------------------------------------------------ the analysis
@dataclass(frozen=True, slots=True)
class _Blocker:
    """Where a rank is blocked: its first op not completed, or (no completion data) its last op."""

    rank: int
    group: Group
    seq: int | None  # collective seq id, None for p2p
    entry: Entry
    p2p: P2POp | None = None

    def describe(self) -> str:
        if self.p2p is not None:
            return f"{self.entry.op} (p2p #{self.entry.p2p_seq_id}) of {self.group.label}"
        return f"{self.entry.op or 'unnamed op'} #{self.seq} of {self.group.label}"


def analyze(dumps: dict[int, Dump], table: GroupTable, notes: Iterable[str] = ()) -> Analysis:
    """Match the collectives of every group across its ranks and name the culprit of a desync.

    `notes` are earlier layers' remarks, carried into Analysis.warnings.
    """
    notes = [*notes, *table.warnings]
    tracks_by_rank: dict[int, dict[tuple, _Track]] = {}
    for rank, dump in dumps.items():
        tracks_by_rank[rank], rank_notes = _build_tracks(dump, table)
        notes.extend(rank_notes)
        notes.extend(f"{dump.path}: {n}" for n in dump.notes)
    tracking = {rank: _tracks_completion(dump) for rank, dump in dumps.items()}
    notes.extend(_unknown_names(dumps))

    views: dict[tuple, _GroupView] = {}
    for group in table.groups:
        members = {r: tracks_by_rank[r][group.key] for r in group.ranks if r in tracks_by_rank and group.key in tracks_by_rank[r]}
        views[group.key] = _GroupView(group, members, dumps)
    siblings: dict[tuple, list[_GroupView]] = defaultdict(list)
    for view in views.values():
        desc = view.group.desc
        if desc and desc not in ("undefined", "default_pg"):
            siblings[(desc, view.size)].append(view)

    findings: list[Finding] = []
    checks: list[CollectiveCheck] = []
    frontier: dict[tuple, int] = {}
    for key, view in views.items():
        group = view.group
        checker = _Checker(view, [v for v in siblings.get((group.desc, view.size), []) if v is not view])
        first_mismatch = None
        for seq in view.seqs():
            units = view.issuers(seq)
            missing = view.not_issued(seq)
            verdict = checker.check(seq, units)
            checks.append(CollectiveCheck(group, seq, units, missing, verdict.kind if verdict else None))
            if missing and key not in frontier:
                frontier[key] = seq
            if verdict and first_mismatch is None:
                first_mismatch = verdict
                op = Counter(map(unit_label, units.values())).most_common(1)[0][0]
                findings.append(Finding(verdict.kind, group, seq, None, op, verdict.offenders if verdict.decided else (),
                                        group.ranks, verdict.detail, decided=verdict.decided))

    p2p_findings, unmatched, p2p_notes = _match_p2p(views, dumps, tracking)
    findings.extend(p2p_findings)
    notes.extend(p2p_notes)

    blockers = {rank: _blocker(dumps[rank], tracks_by_rank[rank], views, table, tracking[rank]) for rank in dumps}
    graph = _WaitGraph(views, blockers, unmatched, dumps, tracking, tracks_by_rank)
    findings.extend(graph.missing_findings(frontier))
    findings.extend(graph.stuck_findings())

    return _conclude(dumps, table, findings, checks, graph, blockers, notes)


def _blocker(dump: Dump, tracks: dict[tuple, _Track], views: dict[tuple, _GroupView], table: GroupTable,
             tracking: bool) -> _Blocker | None:
    def as_blocker(entry: Entry) -> _Blocker | None:
        group = table.group_of(dump.rank, entry.pg_name)
        if group is None:
            return None
        track = tracks.get(group.key)
        if entry.is_p2p:
            op = next((o for o in (track.p2p if track else []) if o.entry.index == entry.index), None)
            return _Blocker(dump.rank, group, None, entry, op) if op else None
        unit = views[group.key].by_seq.get(entry.collective_seq_id, {}).get(dump.rank)
        if unit is None:  # a p2p batch terminator
            return None
        return _Blocker(dump.rank, group, entry.collective_seq_id, unit[-1])

    if not dump.entries:
        return None
    if not tracking:
        for entry in reversed(dump.entries):
            blocker = as_blocker(entry)
            if blocker is not None:
                return blocker
        return None
    for entry in dump.entries:
        if entry.state == "completed":
            continue
        blocker = as_blocker(entry)  # a scheduled op inside a completed coalesced group is done
        if blocker is None:
            continue
        state = blocker.p2p.state if blocker.p2p else blocker.entry.state
        if state != "completed":
            return blocker
    return None


def _match_p2p(views: dict[tuple, _GroupView], dumps: dict[int, Dump], tracking: dict[int, bool]):
    """Pair sends with recvs first-in-first-out per (group, src, dst)."""
    findings: list[Finding] = []
    unmatched: set[int] = set()  # id() of P2POps with no partner
    notes: list[str] = []
    for view in views.values():
        sends: dict[tuple[int, int], list[P2POp]] = defaultdict(list)
        recvs: dict[tuple[int, int], list[P2POp]] = defaultdict(list)
        for track in view.tracks.values():
            for op in track.p2p:
                (sends if op.kind == "send" else recvs)[(op.src, op.dst)].append(op)
        for pair in sorted(set(sends) | set(recvs)):
            src, dst = pair
            if src not in dumps or dst not in dumps:
                continue
            out, into = sends.get(pair, []), recvs.get(pair, [])
            if tracking[src] and tracking[dst]:
                # completed ops were matched (a p2p op completes only with its partner)
                out = [o for o in out if o.state != "completed"]
                into = [o for o in into if o.state != "completed"]
            elif dumps[src].wrapped or dumps[dst].wrapped:
                notes.append(f"p2p {src}->{dst} in {view.group.label} not checked: a buffer wrapped and completion is not recorded")
                continue
            for send, recv in zip(out, into):
                if send.entry.input_sizes != recv.entry.input_sizes or send.entry.input_dtypes != recv.entry.input_dtypes:
                    findings.append(Finding(
                        "size_mismatch" if send.entry.input_sizes != recv.entry.input_sizes else "dtype_mismatch",
                        view.group, None, send.entry.p2p_seq_id, send.entry.op, (), view.group.ranks,
                        f"rank {src} sends {list(map(list, send.entry.input_sizes))} {','.join(send.entry.input_dtypes)} "
                        f"but rank {dst} receives {list(map(list, recv.entry.input_sizes))} {','.join(recv.entry.input_dtypes)}; "
                        "a pair cannot tell which side is wrong", decided=False))
                    break
            extra = out[len(into):] or into[len(out):]
            if extra:
                first = extra[0]
                absent = first.peer
                unmatched.update(id(o) for o in extra)
                other = "recv" if first.kind == "send" else "send"
                findings.append(Finding(
                    "p2p_unmatched", view.group, None, first.entry.p2p_seq_id, first.entry.op, (absent,), (src, dst),
                    f"rank {first.entry.rank}'s {first.entry.op} (p2p #{first.entry.p2p_seq_id}) has no matching {other} "
                    f"on rank {absent} ({len(extra)} unmatched)"))
    return findings, unmatched, notes


class _WaitGraph:
    """Who waits for whom: rank -> the op it is blocked in -> the members that never issued it."""

    def __init__(self, views, blockers, unmatched, dumps, tracking, tracks_by_rank) -> None:
        self.views = views
        self.blockers: dict[int, _Blocker | None] = blockers
        self.dumps = dumps
        self.tracking = tracking
        self.tracks_by_rank = tracks_by_rank
        self.waits_on: dict[tuple, tuple[int, ...]] = {}  # op key -> ranks it waits for
        self.weak: set[tuple] = set()  # op keys whose awaited ranks are only possibly missing
        self.op_of: dict[int, tuple] = {}  # rank -> op key it is blocked in
        self.waiters: dict[tuple, list[int]] = defaultdict(list)
        self.blocker_of_op: dict[tuple, _Blocker] = {}
        self.joined_by_all: dict[int, _Blocker] = {}
        for rank, blocker in blockers.items():
            if blocker is None:
                continue
            if blocker.p2p is not None:
                key = ("p2p", blocker.group.key, blocker.p2p.src, blocker.p2p.dst, blocker.entry.p2p_seq_id, rank)
                peer = blocker.p2p.peer
                if id(blocker.p2p) in unmatched:
                    awaited = (peer,)
                elif peer not in dumps:
                    awaited = (peer,)
                    self.weak.add(key)
                else:
                    self.joined_by_all[rank] = blocker
                    continue
            else:
                key = ("coll", blocker.group.key, blocker.seq)
                view = views[blocker.group.key]
                awaited = view.not_issued(blocker.seq)
                if not awaited:
                    awaited = tuple(sorted(view.unknown))
                    if awaited:
                        self.weak.add(key)
                if not awaited:
                    self.joined_by_all[rank] = blocker
                    continue
            self.waits_on[key] = awaited
            self.op_of[rank] = key
            self.waiters[key].append(rank)
            self.blocker_of_op.setdefault(key, blocker)

    # -- strongly connected components over rank and op nodes, iteratively (Tarjan)
    def _edges(self, node: tuple) -> tuple:
        if node[0] == "rank":
            key = self.op_of.get(node[1])
            return (("op", key),) if key is not None else ()
        return tuple(("rank", r) for r in self.waits_on[node[1]])

    def components(self) -> list[list[tuple]]:
        index: dict[tuple, int] = {}
        low: dict[tuple, int] = {}
        on_stack: set[tuple] = set()
        stack: list[tuple] = []
        result: list[list[tuple]] = []
        nodes = [("op", k) for k in self.waits_on]
        for start in nodes:
            if start in index:
                continue
            work = [(start, iter(self._edges(start)))]
            index[start] = low[start] = len(index)
            stack.append(start)
            on_stack.add(start)
            while work:
                node, edges = work[-1]
                advanced = False
                for nxt in edges:
                    if nxt not in index:
                        index[nxt] = low[nxt] = len(index)
                        stack.append(nxt)
                        on_stack.add(nxt)
                        work.append((nxt, iter(self._edges(nxt))))
                        advanced = True
                        break
                    if nxt in on_stack:
                        low[node] = min(low[node], index[nxt])
                if advanced:
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    result.append(component)
        return result

    def culprits(self) -> tuple[list[tuple[int, tuple | None]], list[str]]:
        """[(culprit rank, the op key it is missing from)], and reasons the graph cannot decide."""
        found: list[tuple[int, tuple | None]] = []
        undecided: list[str] = []
        components = self.components()
        where = {node: i for i, comp in enumerate(components) for node in comp}
        for i, comp in enumerate(components):
            members = set(comp)
            leaves = any(where.get(n) != i for node in comp for n in self._edges(node))
            if leaves:
                continue
            ranks = [n[1] for n in comp if n[0] == "rank"]
            ops = [n[1] for n in comp if n[0] == "op"]
            if len(comp) == 1 and ranks:
                # waited for, waits for no one
                rank = ranks[0]
                awaited_in = [k for k, awaited in self.waits_on.items() if rank in awaited]
                if awaited_in:
                    found.append((rank, max(awaited_in, key=lambda k: len(self.waiters[k]))))
                continue
            if not ops:
                continue
            # A cycle: ranks issued ops in different orders. The rank(s) missing from the op that
            # most ranks wait in are the ones out of order.
            ranked = sorted(ops, key=lambda k: len(self.waiters[k]), reverse=True)
            if len(ranked) > 1 and len(self.waiters[ranked[0]]) == len(self.waiters[ranked[1]]):
                undecided.append(
                    "; ".join(f"{_ranks_word(self.waiters[k])} wait in {self.blocker_of_op[k].describe()} for {_ranks_word(self.waits_on[k])}" for k in ranked)
                    + ": they issued ops in different orders and no majority shows which order is right")
                continue
            top = ranked[0]
            for rank in self.waits_on[top]:
                if ("rank", rank) in members:
                    found.append((rank, top))
        return found, undecided

    def missing_findings(self, frontier: dict[tuple, int]) -> list[Finding]:
        findings = []
        for key, awaited in self.waits_on.items():
            if key[0] != "coll":
                continue
            blocker = self.blocker_of_op[key]
            view = self.views[key[1]]
            waiting = self.waiters[key]
            if key in self.weak:
                no_dump = [r for r in awaited if r not in self.dumps]
                why = f"{_ranks_word(no_dump)} left no readable dump" if no_dump else f"{_ranks_word(awaited)}'s buffer no longer shows this group"
                detail = f"{why}; {_ranks_word(waiting)} wait in it"
                if not any(self.tracking.get(r) for r in waiting):
                    detail += " (the dumps do not record completion: this reads them as taken during a hang)"
            else:
                lasts = "; ".join(f"rank {r}'s last op in {view.group.label} is #{view.known_last[r]}" for r in awaited[:4])
                detail = f"{_ranks_word(awaited)} never issued it; {_ranks_word(view.issuers(key[2]))} did ({lasts})"
            findings.append(Finding("missing_ranks", view.group, key[2], None, blocker.entry.op, awaited, view.group.ranks, detail))
        reported = {(f.group.key, f.collective_seq_id) for f in findings}
        for group_key, seq in frontier.items():
            if (group_key, seq) in reported:
                continue
            view = self.views[group_key]
            missing = view.not_issued(seq)
            issuers = view.issuers(seq)
            if any(self.op_of.get(r) == ("coll", group_key, seq) for r in issuers):
                continue
            # nobody is blocked here (their later ops completed, or the dumps were taken at
            # different moments): report it, but it cannot explain a hang
            op = Counter(map(unit_label, issuers.values())).most_common(1)[0][0]
            findings.append(Finding("missing_ranks", view.group, seq, None, op, missing, view.group.ranks,
                                    f"{_ranks_word(missing)} never issued it, though {_ranks_word(issuers)} did and nobody is waiting in it"))
        return findings

    def stuck_findings(self) -> list[Finding]:
        findings = []
        seen: set[tuple] = set()
        for rank, blocker in sorted(self.joined_by_all.items()):
            if not self.tracking.get(rank) or blocker.p2p is not None:
                continue
            key = (blocker.group.key, blocker.seq)
            if key in seen:
                continue
            seen.add(key)
            view = self.views[blocker.group.key]
            units = view.issuers(blocker.seq)
            not_done = tuple(sorted(r for r, u in units.items() if unit_state(u) != "completed"))
            findings.append(Finding(
                "not_completed", view.group, blocker.seq, None, blocker.entry.op, not_done, view.group.ranks,
                f"issued by all {view.size} members, not completed on {_ranks_word(not_done)} "
                f"(state {', '.join(sorted({unit_state(units[r]) for r in not_done}))})"))
        return findings


def _conclude(dumps, table, findings, checks, graph: _WaitGraph, blockers, notes) -> Analysis:
    loaded = tuple(sorted(dumps))
    missing = tuple(r for r in table.world if r not in dumps)
    group_count = len(table.groups)
    matched = sum(1 for c in checks if not c.missing_ranks and c.mismatch is None)

    mismatches = [f for f in findings if f.kind in ("type_mismatch", "size_mismatch", "dtype_mismatch") and f.decided]
    graph_culprits, undecided_cycles = graph.culprits()
    culprit_entries: dict[int, Entry] = {}
    root_ids: set[int] = set()
    culprits: list[int] = []
    headline = ""

    if mismatches:
        first = min(mismatches, key=lambda f: _first_entry_index(f, checks))
        for f in mismatches:
            root_ids.add(id(f))
            culprits.extend(f.ranks)
        for rank in culprits:
            entry = _entry_at(checks, first, rank)
            if entry is not None:
                culprit_entries[rank] = entry
        headline = _mismatch_headline(first, checks) + (f" (+{len(mismatches) - 1} more group(s) with a mismatch)" if len(mismatches) > 1 else "")
        verdict = "desync"
    elif graph_culprits:
        by_op: dict[tuple | None, list[int]] = defaultdict(list)
        for rank, key in graph_culprits:
            by_op[key].append(rank)
            culprits.append(rank)
        root_findings = [f for f in findings if f.kind in ("missing_ranks", "p2p_unmatched") and set(f.ranks) & set(culprits)]
        for f in root_findings:
            if f.kind == "p2p_unmatched" or ("coll", f.group.key, f.collective_seq_id) in by_op:
                root_ids.add(id(f))
        parts = []
        for key, ranks in by_op.items():
            parts.append(_missing_headline(key, ranks, graph, blockers, dumps))
            for rank in ranks:
                if blockers.get(rank) is not None:
                    culprit_entries[rank] = blockers[rank].entry
        headline = "; ".join(parts)
        verdict = "desync"
    else:
        undecided = [f for f in findings if not f.decided]
        stuck = [f for f in findings if f.kind == "not_completed"]
        others = [f for f in findings if f.decided and f.kind not in ("not_completed",)]
        if undecided or undecided_cycles:
            verdict = "inconclusive"
            headline = (undecided_cycles[0] if undecided_cycles else
                        f"{undecided[0].kind.replace('_', ' ')} in {undecided[0].op} #{undecided[0].collective_seq_id or undecided[0].p2p_seq_id} "
                        f"of {undecided[0].group.label}: {undecided[0].detail}")
            root_ids.update(id(f) for f in undecided)
        elif others:
            verdict = "desync"
            for f in others:
                root_ids.add(id(f))
                culprits.extend(f.ranks)
            f = others[0]
            headline = f"{f.kind.replace('_', ' ')} in {f.op} of {f.group.label}: {f.detail}"
        elif stuck:
            verdict = "stuck"
            for f in stuck:
                root_ids.add(id(f))
                culprits.extend(f.ranks)
            f = stuck[0]
            headline = (f"{f.op} #{f.collective_seq_id} of {f.group.label} was issued by all {len(f.expected_ranks)} members "
                        f"but never completed on {_ranks_word(f.ranks)}: the hang is below PyTorch (network, NCCL or hardware)")
            for rank in f.ranks:
                if blockers.get(rank) is not None:
                    culprit_entries[rank] = blockers[rank].entry
        elif not any(d.entries for d in dumps.values()):
            verdict = "inconclusive"
            headline = "the dumps hold no entries (was the Flight Recorder buffer size set?)"
        else:
            verdict = "clean"
            headline = (f"{_count(len(loaded), 'rank')}, {_count(group_count, 'group')}, "
                        f"{_count(matched, 'collective')} matched; no desync")
            if missing:
                headline += f" (no dump from {_ranks_word(missing)}, and nobody waits for it)"

    final = tuple(
        Finding(f.kind, f.group, f.collective_seq_id, f.p2p_seq_id, f.op, f.ranks, f.expected_ranks, f.detail,
                id(f) in root_ids, f.decided)
        for f in findings
    )
    final = tuple(sorted(final, key=lambda f: (not f.root_cause, f.kind == "not_completed", f.group.ranks != table.world, f.group.name, f.collective_seq_id or 0)))
    return Analysis(
        verdict=verdict,
        headline=f"{verdict.upper()}: {headline}",
        culprit_ranks=tuple(sorted(set(culprits))),
        findings=final,
        groups=table.groups,
        checks=tuple(checks),
        ranks_loaded=loaded,
        ranks_missing=missing,
        culprit_entries=culprit_entries,
        warnings=tuple(notes),
    )


def _first_entry_index(finding: Finding, checks) -> int:
    entry = next((_entry_at(checks, finding, r) for r in finding.ranks), None)
    return entry.index if entry is not None else 1 << 30


def _entry_at(checks, finding: Finding, rank: int) -> Entry | None:
    for check in checks:
        if check.group is finding.group and check.collective_seq_id == finding.collective_seq_id:
            entries = check.entries.get(rank)
            return entries[-1] if entries else None
    return None


def _mismatch_headline(finding: Finding, checks) -> str:
    check = next(c for c in checks if c.group is finding.group and c.collective_seq_id == finding.collective_seq_id)
    offenders = set(finding.ranks)
    others = [r for r in check.entries if r not in offenders]
    where = f"#{finding.collective_seq_id} of {finding.group.label}"
    if finding.kind == "type_mismatch":
        theirs = Counter(unit_label(check.entries[r]) for r in offenders).most_common(1)[0][0]
        return f"{_ranks_word(offenders)} called {theirs} as {where} where {_ranks_word(others)} called {finding.op}"
    if others and offenders:
        describe = _shown_sizes if finding.kind == "size_mismatch" else _shown_dtypes
        mine = Counter(describe(check.entries[r]) for r in offenders).most_common(1)[0][0]
        theirs = Counter(describe(check.entries[r]) for r in others).most_common(1)[0][0]
        if mine != theirs:
            verb, preposition = ("passed", "to") if finding.kind == "size_mismatch" else ("used", "in")
            return (f"{_ranks_word(offenders)} {verb} {mine} {preposition} {finding.op} {where} "
                    f"where {_ranks_word(others)} {verb} {theirs}")
    return f"{finding.kind.replace('_', ' ')} in {finding.op} {where}: {finding.detail}"


def _shown_sizes(entries: tuple[Entry, ...]) -> str:
    def one(e: Entry) -> str:
        sizes_in, sizes_out = list(map(list, e.input_sizes)), list(map(list, e.output_sizes))
        return f"sizes {sizes_in}" if sizes_in == sizes_out else f"sizes {sizes_in} -> {sizes_out}"
    return " | ".join(one(e) for e in entries if e.op not in rules.COALESCED_TERMINATORS)


def _shown_dtypes(entries: tuple[Entry, ...]) -> str:
    return "dtype " + ",".join(sorted({d for e in entries for d in e.input_dtypes + e.output_dtypes}))


def _missing_headline(key, ranks, graph: _WaitGraph, blockers, dumps) -> str:
    if key is None:
        return f"{_ranks_word(ranks)} blocked everyone"
    waiting = graph.waiters[key]
    blocker = graph.blocker_of_op[key]
    subject = _ranks_word(ranks)
    if key[0] == "p2p":
        other = "recv" if blocker.p2p and blocker.p2p.kind == "send" else "send"
        text = f"{subject} never posted the {other} matching rank {blocker.rank}'s {blocker.describe()}"
    elif all(r not in dumps for r in ranks):
        return (f"{subject} left no readable dump and {_ranks_word(waiting)} wait for it in {blocker.describe()}: "
                f"{'they are' if len(ranks) > 1 else 'it is'} the prime suspect")
    else:
        text = f"{subject} never joined {blocker.describe()} ({len(waiting)} {'ranks wait' if len(waiting) != 1 else 'rank waits'} in it)"
    # one clause per situation, so a thousand culprits in the same place read as one
    clauses: dict[str, list[int]] = {}
    for rank in ranks:
        own = blockers.get(rank)
        if rank not in dumps:
            clause = "{who} left no readable dump"
        elif own is None:
            clause = "{who} {is} in no collective (all its ops completed)" if graph.tracking.get(rank) else "{who} recorded no ops"
        elif rank in graph.joined_by_all:
            if graph.tracking.get(rank):
                clause = f"{{who}} {{is}} blocked in {own.describe()}, which every member joined"
            else:
                clause = f"{{who}} {{is}} in no collective: {{its}} last op, {own.describe()}, was joined by every member"
        else:
            clause = f"{{who}} {{is}} blocked in {own.describe()}"
        clauses.setdefault(clause, []).append(rank)
    shown = list(clauses.items())[:3]
    for clause, who in shown:
        one = len(who) == 1
        text += "; " + clause.format(who=_ranks_word(who), its="its" if one else "their", **{"is": "is" if one else "are"})
    if len(clauses) > len(shown):
        text += f"; (+{len(clauses) - len(shown)} more situations, see the findings)"
    return text
