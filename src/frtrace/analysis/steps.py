"""Own history, for the wait-for graph's rules: a rank's buffer read as op classes (a collective by
group, op and sizes; a send or recv by group and peers), and the step its training loop repeats.

A rank of a deadlock whose own buffer shows an op between every two of the op it is blocked in,
but not before its latest one, or whose step lacks one such op, skipped it; where every rank of a
deadlock but one follows the step its buffer repeats, that one left its program; ranks that wait
for nobody and stopped inside their loop with the op next, where its issuers issued it inside
theirs, stayed behind; a rank blocked where its own program has it is not suspected of skipping
an op whose order no other rank shows. Nothing is decided on fewer than _HISTORY_STEPS earlier
steps, all alike. OwnHistory holds those rules as methods of the graph (waitgraph.WaitGraph);
moments.py reads the steps too (a buffer that holds two whole steps after an op shows it
finished)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from . import size_rules
from .align import global_rank, ranks_word
from ..types import Dump, Entry, Group

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


class OwnHistory:
    """WaitGraph's rules that read each rank's own buffer: a mixin, on the graph's blockers, dumps,
    waits and its caches of buffers and steps."""

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
