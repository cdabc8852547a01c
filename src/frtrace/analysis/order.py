"""Program order, for the wait-for graph's rules: what the other ranks' buffers show of which of two
collectives comes first (each rank a vote), and what the sibling groups show (the groups with the
same desc and size: the other TP or DP replicas run the same program).

A rank blocked in a collective that never issued one the others issue before it deviated, and
one whose every awaited op the others issue after the one it is blocked in is in order; a lone
witness that issued one op and never reached the other is no vote (it may have left the other
out). Where as many members issued an op as never did, the sibling groups tell whether it was
reached. ProgramOrder holds those rules as methods of the graph (waitgraph.WaitGraph)."""

from __future__ import annotations

from .align import GroupView
from ..types import Group

_NOT_REACHED = -1  # a rank's buffer ends before this op: it has not issued it yet


class ProgramOrder:
    """WaitGraph's rules that ask the other ranks and the sibling groups for the program's order: a
    mixin, on the graph's views, dumps and waits."""

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
