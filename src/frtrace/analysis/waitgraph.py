"""Who waits for whom: each rank's blocking op, and the wait-for graph whose sink components hold
the culprits; the findings it shows (ranks missing from an op, an op every member issued that
some never completed).

Each sink is decided here, by rules that live beside it: a cycle (a deadlock) by the ranks' own
histories (steps.py) and the program order the ranks outside it show (order.py), else by the op
most of them wait in; ranks that wait for nobody by a majority of the op's members, a tie by the
sibling groups (order.py) and their own loops (steps.py). The sends and recvs in the graph were
paired by p2p.py."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress, repeat
from operator import methodcaller, ne

from .align import ANY_SOURCE, by_number, GroupView, P2POp, ranks_word, Track, unit_label, unit_state
from .order import ProgramOrder
from .steps import OwnHistory, _Buffer
from ..reading.groups import GroupTable
from ..types import Dump, Entry, Finding, Group

# said by a not_completed finding whose ranks left the op scheduled where its other members started
# it (their GPU never reached it); verdict.py reads the finding so
NEVER_STARTED = "never started it (scheduled)"


def _members(view: GroupView) -> str:
    """A group's members as a majority counts them: those whose dumps show the end."""
    if not view.unseen:
        return f"{view.size} members"
    return f"{view.size - len(view.unseen)} members whose dumps show the end (of {view.size})"


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


def _undone(columns, found: dict | None) -> Sequence[int]:
    """The buffer positions of the entries not completed, in order (the state column is bytes
    where a byte holds each state: a regular expression finds them in C); found once for each
    state column ranks share, where `found` keeps them (id -> (the column, its positions): the
    dumps outlive it, so no id is reused)."""
    if "completed" not in columns.states:
        return range(len(columns))
    known = found.get(id(columns.state)) if found is not None else None
    if known is not None and known[0] is columns.state:
        return known[1]
    done = columns.states.index("completed")
    if isinstance(columns.state, bytes):
        positions = tuple(map(_match_start, _other_byte(done).finditer(columns.state)))
    else:
        positions = tuple(compress(range(len(columns)), map(ne, columns.state, repeat(done))))
    if found is not None:
        found[id(columns.state)] = (columns.state, positions)
    return positions


def blocker_of(dump: Dump, tracks: dict[tuple, Track], views: dict[tuple, GroupView], table: GroupTable,
             tracking: bool, undone: dict | None = None) -> Blocker | None:
    """The op the rank is blocked in: its first entry not completed that is an op of its own
    (where its recorder tracks completion), else its last op. `undone`: shared by the calls for
    one job's ranks (see _undone)."""
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

    if not len(dump.entries.kind):
        return None
    if not tracking:
        for entry in reversed(dump.entries):
            blocker = as_blocker(entry)
            if blocker is not None:
                return blocker
        return None
    columns = dump.entries
    for entry in map(columns.__getitem__, _undone(columns, undone)):  # only entries in another state can block
        blocker = as_blocker(entry)  # a scheduled op inside a completed coalesced group is done
        if blocker is None:
            continue
        state = blocker.p2p.state if blocker.p2p else blocker.entry.state
        if state != "completed":
            return blocker
    return None


class WaitGraph(OwnHistory, ProgramOrder):
    """Who waits for whom: rank -> the op it is blocked in -> the members that never issued it."""

    def __init__(self, views, blockers, unmatched, dumps, tracking, unanswered: frozenset[int] = frozenset(),
                 unasked: frozenset[int] = frozenset(), partner_done: dict | None = None) -> None:
        self.views = views
        self.partner_done = partner_done or {}  # id() of a p2p op not completed -> its partner, completed (p2p.py)
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
        self.unasked = unasked  # ... because frtrace live had no address to ask them at (their debug server never started)
        # gloo records no send or recv: a rank that waits for nobody may wait in one (a pipeline stage)
        self.p2p_unrecorded = bool(dumps) and all(d.entries.from_gloo for d in dumps.values() if len(d.entries.kind))
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
        of a group but a few is implausible, unless they are held in a collective they started that
        every member issued and none went past (_held): then they are waited for. A tie is decided
        by the sibling groups or not at all."""
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
        if len(issuers) <= len(awaited) and all(self._held(r) for r in awaited):
            # they never issued it because they are held in a collective every member issued and none
            # went past (stuck below PyTorch): no sign that the issuers ran ahead
            held = "; ".join(sorted({self._held(r).describe() for r in awaited}))
            evidence.append(f"wait-for graph: {ranks_word(self.waiters[key])} {by_number(self.waiters[key], 'waits', 'wait')} in "
                            f"{described} for {ranks_word(awaited)}, who {by_number(awaited, 'is', 'are')} held in {held}, "
                            "which every member issued")
            return blamed
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

    def _held(self, rank: int) -> Blocker | None:
        """The collective `rank` started and is blocked in where every member issued it and none went
        past it (a last op merely issued, or states that say nothing, is no sign of being held)."""
        blocker = self.joined_by_all.get(rank)
        if blocker is None or blocker.p2p is not None or blocker.entry.state != "started":
            return None
        known_last = self.views[blocker.group.key].known_last
        return None if any(last > blocker.seq for last in known_last.values()) else blocker

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
                lasts = "; ".join(f"rank {r}'s last op in {view.group.label} is #{view.known_last[r]}" if view.known_last[r]
                                  else f"rank {r} issued no op of {view.group.label}" for r in awaited[:4])
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
        if all(r in self.unasked for r in ranks):
            return ("left no address for frtrace live to ask (its debug server never started; whether the process is "
                    "alive cannot be told)")
        if all(r in self.unanswered for r in ranks):
            return "did not answer when frtrace live asked (the process may be gone or its host unreachable)"
        if all(r in self.unanswered or r in self.unasked for r in ranks):
            return "did not answer frtrace live or left no address to ask (a process may be gone)"
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

    def _stuck_pair(self, rank: int, blocker: Blocker) -> Finding | None:
        """A send and its recv, each the first op its rank has not completed, both ranks recording
        completion: the pair hangs below PyTorch as a collective that all its members issued and none
        finished does (a link lost). None where the peer is blocked elsewhere, or is not recording."""
        op = blocker.p2p
        other = self.joined_by_all.get(op.peer)
        if other is None or other.p2p is None or not self.tracking.get(op.peer):
            return None
        theirs = other.p2p
        if (theirs.kind == op.kind or theirs.peer != rank or other.group.key != blocker.group.key
                or theirs.batched != op.batched):  # a batched op may have been done where its partner was not
            return None
        send, recv = (blocker, other) if op.kind == "send" else (other, blocker)
        states = sorted({op.state, theirs.state})
        ends = tuple(sorted((rank, op.peer)))
        return Finding(
            "not_completed", blocker.group, None, send.entry.p2p_seq_id, send.entry.op, ends, ends,
            f"rank {send.rank}'s {send.entry.op} (p2p #{send.entry.p2p_seq_id}) and rank {recv.rank}'s {recv.entry.op} "
            f"(p2p #{recv.entry.p2p_seq_id}) both posted, completed on neither (state {', '.join(states)})")

    def done_partner(self, blocker: Blocker | None) -> P2POp | None:
        """The completed partner of the send or recv `blocker` is in (p2p.match_p2p), or None."""
        return self.partner_done.get(id(blocker.p2p)) if blocker is not None and blocker.p2p is not None else None

    def _partner_done(self, rank: int, blocker: Blocker) -> Finding | None:
        """A send or recv, its rank's first op not completed, whose partner completed (p2p.match_p2p:
        NCCL completes a send that fits the receiver's buffer before the recv runs): the rank left
        in it holds the link, not its peer. None for any other op."""
        partner = self.done_partner(blocker)
        if partner is None:
            return None
        op = blocker.p2p
        moved = ("the data was sent (a send that fits the receiver's buffer completes before its recv runs)"
                 if op.kind == "recv" else "the data arrived")
        return Finding(
            "not_completed", blocker.group, None, blocker.entry.p2p_seq_id, blocker.entry.op, (rank,), (op.src, op.dst),
            f"rank {rank}'s {blocker.entry.op} (p2p #{blocker.entry.p2p_seq_id}) never completed (state {op.state}), "
            f"though rank {op.peer}'s {partner.entry.op} (p2p #{partner.entry.p2p_seq_id}) did: {moved}")

    def stuck_findings(self) -> list[Finding]:
        findings = []
        seen: set[tuple] = set()
        for rank, blocker in sorted(self.joined_by_all.items()):
            if not self.tracking.get(rank):
                continue
            if blocker.p2p is not None:  # a pair is looked at once, from its lower end's side
                ends = ("p2p", blocker.group.key, *sorted((rank, blocker.p2p.peer)))
                if ends not in seen and (pair := self._stuck_pair(rank, blocker) or self._partner_done(rank, blocker)):
                    seen.add(ends)
                    findings.append(pair)
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
            # a member that recorded nothing, or whose dump ends before the op, is not said to have issued it
            unshown = sorted(set(view.group.ranks) - set(units))
            issued = (f"issued by {len(units)} of {view.size} members ({ranks_word(unshown)}'s "
                      f"{by_number(unshown, 'dump does', 'dumps do')} not show it)" if unshown
                      else f"issued by all {view.size} members")
            findings.append(Finding(
                "not_completed", view.group, blocker.seq, None, blocker.entry.op, not_done, view.group.ranks,
                f"{issued}, not completed on {ranks_word(not_done)} (state {', '.join(sorted(set(states.values())))})"))
        return findings
