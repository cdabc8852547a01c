"""Who waits for whom: each rank's blocking op, send/recv pairing, and the wait-for graph whose
sink components hold the culprits."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import compress, repeat
from operator import ne

from .align import ANY_SOURCE, GroupView, P2POp, Track, by_number, ranks_word, unit_label, unit_state
from .groups import GroupTable
from .types import Dump, Entry, Finding, Group

# said by a not_completed finding whose ranks left the op scheduled where its other members started
# it (their GPU never reached it); verdict.py reads the finding so
NEVER_STARTED = "never started it (scheduled)"

_NOT_REACHED = -1  # a rank's buffer ends before this op: it has not issued it yet
_HISTORY_STEPS = 3  # earlier steps a rank's own buffer must show, all alike, to decide an order


def _class_of_entry(entry: Entry, group: Group) -> tuple:
    """What repeats from step to step: a collective's group, op and sizes; a p2p op's group and peers."""
    if entry.is_p2p:
        kind, _, peers = entry.op.partition(" ")
        src, dst = _peers(kind, peers, group)
        return ("p2p", group.key, kind, src, dst)
    return ("coll", group.key, entry.op, entry.input_sizes)


def _peers(kind: str, text: str, group: Group) -> tuple[int | None, int | None]:
    """Global (src, dst) of "0->1" (send) or "1<-0" (recv), group-local numbers in the name."""
    parts = text.replace("<-", "->").split("->")
    try:
        a, b = (group.global_rank(int(p)) for p in parts)
    except ValueError:
        return None, None
    return (a, b) if kind == "send" else (b, a)


def _class_text(op_class: tuple) -> str:
    if op_class[0] == "p2p":
        return f"{op_class[2]} {op_class[3]}->{op_class[4]} of {op_class[1].label}"
    return f"{op_class[2]} of {op_class[1].label}"


def _steps_between(dump: Dump, blocked: tuple, wanted: tuple, group_of) -> int | None:
    """How many earlier steps of the rank's buffer show `wanted` between two `blocked` ops, when
    all of them (at least _HISTORY_STEPS) do and the last two `blocked` ops have none between
    them; None otherwise (no evidence)."""
    marks = []  # True for a `blocked`-class op, False for a `wanted`-class op, in buffer order
    for entry in dump.entries:
        group = group_of(entry)
        if group is None:
            continue
        op_class = _class_of_entry(entry, group)
        if op_class == blocked:
            marks.append(True)
        elif op_class == wanted:
            marks.append(False)
    positions = [i for i, is_blocked in enumerate(marks) if is_blocked]
    if len(positions) < _HISTORY_STEPS + 2:
        return None
    gaps = [any(not m for m in marks[a + 1:b]) for a, b in zip(positions, positions[1:])]
    if gaps[-1] or not all(gaps[:-1]) or len(gaps) - 1 < _HISTORY_STEPS:
        return None
    return len(gaps) - 1


@dataclass(frozen=True, slots=True)
class Blocker:
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


def blocker_of(dump: Dump, tracks: dict[tuple, Track], views: dict[tuple, GroupView], table: GroupTable,
             tracking: bool) -> Blocker | None:
    def as_blocker(entry: Entry) -> Blocker | None:
        group = table.group_of(dump.rank, entry.pg_name)
        if group is None:
            return None
        track = tracks.get(group.key)
        if entry.is_p2p:
            op = next((o for o in (track.p2p if track else []) if o.index == entry.index), None)
            return Blocker(dump.rank, group, None, entry, op) if op else None
        unit = views[group.key].unit(entry.collective_seq_id, dump.rank)
        if unit is None:  # a p2p batch terminator
            return None
        return Blocker(dump.rank, group, entry.collective_seq_id, unit[-1])

    if not dump.entries:
        return None
    if not tracking:
        for entry in reversed(dump.entries):
            blocker = as_blocker(entry)
            if blocker is not None:
                return blocker
        return None
    columns = dump.entries
    if "completed" in columns.states:  # only entries in another state can block: found in C
        done = columns.states.index("completed")
        candidates = compress(range(len(columns)), map(ne, columns.state, repeat(done)))
    else:
        candidates = range(len(columns))
    for entry in map(columns.__getitem__, candidates):
        blocker = as_blocker(entry)  # a scheduled op inside a completed coalesced group is done
        if blocker is None:
            continue
        state = blocker.p2p.state if blocker.p2p else blocker.entry.state
        if state != "completed":
            return blocker
    return None


def match_p2p(views: dict[tuple, GroupView], dumps: dict[int, Dump], tracking: dict[int, bool]):
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
        any_recvs = {dst: ops for (src, dst), ops in recvs.items() if src == ANY_SOURCE}
        pending_any = {dst: [o for o in ops if not (tracking.get(dst) and o.state == "completed")] for dst, ops in any_recvs.items()}
        for pair in sorted(p for p in set(sends) | set(recvs) if p[0] != ANY_SOURCE):
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
            if extra and extra[0].kind == "send" and pending_any.get(dst):
                # receives-from-any on the destination take the sends no named recv took, in order;
                # where sends from several ranks wait for them, which one each takes cannot be told
                sources = {src} | {s for (s, d), ops in sends.items() if d == dst and s != src and ops}
                if len(sources) > 1:
                    findings.append(Finding(
                        "p2p_unmatched", view.group, None, extra[0].entry.p2p_seq_id, extra[0].entry.op, (), (src, dst),
                        f"rank {dst} posted receive(s) from any rank, and ranks {', '.join(map(str, sorted(sources)))} send "
                        "to it: which send each took cannot be told", decided=False))
                    continue
                taken = min(len(extra), len(pending_any[dst]))
                del pending_any[dst][:taken]
                extra = extra[taken:]
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


class WaitGraph:
    """Who waits for whom: rank -> the op it is blocked in -> the members that never issued it."""

    def __init__(self, views, blockers, unmatched, dumps, tracking) -> None:
        self.views = views
        self.blockers: dict[int, Blocker | None] = blockers
        self.dumps = dumps
        self.tracking = tracking
        self.waits_on: dict[tuple, tuple[int, ...]] = {}  # op key -> ranks it waits for
        self.weak: set[tuple] = set()  # op keys whose awaited ranks are only possibly missing
        self.op_of: dict[int, tuple] = {}  # rank -> op key it is blocked in
        self.waiters: dict[tuple, list[int]] = defaultdict(list)
        self.blocker_of_op: dict[tuple, Blocker] = {}
        self.joined_by_all: dict[int, Blocker] = {}
        self.ran_ahead: dict[tuple, tuple[int, ...]] = {}  # op key -> the ranks that issued it alone
        self._groups_by_rank: dict[tuple[int, str], Group] | None = None
        for rank, blocker in blockers.items():
            if blocker is None:
                continue
            if blocker.p2p is not None:
                key = ("p2p", blocker.group.key, blocker.p2p.src, blocker.p2p.dst, blocker.entry.p2p_seq_id, rank)
                peer = blocker.p2p.peer
                if peer == ANY_SOURCE:  # a receive-from-any waits for whoever sends to it
                    view = views[blocker.group.key]
                    if any(op.kind == "send" and op.dst == rank for track in view.tracks.values() for op in track.p2p):
                        self.joined_by_all[rank] = blocker
                        continue
                    awaited = tuple(r for r in view.group.ranks if r != rank)
                    self.weak.add(key)
                elif id(blocker.p2p) in unmatched:
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

    def culprits(self) -> tuple[list[tuple[int, tuple | None]], list[str], list[str]]:
        """[(culprit rank, the op key it is missing from)], reasons the graph cannot decide, and the
        evidence that decided each culprit (a short sentence each)."""
        found: list[tuple[int, tuple | None]] = []
        undecided: list[str] = []
        evidence: list[str] = []
        idle: dict[tuple, list[int]] = defaultdict(list)  # op key -> awaited ranks that wait for nobody
        components = self.components()
        where = {node: i for i, comp in enumerate(components) for node in comp}
        awaited_by: dict[int, list[tuple]] = defaultdict(list)  # rank -> the ops waiting for it, made once
        for key, awaited in self.waits_on.items():
            for rank in awaited:
                awaited_by[rank].append(key)
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
                awaited_in = awaited_by.get(rank)
                if awaited_in:
                    idle[max(awaited_in, key=lambda k: len(self.waiters[k]))].append(rank)
                continue
            if not ops:
                continue
            cycle_ranks = {n[1] for n in comp if n[0] == "rank"}
            decided = self._cycle_culprits(ops, cycle_ranks, members, evidence, undecided)
            found.extend(decided)
        for key, ranks in idle.items():
            found.extend(self._idle_culprits(key, ranks, evidence, undecided))
        return found, undecided, evidence

    def _cycle_culprits(self, ops: list[tuple], cycle_ranks: set[int], members: set[tuple], evidence: list[str],
                        undecided: list[str]) -> list[tuple[int, tuple]]:
        """A cycle: ranks issued ops in different orders. The rank that deviated is found from the
        ranks' own histories (a training job repeats its step) and from the ranks outside the
        cycle that issued both ops; where they disagree, or neither decides, nothing is decided."""
        by_history, history_evidence = self._deviators_by_history(cycle_ranks)
        # the ranks outside the cycle order collectives only: where a cycle holds a send or recv,
        # a rank missing from the first collective may just be blocked in that p2p op before it
        first = self._first_in_program(ops, cycle_ranks) if all(k[0] == "coll" for k in ops) else None
        by_order = {r: first for r in self.waits_on[first] if ("rank", r) in members} if first is not None else {}
        if by_history and by_order and set(by_history) != set(by_order):
            undecided.append(
                f"{self._cycle_text(ops)}: their own histories point at {ranks_word(sorted(by_history))}, "
                f"the ranks outside the cycle at {ranks_word(sorted(by_order))}; the rules disagree")
            return []
        if by_history:
            evidence.extend(history_evidence)
            return sorted(by_history.items())
        if by_order:
            evidence.append(f"program order: ranks outside the cycle issued {self.blocker_of_op[first].describe()} "
                            f"before the other ops of the cycle")
            return sorted(by_order.items())
        ranked = sorted(ops, key=lambda k: len(self.waiters[k]), reverse=True)
        # with a send or recv in the cycle, the op most ranks wait in proves nothing: a sender
        # blocked on a dropped recv is missing from every collective after it (random jobs: 502 of
        # 1000 dropped recvs blamed the sender before this guard). Nor where an op's group or a
        # sibling counts from the oldest op held (anchor.py): program order cannot ask it, and a rank
        # that skipped an op of a small group to join the big group's is what the majority waits for
        if (any(k[0] == "p2p" or not self._comparable(self.views[k[1]].group) for k in ops)
                or (len(ranked) > 1 and len(self.waiters[ranked[0]]) == len(self.waiters[ranked[1]]))):
            undecided.append(f"{self._cycle_text(ops)}: they issued ops in different orders and neither their own "
                             "histories nor any other rank shows which order is right")
            return []
        first = ranked[0]
        evidence.append(f"majority: {ranks_word(self.waiters[first])} wait in {self.blocker_of_op[first].describe()}, "
                        "more than in any other op of the cycle")
        return [(r, first) for r in self.waits_on[first] if ("rank", r) in members]

    def _cycle_text(self, ops: list[tuple]) -> str:
        return "; ".join(f"{ranks_word(self.waiters[k])} {by_number(self.waiters[k], 'waits', 'wait')} in {self.blocker_of_op[k].describe()} for "
                         f"{ranks_word(self.waits_on[k])}" for k in ops)

    def _idle_culprits(self, key: tuple, idle: list[int], evidence: list[str], undecided: list[str]) -> list[tuple[int, tuple]]:
        """Ranks awaited in `key` that wait for nobody. Where they are every member that never
        issued the op and outnumber the ones that did, the issuers ran ahead: blaming all members
        of a group but a few is implausible. A tie is decided by the sibling groups or not at all."""
        awaited = self.waits_on[key]
        blamed = [(r, key) for r in idle]
        if key[0] != "coll" or sorted(idle) != sorted(awaited) or not all(r in self.dumps for r in awaited):
            if any(r not in self.dumps for r in idle):
                # a collective's awaited ranks with a dump hold no op of its group; a p2p op's simply did not send
                unseen = idle if key[0] == "coll" else [r for r in idle if r not in self.dumps]
                evidence.append(f"missing dump: {self._unseen(unseen, self.blocker_of_op[key].group)}, and {ranks_word(self.waiters[key])} "
                                f"{by_number(self.waiters[key], 'waits', 'wait')} for {by_number(unseen, 'it', 'them')}")
            else:
                evidence.append(f"wait-for graph: {ranks_word(self.waiters[key])} {by_number(self.waiters[key], 'waits', 'wait')} in "
                                f"{self.blocker_of_op[key].describe()} for {ranks_word(idle)}, who {by_number(idle, 'waits', 'wait')} "
                                "for nobody")
            return blamed
        view = self.views[key[1]]
        seq = key[2]
        issuers = sorted(view.issuers(seq))
        described = self.blocker_of_op[key].describe()
        if len(issuers) > len(awaited):
            did = f"{by_number(awaited, 'shows', 'show')} no sign of it" if key in self.weak else "never did"  # weak: a buffer wrapped past it
            evidence.append(f"majority: {len(issuers)} of {view.size} members issued {described}; "
                            f"{ranks_word(awaited)} {did} and {by_number(awaited, 'waits', 'wait')} for nobody")
            return blamed
        if len(issuers) == len(awaited):
            sibling = self._sibling_reached(view, seq)
            if sibling is None:
                undecided.append(f"{ranks_word(issuers)} issued {described}, {ranks_word(awaited)} never did and "
                                 f"{by_number(awaited, 'waits', 'wait')} for "
                                 "nobody: as many members ran ahead as stayed behind, and no sibling group shows which is right")
                return []
            if sibling:
                evidence.append(f"sibling groups: the other {view.group.label} groups issued #{seq} too")
                return blamed
            evidence.append(f"sibling groups: the other {view.group.label} groups stopped before #{seq}")
        else:
            evidence.append(f"majority: {len(awaited)} of {view.size} members never issued {described} and wait for "
                            f"nobody; {ranks_word(issuers)} issued it alone")
        self.ran_ahead[key] = tuple(issuers)
        return [(r, key) for r in issuers]

    def _sibling_reached(self, view: GroupView, seq: int) -> bool | None:
        """Whether the other groups with this desc and size issued `seq` (every member of each),
        stopped before it (every member), or cannot tell (None: none, or they disagree)."""
        answers = set()
        for other in self._class_views(view.group):
            if other is view or other.unknown or not other.known_last:
                continue
            lasts = set(other.known_last.values())
            if min(lasts) >= seq:
                answers.add(True)
            elif max(lasts) < seq:
                answers.add(False)
        return answers.pop() if len(answers) == 1 else None

    def _deviators_by_history(self, cycle_ranks: set[int]) -> tuple[dict[int, tuple], list[str]]:
        """Cycle ranks whose latest op breaks the order their own buffer repeats.

        A rank r blocked in op class A and awaited by the others in op class B: if, in r's own
        buffer, every two consecutive A's before the last have a B between them (at least
        _HISTORY_STEPS times) and the last two A's have none, r skipped B this step. Ops of any
        kind are classes: a collective by group, op and sizes; a send or recv by group and peers.
        """
        deviators: dict[int, tuple] = {}
        evidence: list[str] = []
        for rank in sorted(cycle_ranks):
            blocker = self.blockers.get(rank)
            dump = self.dumps.get(rank)
            if blocker is None or dump is None:
                continue
            for key in (k for k, awaited in self.waits_on.items() if rank in awaited):
                wanted = self._class_of_awaited(key)
                if wanted is None:
                    continue
                steps = _steps_between(dump, _class_of_entry(blocker.entry, blocker.group), wanted, self._group_of(rank))
                if steps is not None:
                    deviators[rank] = key
                    evidence.append(f"own history: rank {rank}'s buffer shows {_class_text(wanted)} between every two "
                                    f"{_class_text(_class_of_entry(blocker.entry, blocker.group))} in its last {steps} steps, "
                                    "and not before its latest one")
                    break
        return deviators, evidence

    def _group_of(self, rank: int):
        """entry -> the group `rank`'s entry belongs to (None for a group no view holds)."""
        if self._groups_by_rank is None:
            self._groups_by_rank = {(r, v.group.name): v.group for v in self.views.values() for r in v.group.ranks}
        groups = self._groups_by_rank
        return lambda entry: groups.get((rank, entry.pg_name))

    def _class_of_awaited(self, key: tuple) -> tuple | None:
        """The class of op an awaited rank would issue to release the waiters of `key`."""
        blocker = self.blocker_of_op[key]
        if key[0] == "coll":
            return _class_of_entry(blocker.entry, blocker.group)
        if blocker.p2p is None:
            return None
        other = "recv" if blocker.p2p.kind == "send" else "send"
        return ("p2p", blocker.group.key, other, blocker.p2p.src, blocker.p2p.dst)

    def _first_in_program(self, ops: list[tuple], cycle_ranks: set[int]) -> tuple | None:
        """The op of a cycle that the other ranks' buffers show coming before all the others.

        Ops are compared by class: the same seq in any group with the same desc and size (the
        other TP or DP replicas run the same program). A rank outside the cycle that issued one
        op and then the other, or issued one and has not reached the other, is a vote.
        """
        collectives = [k for k in ops if k[0] == "coll"]
        if len(collectives) < 2:
            return None
        wins: dict[tuple, set[tuple]] = {k: set() for k in collectives}  # op -> ops it comes before
        for a in collectives:
            for b in collectives:
                if a is b or b in wins[a] or a in wins[b]:
                    continue
                votes = 0
                for rank in self.dumps:
                    if rank in cycle_ranks:
                        continue
                    pos_a, pos_b = self._position(rank, a), self._position(rank, b)
                    if pos_a is None or pos_b is None or (pos_a == _NOT_REACHED and pos_b == _NOT_REACHED):
                        continue
                    votes += 1 if pos_b == _NOT_REACHED or (pos_a != _NOT_REACHED and pos_a < pos_b) else -1
                if votes > 0:
                    wins[a].add(b)
                elif votes < 0:
                    wins[b].add(a)
        firsts = [k for k in collectives if len(wins[k]) == len(collectives) - 1]
        return firsts[0] if len(firsts) == 1 else None

    def first_missed(self, rank: int, keys: list[tuple]) -> tuple | None:
        """Of the collectives `rank` never issued (op keys), the one the other ranks' programs show
        first, where they show one, and someone waits in it: the root of that rank's desync."""
        first = self._first_in_program(keys, {rank}) if len(keys) > 1 else None
        return first if first in self.blocker_of_op else None

    def _position(self, rank: int, op: tuple) -> int | None:
        """Where `rank` issued the op of this class: its buffer index, _NOT_REACHED, or None (unknown)."""
        _, group, seq = op
        for view in self._class_views(group):
            if rank not in view.group.ranks:
                continue
            unit = view.unit(seq, rank)
            if unit is not None:
                return unit[0].index
            last = view.known_last.get(rank)
            return _NOT_REACHED if last is not None and last < seq else None
        return None

    def _siblings(self, group: Group) -> list[GroupView]:
        """The views of the group and of the groups with its desc and size (the other TP or DP
        replicas); the group's alone where it has no desc."""
        desc = group.desc
        if not desc or desc == "undefined":
            return [self.views[group.key]]
        return [v for v in self.views.values() if v.group.desc == desc and len(v.group.ranks) == len(group.ranks)]

    def _comparable(self, group: Group) -> bool:
        """Whether the group and its siblings all have their own numbers."""
        return all(v.own_numbers for v in self._siblings(group))

    def _class_views(self, group: Group) -> list[GroupView]:
        own = self.views[group.key]
        if not own.own_numbers:
            return [own]
        return [v for v in self._siblings(group) if v.own_numbers]

    def missing_findings(self, frontier: dict[tuple, int]) -> list[Finding]:
        findings = []
        for key, awaited in self.waits_on.items():
            if key[0] != "coll":
                continue
            blocker = self.blocker_of_op[key]
            view = self.views[key[1]]
            waiting = self.waiters[key]
            if key in self.weak:
                detail = f"{self._unseen(awaited, view.group)}; {ranks_word(waiting)} {by_number(waiting, 'waits', 'wait')} in it"
            else:
                lasts = "; ".join(f"rank {r}'s last op in {view.group.label} is #{view.known_last[r]}" for r in awaited[:4])
                detail = f"{ranks_word(awaited)} never issued it; {ranks_word(view.issuers(key[2]))} did ({lasts})"
            if not any(self.tracking.get(r) for r in waiting):
                detail += " (the dumps do not record completion: this reads them as taken during a hang)"
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
                                    f"{ranks_word(missing)} never issued it, though {ranks_word(issuers)} did and nobody is waiting in it"))
        return findings

    def _unseen(self, ranks, group: Group) -> str:
        """Why ranks may not have issued an op of `group`: no dump, or a buffer that wrapped past the group."""
        no_dump = [r for r in ranks if r not in self.dumps]
        wrapped = [r for r in ranks if r in self.dumps]
        parts = [f"{ranks_word(no_dump)} left no readable dump"] if no_dump else []
        if wrapped:
            parts.append(f"{ranks_word(wrapped)} {by_number(wrapped, 'holds', 'hold')} no op of {group.label} "
                         "(the buffer wrapped past it)")
        return "; ".join(parts)

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
            states = {r: unit_state(units[r]) for r in not_done}
            behind = tuple(r for r in not_done if states[r] == "scheduled")
            if (behind and len(behind) < len(not_done) == view.size  # completed nowhere, started by some
                    and all(states[r] in ("scheduled", "started") for r in not_done)):
                # the others' streams started it: these ranks' never reached it (a kernel before it never ended)
                ahead = [r for r in not_done if r not in behind]
                findings.append(Finding(
                    "not_completed", view.group, blocker.seq, None, blocker.entry.op, behind, view.group.ranks,
                    f"issued by all {view.size} members; {ranks_word(behind)} {NEVER_STARTED} where "
                    f"{ranks_word(ahead)} did: {by_number(behind, 'its', 'their')} GPU never reached it"))
                continue
            findings.append(Finding(
                "not_completed", view.group, blocker.seq, None, blocker.entry.op, not_done, view.group.ranks,
                f"issued by all {view.size} members, not completed on {ranks_word(not_done)} "
                f"(state {', '.join(sorted(set(states.values())))})"))
        return findings
