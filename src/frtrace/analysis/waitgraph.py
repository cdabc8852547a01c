"""Who waits for whom: each rank's blocking op, send/recv pairing, and the wait-for graph whose
sink components hold the culprits."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress, repeat
from operator import methodcaller, ne

from . import size_rules
from .align import ANY_SOURCE, by_number, global_rank, GroupView, P2POp, ranks_word, Track, unit_label, unit_state
from ..reading.groups import GroupTable
from ..types import Dump, Entry, Finding, Group

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
        a, b = (global_rank(group, int(p)) for p in parts)
    except ValueError:
        return None, None
    return (a, b) if kind == "send" else (b, a)


def _members(view: GroupView) -> str:
    """A group's members as a majority counts them: those whose dumps show the end."""
    if not view.unseen:
        return f"{view.size} members"
    return f"{view.size - len(view.unseen)} members whose dumps show the end (of {view.size})"


def _class_text(op_class: tuple) -> str:
    if op_class[0] == "p2p":
        return f"{op_class[2]} {op_class[3]}->{op_class[4]} of {op_class[1].label}"
    return f"{op_class[2]} of {op_class[1].label}"


@dataclass(frozen=True, slots=True)
class _Buffer:
    """A rank's buffer read as op classes, oldest first: what the own-history rules compare."""

    ops: list[tuple[int, tuple, bool]]  # (buffer index, class, whether it ends a batch of p2p ops)
    wrapped: bool  # older ops are gone


def buffer_of(dump: Dump, group_of) -> _Buffer:
    """The rank's ops in the groups `group_of` knows, as classes."""
    ops = []
    after_p2p = False
    for entry in dump.entries:
        group = group_of(entry)
        if group is None:
            continue
        ops.append((entry.index, _class_of_entry(entry, group), after_p2p and entry.op in size_rules.COALESCED_TERMINATORS))
        after_p2p = entry.is_p2p
    return _Buffer(ops, dump.wrapped)


def _steps_between(buffer: _Buffer, blocked: tuple, wanted: tuple) -> int | None:
    """How many earlier steps of the rank's buffer show `wanted` between two `blocked` ops, when
    all of them (at least _HISTORY_STEPS) do and the last two `blocked` ops have none between
    them; None otherwise (no evidence). A buffer that never wrapped holds the first step too:
    what it holds before its first `blocked` op counts where it holds a `wanted` one."""
    first, gaps = _gaps(buffer, blocked, wanted)
    if not gaps or gaps[-1] or not all(gaps[:-1]):
        return None
    steps = len(gaps) - 1 + bool(first)
    return steps if steps >= _HISTORY_STEPS else None


def _in_step(buffer: _Buffer, blocked: tuple, wanted: tuple) -> bool:
    """Whether the rank's buffer shows `wanted` between every two `blocked` ops, the last two
    too, in at least _HISTORY_STEPS steps: it is blocked where its program has it, not astray."""
    gaps = _gaps(buffer, blocked, wanted)[1]
    return len(gaps) >= _HISTORY_STEPS and all(gaps)


def _gaps(buffer: _Buffer, blocked: tuple, wanted: tuple) -> tuple[int | None, list[int]]:
    """How many `wanted`-class ops the buffer holds before its first `blocked`-class op (None
    where it wrapped: older ops are gone) and between each two consecutive ones."""
    gaps: list[int] = []
    first = None
    count = 0
    for _, op_class, _ in buffer.ops:
        if op_class == blocked:
            if first is None:
                first = count
            else:
                gaps.append(count)
            count = 0
        elif op_class == wanted:
            count += 1
    return (None if buffer.wrapped else first), gaps


def _step_cuts(buffer: _Buffer, upto: int):
    """The rank's buffer (up to index `upto`) cut into steps, once for each class that recurs
    least often (once a step; a pipeline's sends and recvs recur once per microbatch, with warm-up
    and cool-down steps unlike the others), often enough to start _HISTORY_STEPS steps after the
    first (which a buffer that never wrapped holds whole): (that class, the complete steps from one
    op of it to the next, the step it is in, the ops before its first one). A batch's end goes
    with its ops."""
    classes = [op_class for index, op_class, batch_end in buffer.ops if index <= upto and not batch_end]
    counts = Counter(classes)
    recurring = [n for n in counts.values() if n >= _HISTORY_STEPS + buffer.wrapped]
    for start in (c for c, n in counts.items() if recurring and n == min(recurring)):
        cuts = [i for i, c in enumerate(classes) if c == start]
        steps = [tuple(classes[a:b]) for a, b in zip(cuts, cuts[1:])]
        yield start, steps, tuple(classes[cuts[-1]:]), tuple(classes[:cuts[0]])


def _step_left_out(buffer: _Buffer, upto: int, wanted: tuple) -> tuple[int, int, tuple] | None:
    """Where the rank's buffer repeats one step op for op and the step it is in (up to its op at
    buffer index `upto`, the one it is blocked in), or the one before, is that step less one
    `wanted` op: (steps repeated, ops in a step, the class that starts one). Every complete step
    the buffer holds must be alike. None: no such evidence."""
    for start, steps, tail, first in _step_cuts(buffer, upto):
        for deviant, rest in ((tail, ()), (steps[-1] if steps else (), tail)):
            known = steps[:-1] if rest else steps  # the complete steps before the deviant one: all alike
            if not known or known.count(known[-1]) != len(known):
                continue
            template = known[-1]
            # a buffer that never wrapped holds the first step, which no op of the class starts
            repeated = len(known) + (not buffer.wrapped and first == template[1:])
            if repeated < _HISTORY_STEPS or (rest and template[:len(rest)] != rest):  # the step after it follows the template
                continue
            if _one_left_out(template, deviant, wanted, complete=bool(rest)):
                return repeated, len(template), start
    return None


def on_step(buffer: _Buffer, upto: int) -> tuple[tuple, tuple, tuple] | None:
    """Where the rank's buffer repeats one step op for op (every complete step alike, at least
    _HISTORY_STEPS of them) and the step it is in, up to buffer index `upto`, follows it so far:
    (the step, the part of it done, the ops before the buffer's first step). None: no such step."""
    for _, steps, tail, first in _step_cuts(buffer, upto):
        if not steps or steps.count(steps[-1]) != len(steps):
            continue
        template = steps[-1]
        repeated = len(steps) + (not buffer.wrapped and first == template[1:])
        if repeated >= _HISTORY_STEPS and template[:len(tail)] == tail:
            return template, tail, first
    return None


def _stopped_in_step(buffer: _Buffer, upto: int, wanted: tuple) -> tuple[int, int] | None:
    """Where the rank's buffer, up to index `upto`, follows the step it repeats and stops with a
    `wanted` op next, inside its program's loop: (ops in a step, ops done in this one). A buffer
    that never wrapped shows where the loop starts (its first ops are the end of a step); where it
    would end, or where a wrapped buffer cannot show it, the program may simply have ended there
    (and a rank that issued the op ran ahead): None."""
    found = on_step(buffer, upto)
    if found is None or buffer.wrapped:
        return None
    template, done, first = found
    loop_end = len(template) - len(first)  # ops into a step where each pass of the loop ends
    if first != template[loop_end:] or len(done) == loop_end or template[len(done) % len(template)] != wanted:
        return None
    return len(template), len(done)


def _one_left_out(template: tuple, seen: tuple, wanted: tuple, complete: bool) -> bool:
    """Whether `seen` is `template` less one `wanted` op: all of it (`complete`), or up to where
    it ends (a step still running, which ends in the op the rank is blocked in)."""
    for i, (a, b) in enumerate(zip(template, seen)):
        if a != b:
            rest = template[i + 1:] if complete else template[i + 1:i + 1 + len(seen) - i]
            return a == wanted and rest == seen[i:]
    return complete and len(seen) == len(template) - 1 and template[-1] == wanted


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


@lru_cache(maxsize=256)
def _other_byte(code: int) -> re.Pattern:
    """A pattern matching any byte but `code` (at memchr-like speed, where a map over the states
    took 60 us a 2,000-entry dump)."""
    return re.compile(b"[^" + re.escape(bytes([code])) + b"]")


_match_start = methodcaller("start")


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
        if isinstance(columns.state, bytes):  # one byte a state: a regular expression skips the completed ones
            candidates = map(_match_start, _other_byte(done).finditer(columns.state))
        else:
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


def _done_in_batch(out: list[P2POp], into: list[P2POp]) -> tuple[list[P2POp], list[P2POp]]:
    """The oldest send and recv of a link still open, where one of them was posted in a batch
    with other p2p ops (it carries the batch's state, which its other ops may hold back) and the
    other alone: both started, they would have completed together had they been partners (a
    dump taken in a hang is not taken in the microseconds a transfer lasts), so the batched one
    is done already and its partner was an earlier op."""
    while out and into and out[0].state == into[0].state == "started" and out[0].batched != into[0].batched:
        if out[0].batched:
            out = out[1:]
        else:
            into = into[1:]
    return out, into


def match_p2p(views: dict[tuple, GroupView], dumps: dict[int, Dump], tracking: dict[int, bool],
              unseen: frozenset[int] = frozenset()):
    """Pair sends with recvs first-in-first-out per (group, src, dst). Pairs with a rank whose
    dump says nothing of the end (`unseen`: older than its peers', or its recorder off) are left
    unmatched: never evidence against either."""
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
            if src not in dumps or dst not in dumps or src in unseen or dst in unseen:
                continue
            out, into = sends.get(pair, []), recvs.get(pair, [])
            if tracking[src] and tracking[dst]:
                # completed ops were matched (a p2p op completes only with its partner)
                out = [o for o in out if o.state != "completed"]
                into = [o for o in into if o.state != "completed"]
                out, into = _done_in_batch(out, into)
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

    def __init__(self, views, blockers, unmatched, dumps, tracking, unanswered: frozenset[int] = frozenset()) -> None:
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
        self._buffers: dict[int, _Buffer] = {}  # rank -> its buffer as op classes, read on first use
        self._steps: dict[int, tuple | None] = {}  # rank -> _step_of, read on first use
        self._awaiting: defaultdict[int, list[tuple]] | None = None  # rank -> the ops waiting for it
        self._everyones_votes: dict[tuple, list[int]] = {}  # (op, op) -> the votes of every rank that issued both
        self.undecided_behind: list[str] = []  # what no strong rule decides beside a decided culprit
        self._unordered: set[int] = set()  # blocked ranks awaited in another op, of which nothing tells the order
        self.unanswered = unanswered  # ranks with no dump because they did not answer frtrace live
        # gloo records no send or recv: a rank that waits for nobody may wait in one (a pipeline stage)
        self.p2p_unrecorded = bool(dumps) and all(d.entries.from_gloo for d in dumps.values() if len(d.entries))
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

    def components(self, within: set[tuple] | None = None) -> list[list[tuple]]:
        """The strongly connected components of the graph, or of the part of it `within` holds."""
        index: dict[tuple, int] = {}
        low: dict[tuple, int] = {}
        on_stack: set[tuple] = set()
        stack: list[tuple] = []
        result: list[list[tuple]] = []
        if within is None:
            nodes, edges_of = [("op", k) for k in self.waits_on], self._edges
        else:
            nodes = [n for n in within if n[0] == "op"]
            edges_of = lambda node: tuple(n for n in self._edges(node) if n in within)  # noqa: E731
        for start in nodes:
            if start in index:
                continue
            work = [(start, iter(edges_of(start)))]
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
                        work.append((nxt, iter(edges_of(nxt))))
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
        for i, comp in enumerate(components):
            members = set(comp)
            ranks = [n[1] for n in comp if n[0] == "rank"]
            ops = [n[1] for n in comp if n[0] == "op"]
            if any(where.get(n) != i for node in comp for n in self._edges(node)):
                if ops and ranks:
                    # a cycle that also waits for ranks outside it: a deadlock of its own, which
                    # those ranks cannot end; decided by the strong rules alone (a second fault
                    # hidden behind the one the sink shows), else said to be undecided
                    found.extend(self._cycle_culprits(ops, set(ranks), members, evidence, self.undecided_behind,
                                                      strong_only=True))
                elif len(comp) == 1 and ranks:
                    found.extend(self._astray(ranks[0], evidence))
                continue
            if len(comp) == 1 and ranks:
                # waited for, waits for no one
                rank = ranks[0]
                awaited_in = self._awaited_by(rank)
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
        unordered = sorted(self._unordered - {r for r, _ in found})
        if found and unordered:  # beside the culprits found, a rank that may have left the program too
            self.undecided_behind.append(
                f"whether {ranks_word(unordered)}, blocked in one op while others wait for {by_number(unordered, 'it', 'them')} "
                f"in another, skipped that other op cannot be told (no other rank shows their order)")
        return found, undecided, evidence

    def _astray(self, rank: int, evidence: list[str]) -> list[tuple[int, tuple]]:
        """A rank in no cycle that waits for someone and is waited for: where its own history, or
        the other ranks that issued both, show an op it is awaited in before the one it is blocked
        in, it left the program (skipped that op and went on); its own wait, which may be another
        fault's, hides it."""
        by_history, history_evidence = self._deviators_by_history({rank})
        if by_history:
            evidence.extend(history_evidence)
            return list(by_history.items())
        blocked = self.op_of.get(rank)
        if blocked is None or blocked[0] != "coll":
            return []
        for key in self._awaited_by(rank):
            if key[0] != "coll" or key in self.weak or key == blocked:
                continue
            if (key, blocked) not in self._everyones_votes:  # asked once per pair of ops, however many ranks wait alike
                self._everyones_votes[(key, blocked)] = self._votes(key, blocked, self.dumps, issued_both=True)
            votes = self._everyones_votes[(key, blocked)]
            mine = self._votes(key, blocked, (rank,), issued_both=True)
            # only ranks that issued both ops vote: a rank that skipped one (another fault) shows
            # the other alone, as if the order were its
            if sum(votes) - sum(mine) > 0 and 1 in votes:
                evidence.append(f"program order: the other ranks issued {self.blocker_of_op[key].describe()} before "
                                f"{self.blockers[rank].describe()}, which rank {rank} is blocked in")
                return [(rank, key)]
            if len(votes) == len(mine) and not self._keeps_step(rank, [key]):  # nothing tells whether it skipped the op
                self._unordered.add(rank)
                return []
        return []

    def _cycle_culprits(self, ops: list[tuple], cycle_ranks: set[int], members: set[tuple], evidence: list[str],
                        undecided: list[str], strong_only: bool = False,
                        voters_outside: frozenset[int] = frozenset()) -> list[tuple[int, tuple]]:
        """The culprits of a cycle (_decide_cycle), and of any cycle left among the other ranks once
        those are taken out: a deadlock those culprits are not part of needs its own."""
        found = self._decide_cycle(ops, cycle_ranks, members, evidence, undecided, strong_only, voters_outside)
        if not found:
            return found
        rest = members - {("rank", r) for r, _ in found}
        for comp in self.components(rest):
            ranks = {n[1] for n in comp if n[0] == "rank"}
            if ranks and len(comp) > 1:  # its program order is asked of ranks outside the whole cycle only
                found += self._cycle_culprits([n[1] for n in comp if n[0] == "op"], ranks, set(comp), evidence,
                                              self.undecided_behind, True, voters_outside | cycle_ranks)
        return found

    def _decide_cycle(self, ops: list[tuple], cycle_ranks: set[int], members: set[tuple], evidence: list[str],
                      undecided: list[str], strong_only: bool, voters_outside: frozenset[int]) -> list[tuple[int, tuple]]:
        """A cycle: ranks issued ops in different orders. The ranks that deviated are found from the
        ranks' own histories (a training job repeats its step) and from the program order the ranks
        outside the cycle show (a rank blocked in an op, never having issued one that comes before
        it); each cycle rank can have deviated, so both rules name all they find. Where one clears
        a rank the other names, or neither decides, nothing is decided. `strong_only`: no majority
        guess, and nothing said where nothing is found."""
        by_history, history_evidence = self._deviators_by_history(cycle_ranks)
        # the ranks outside the cycle order collectives only: where a cycle holds a send or recv,
        # a rank missing from the first collective may just be blocked in that p2p op before it
        by_order, in_order = (self._deviators_by_order(cycle_ranks, cycle_ranks | voters_outside)
                              if all(k[0] == "coll" for k in ops) else ({}, set()))
        cleared = sorted(set(by_history) & in_order)
        if cleared:
            undecided.append(
                f"{self._cycle_text(ops)}: their own histories point at {ranks_word(cleared)}, whom the ranks outside "
                "the cycle show issuing their ops in order; the rules disagree")
            return []
        if by_history or by_order:
            evidence.extend(history_evidence)
            for rank, key in sorted(by_order.items()):
                if rank not in by_history:
                    evidence.append(f"program order: ranks outside the cycle issued {self.blocker_of_op[key].describe()} "
                                    f"before {self.blockers[rank].describe()}, which rank {rank} is blocked in")
            return sorted({**by_order, **by_history}.items())
        left = self._left_by_history(cycle_ranks)
        if left is not None:
            rank, key, cleared = left
            evidence.append(f"own history: {ranks_word(cleared)} {by_number(cleared, 'follows', 'follow')} the step "
                            f"{by_number(cleared, 'its', 'their')} buffer repeats up to the op {by_number(cleared, 'it is', 'they are')} "
                            f"blocked in; of the deadlock's ranks only rank {rank} does not show it, so it left its program")
            return [(rank, key)]
        if strong_only:
            undecided.append(f"{self._cycle_text(ops)}: a deadlock of its own, and neither their own histories nor "
                             "any other rank shows which order is right")
            return []
        # with a send or recv in the cycle, the op most ranks wait in proves nothing: a sender
        # blocked on a dropped recv is missing from every collective after it (random jobs: 502 of
        # 1000 dropped recvs blamed the sender before this guard). Nor where an op's group or a
        # sibling counts from the oldest op held (anchor.py): program order cannot ask it, and a rank
        # that skipped an op of a small group to join the big group's is what the majority waits for
        if any(k[0] == "p2p" or not self._comparable(self.views[k[1]].group) for k in ops):
            ranked = []
        else:
            # sibling groups' ops of one seq are one op of the program: two dp groups waiting
            # in dp #4 are as many waiters as the world all_reduce's two
            waiting: dict[tuple, list[tuple]] = defaultdict(list)
            for k in ops:
                waiting[self._program_op(k)].append(k)
            ranked = sorted(waiting.values(), key=lambda keys: sum(len(self.waiters[k]) for k in keys), reverse=True)
        count = [sum(len(self.waiters[k]) for k in keys) for keys in ranked[:2]]
        if not ranked or (len(count) > 1 and count[0] == count[1]):
            undecided.append(f"{self._cycle_text(ops)}: they issued ops in different orders and neither their own "
                             "histories nor any other rank shows which order is right")
            return []
        first = ranked[0]
        waiters = sorted(r for k in first for r in self.waiters[k])
        blamed = [(r, k) for k in first for r in self.waits_on[k] if ("rank", r) in members]
        behind = [r for r, k in blamed if self.op_of.get(r, ("p2p",))[0] == "coll" and 1 in self._votes(self.op_of[r], k, waiters)]
        if behind:
            # the majority's own ranks issued the op these are blocked in before theirs: they are
            # behind, not astray, and someone among the majority skipped it (more than one fault)
            undecided.append(f"{self._cycle_text(ops)}: most wait in {self.blocker_of_op[first[0]].describe()}, but "
                             f"{ranks_word(behind)}, missing from it, {by_number(behind, 'is', 'are')} blocked in an op "
                             "that those ranks issued before it: more than one rank left the program")
            return []
        evidence.append(f"majority: {ranks_word(waiters)} wait in {self.blocker_of_op[first[0]].describe()}"
                        f"{' (and its sibling groups)' if len(first) > 1 else ''}, more than in any other op of the cycle")
        return blamed

    def _program_op(self, key: tuple) -> tuple:
        """A collective as an op of the program: its seq in its group's desc and size where sibling
        groups share them, else the group's own op."""
        group = self.views[key[1]].group
        if len(self._siblings(group)) > 1:
            return (group.desc, len(group.ranks), key[2])
        return key

    def _deviators_by_order(self, cycle_ranks: set[int], not_voting: set[int]) -> tuple[dict[int, tuple], set[int]]:
        """Cycle ranks blocked in a collective while they never issued one that the ranks outside
        the cycle issue before it ({rank: that op}), and the ranks those show in order (every op
        awaiting them comes after the one they are blocked in)."""
        deviators: dict[int, tuple] = {}
        in_order: set[int] = set()
        votes: dict[tuple, int] = {}  # (op, op) -> votes, asked once however many ranks wait alike
        for rank in sorted(cycle_ranks):
            blocked = self.op_of.get(rank)
            if blocked is None or blocked[0] != "coll":
                continue
            awaited = [k for k in self._awaited_by(rank) if k[0] == "coll" and k not in self.weak and k != blocked]
            for k in awaited:
                if (k, blocked) not in votes:
                    votes[(k, blocked)] = self._order_votes(k, blocked, not_voting)
            earlier = [k for k in awaited if votes[(k, blocked)] > 0]
            if earlier:
                deviators[rank] = (self._first_in_program(earlier, not_voting) if len(earlier) > 1 else None) or earlier[0]
            elif awaited and all(votes[(k, blocked)] < 0 for k in awaited):
                in_order.add(rank)
            elif any(votes[(k, blocked)] == 0 for k in awaited) and not self._keeps_step(rank, awaited):
                self._unordered.add(rank)
        return deviators, in_order

    def _keeps_step(self, rank: int, awaited: list[tuple]) -> bool:
        """Whether the rank's own buffer shows each op it is awaited in between every two of the
        op it is blocked in, before its latest one too, or follows the step it repeats, which holds
        them: it is where its own program has it."""
        blocker = self.blockers.get(rank)
        if blocker is None or rank not in self.dumps:
            return False
        blocked = _class_of_entry(blocker.entry, blocker.group)
        wanted = [self._class_of_awaited(k) for k in awaited]
        if all(w is not None and _in_step(self._buffer(rank), blocked, w) for w in wanted):
            return True
        # or its buffer repeats one step op for op, which holds those ops, and it follows that step
        on_step = self._step_of(rank)
        return on_step is not None and all(w in on_step[0] for w in wanted)

    def _step_of(self, rank: int) -> tuple[tuple, tuple, tuple] | None:
        """The step the rank's buffer repeats, where it follows it up to the op it is blocked in
        (on_step); read once per rank."""
        if rank not in self._steps:
            blocker = self.blockers.get(rank)
            self._steps[rank] = (None if blocker is None or rank not in self.dumps
                                 else on_step(self._buffer(rank), blocker.entry.index))
        return self._steps[rank]

    def _buffer(self, rank: int) -> _Buffer:
        if rank not in self._buffers:
            self._buffers[rank] = buffer_of(self.dumps[rank], self._group_of(rank))
        return self._buffers[rank]

    def _awaited_by(self, rank: int) -> list[tuple]:
        """The ops waiting for `rank` (an index made on first use)."""
        if self._awaiting is None:
            self._awaiting = defaultdict(list)
            for key, awaited in self.waits_on.items():
                for r in awaited:
                    self._awaiting[r].append(key)
        return self._awaiting.get(rank, [])

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
            evidence.append(f"majority: {len(issuers)} of {_members(view)} issued {described}; "
                            f"{ranks_word(awaited)} {did} and {by_number(awaited, 'waits', 'wait')} for nobody")
            return blamed
        if len(issuers) == len(awaited):
            sibling = self._sibling_reached(view, seq, self._waiting_for(idle))
            behind = self._stayed_behind(key, issuers, awaited)
            if behind and sibling is not False:
                evidence.append(behind)
                return blamed
            if sibling is None or behind:
                undecided.append(f"{ranks_word(issuers)} issued {described}, {ranks_word(awaited)} never did and "
                                 f"{by_number(awaited, 'waits', 'wait')} for nobody: as many members ran ahead as "
                                 "stayed behind, and " + ("their own histories and the sibling groups disagree on which is right"
                                                          if behind else "no sibling group shows which is right"))
                return []
            if sibling:
                evidence.append(f"sibling groups: the other {view.group.label} groups issued #{seq} too")
                return blamed
            evidence.append(f"sibling groups: the other {view.group.label} groups stopped before #{seq}")
        else:
            evidence.append(f"majority: {len(awaited)} of {_members(view)} never issued {described} and wait for "
                            f"nobody; {ranks_word(issuers)} issued it alone")
        self.ran_ahead[key] = tuple(issuers)
        return [(r, key) for r in issuers]

    def _stayed_behind(self, key: tuple, issuers: list[int], idle: list[int]) -> str | None:
        """Evidence that the ranks awaited in collective `key`, who wait for nobody, stopped inside
        their program's loop with it next (_stopped_in_step), and that its issuers issued it where
        their own loops have it: the idle ones stayed behind, none ran ahead. None: no such evidence."""
        wanted = self._class_of_awaited(key)
        if wanted is None or any(self.op_of.get(r) != key for r in issuers):
            return None
        stops = {_stopped_in_step(self._buffer(r), len(self.dumps[r].entries), wanted) for r in idle}
        stops |= {_stopped_in_step(self._buffer(r), self.blockers[r].entry.index - 1, wanted) for r in issuers}
        if None in stops:
            return None
        where = f"{stops.pop()[1]} ops into a step of its own " if len(stops) == 1 else "inside a step of its own "
        return (f"own history: each of {ranks_word([*idle, *issuers])} repeats one step op for op, and stopped {where}"
                f"with {_class_text(wanted)} next, before the end of its loop: {ranks_word(issuers)} issued it there, "
                f"{ranks_word(idle)} stayed behind")

    def _sibling_reached(self, view: GroupView, seq: int, held: set[int]) -> bool | None:
        """Whether the other groups with this desc and size issued `seq` (every member of each),
        stopped before it (every member), or cannot tell (None: none, or they disagree). A group
        with a member in `held` (waiting, however indirectly, for the idle ranks) stopped because
        of them, not where its program is: it says nothing of where the program is; nor does one
        with a member that may wait in an op the dumps do not record (_may_wait_unseen)."""
        answers = set()
        for other in self._class_views(view.group):
            if other is view or other.unknown or not other.known_last:
                continue
            lasts = set(other.known_last.values())
            if min(lasts) >= seq:
                answers.add(True)
            elif max(lasts) < seq and not held.intersection(other.group.ranks) and not self._may_wait_unseen(other.group):
                answers.add(False)
        return answers.pop() if len(answers) == 1 else None

    def _may_wait_unseen(self, group: Group) -> bool:
        """Whether a member of the group may wait in an op the dumps do not record (a send or
        recv, in gloo) and so stopped where its program is not: it waits for nobody they show."""
        return self.p2p_unrecorded and any(r not in self.op_of for r in group.ranks)

    def _waiting_for(self, ranks) -> set[int]:
        """The ranks that wait for `ranks`, directly or through others who do."""
        held: set[int] = set()
        todo = list(ranks)
        while todo:
            for key in self._awaited_by(todo.pop()):
                for waiter in self.waiters[key]:
                    if waiter not in held:
                        held.add(waiter)
                        todo.append(waiter)
        return held

    def _left_by_history(self, cycle_ranks: set[int]) -> tuple[int, tuple, list[int]] | None:
        """A deadlock needs a rank that left its program. Where every rank of the cycle but one
        follows, up to the op it is blocked in, the step its own buffer repeats (on_step), that one
        left it: (it, the op awaiting it, the others). None where two or more show nothing (or
        none: every rank where its program has it, a deadlock of the program itself)."""
        unshown = [rank for rank in sorted(cycle_ranks) if self._step_of(rank) is None]
        if len(unshown) != 1:
            return None
        rank = unshown[0]
        awaiting = [k for k in self._awaited_by(rank) if any(r in cycle_ranks for r in self.waiters[k])]
        if not awaiting:
            return None
        first = self._first_in_program(awaiting, cycle_ranks) if len(awaiting) > 1 else None
        return rank, first or awaiting[0], sorted(cycle_ranks - {rank})

    def _deviators_by_history(self, cycle_ranks: set[int]) -> tuple[dict[int, tuple], list[str]]:
        """Cycle ranks whose latest op breaks the order their own buffer repeats.

        A rank r blocked in op class A and awaited by the others in op class B: if, in r's own
        buffer, every two consecutive A's before the last have a B between them (at least
        _HISTORY_STEPS times) and the last two A's have none, r skipped B this step; so too where
        its buffer repeats one step op for op and the step it is in lacks one B (_step_left_out: a
        pipeline stage that left out one of its microbatches' receives). Ops of any kind are
        classes: a collective by group, op and sizes; a send or recv by group and peers.
        """
        deviators: dict[int, tuple] = {}
        evidence: list[str] = []
        for rank in sorted(cycle_ranks):
            blocker = self.blockers.get(rank)
            if blocker is None or rank not in self.dumps:
                continue
            blocked = _class_of_entry(blocker.entry, blocker.group)
            for key in self._awaited_by(rank):
                wanted = self._class_of_awaited(key)
                if wanted is None:
                    continue
                steps = _steps_between(self._buffer(rank), blocked, wanted)
                if steps is not None:
                    evidence.append(f"own history: rank {rank}'s buffer shows {_class_text(wanted)} between every two "
                                    f"{_class_text(blocked)} in its last {steps} steps, and not before its latest one")
                else:
                    left_out = _step_left_out(self._buffer(rank), blocker.entry.index, wanted)
                    if left_out is None:
                        continue
                    steps, size, start = left_out
                    evidence.append(f"own history: rank {rank}'s buffer repeats one step of {size} ops (from one "
                                    f"{_class_text(start)} to the next) in its last {steps} steps; the step it is in "
                                    f"has one {_class_text(wanted)} fewer")
                deviators[rank] = key
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
        """The op of a cycle that the other ranks' buffers show coming before all the others."""
        collectives = [k for k in ops if k[0] == "coll"]
        if len(collectives) < 2:
            return None
        wins: dict[tuple, set[tuple]] = {k: set() for k in collectives}  # op -> ops it comes before
        for a in collectives:
            for b in collectives:
                if a is b or b in wins[a] or a in wins[b]:
                    continue
                votes = self._order_votes(a, b, cycle_ranks)
                if votes > 0:
                    wins[a].add(b)
                elif votes < 0:
                    wins[b].add(a)
        firsts = [k for k in collectives if len(wins[k]) == len(collectives) - 1]
        return firsts[0] if len(firsts) == 1 else None

    def _order_votes(self, a: tuple, b: tuple, cycle_ranks: set[int]) -> int:
        """How many more ranks outside `cycle_ranks` show collective `a` before `b` than after it.
        A lone witness that issued one op and never reached the other is none: it may have left
        the other out (a second fault)."""
        voters = [r for r in self.dumps if r not in cycle_ranks]
        votes = self._votes(a, b, voters)
        if len(votes) == 1 and not self._votes(a, b, voters, issued_both=True):
            return 0
        return sum(votes)

    def _votes(self, a: tuple, b: tuple, voters, issued_both: bool = False) -> list[int]:
        """Each voter's word on whether collective `a` comes before `b`: 1, -1 (after) or none.

        Ops are compared by class: the same seq in any group with the same desc and size (the
        other TP or DP replicas run the same program). A rank that issued one op and then the
        other, or (unless `issued_both`) issued one and has not reached the other, is a vote.
        """
        votes = []
        for rank in voters:
            pos_a, pos_b = self._position(rank, a), self._position(rank, b)
            if pos_a is None or pos_b is None or (pos_a == _NOT_REACHED and pos_b == _NOT_REACHED):
                continue
            if issued_both and _NOT_REACHED in (pos_a, pos_b):
                continue
            votes.append(1 if pos_b == _NOT_REACHED or (pos_a != _NOT_REACHED and pos_a < pos_b) else -1)
        return votes

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
                if len(awaited) > 4:
                    lasts += f"; ... ({len(awaited) - 4} more)"
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

    def no_dump(self, ranks) -> str:
        """Why the ranks have no dump, in words."""
        if all(r in self.unanswered for r in ranks):
            return "did not answer when frtrace live asked (the process may be gone or its host unreachable)"
        return "left no readable dump"

    def _unseen(self, ranks, group: Group) -> str:
        """Why ranks may not have issued an op of `group`: no dump, or a buffer that wrapped past the group."""
        no_dump = [r for r in ranks if r not in self.dumps]
        wrapped = [r for r in ranks if r in self.dumps]
        parts = [f"{ranks_word(no_dump)} {self.no_dump(no_dump)}"] if no_dump else []
        if wrapped:
            parts.append(f"{ranks_word(wrapped)} {by_number(wrapped, 'holds', 'hold')} no op of {group.label} "
                         "(the buffer wrapped past it)")
        return "; ".join(parts)

    def _held_before(self, rank: int, blocker: Blocker) -> bool:
        """Whether `rank`'s first unfinished op is another than `blocker`'s, one it issued earlier."""
        own = self.blockers.get(rank)
        return own is not None and own.entry.index < self._index_of(rank, blocker)

    def _index_of(self, rank: int, blocker: Blocker) -> int:
        """The buffer index of `blocker`'s op in `rank`'s own dump."""
        if blocker.rank == rank:
            return blocker.entry.index
        unit = self.views[blocker.group.key].unit(blocker.seq, rank)
        return unit[0].index if unit else -1

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
            if any(self._held_before(r, blocker) for r in not_done):
                # a member's first unfinished op is an earlier one: this op is queued behind it on
                # that rank's stream, a consequence; what holds the earlier op is found there
                continue
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
