"""Comparing one aligned collective across the ranks that issued it: op, sizes by the op's own
rule, dtypes; the majority decides, and in a pair the sibling groups with the same desc."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from . import size_rules
from .align import GroupView, UnitEntries, ranks_word, signature, unit_ops


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
    offenders: tuple[int, ...]  # empty unless decided
    detail: str
    decided: bool


class Checker:
    """Compares the units of one aligned collective across the ranks that issued it."""

    def __init__(self, view: GroupView, siblings: list[GroupView]) -> None:
        """`siblings`: the views of the groups of its desc and size, the view's own among them or not
        (thousands of tp groups share one list, which is not copied for each)."""
        self.view = view
        self.siblings = siblings

    def check(self, seq: int, units: dict[int, UnitEntries]) -> _Verdict | None:
        units = {r: u for r, u in units.items() if self.view.cut.get(r) != seq}
        if len(units) < 2 and not any(self._own_problems(u) for u in units.values()):
            return None
        if len(set(map(signature, units.values()))) == 1:
            unit = next(iter(units.values()))
            problem = self._own_problems(unit)
            if problem is None:
                return self._all_to_all(seq, units)
            # every member breaks the rule the same way: the group's size (its membership) is what
            # is wrong, not every member; never a culprit
            return _Verdict("size_mismatch", (), f"every rank {problem}: the group likely has another size "
                                                 "than its members show (a member left no dump?)", False)

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
            problem = size_rules.own_size_problem(entry, self.view.size)
            if problem:
                return problem
        return None

    def _all_to_all(self, seq: int, units: dict[int, UnitEntries]) -> _Verdict | None:
        first = next(iter(units.values()))
        if len(first) != 1 or not size_rules.is_all_to_all(first[0].op) or len(units) < self.view.size:
            return None
        total_in = sum(size_rules.numel(u[0].input_sizes) for u in units.values())
        total_out = sum(size_rules.numel(u[0].output_sizes) for u in units.values())
        if total_in == total_out:
            return None
        keys = {r: (size_rules.numel(u[0].input_sizes), size_rules.numel(u[0].output_sizes)) for r, u in units.items()}
        if len(set(keys.values())) == 1:  # nobody differs: the group's sizes cannot be told apart from its members'
            sent, received = next(iter(keys.values()))
            return _Verdict("size_mismatch", (), f"every rank sends {sent} / receives {received} elements: the group sends "
                                                 f"{total_in} but receives {total_out}, and no rank differs from the others", False)
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
            return _Verdict(kind, (), f"{prefix}{parts}; {reason} and no sibling group decides", False)
        reference, offenders = voted
        agreeing = [r for r, k in keys.items() if k == reference]  # never empty: the reference is some rank's key
        others = ranks_word(agreeing)
        detail = (f"{prefix}{ranks_word(offenders)}: "
                  + "; ".join(sorted({describe(keys[r]) for r in offenders}))
                  + f" where {others} {'has' if len(agreeing) == 1 else 'have'} {describe(reference)}{source}")
        return _Verdict(kind, offenders, detail, bool(offenders))

    def _sibling_vote(self, seq: int, keys: dict[int, Hashable], key_of: Callable) -> tuple[Hashable, tuple[int, ...]] | None:
        votes: Counter = Counter()
        for sibling in self.siblings:
            if sibling is self.view:
                continue
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
    return tuple(size_rules.size_key(e) for e in unit)


def _dtype_keys(unit: UnitEntries) -> tuple:
    return tuple(size_rules.dtype_key(e) for e in unit)


def _describe_ops(ops: Hashable) -> str:
    return "+".join(op or "unnamed op" for op in ops) if isinstance(ops, tuple) else str(ops)


def _describe_sizes(units: dict[int, UnitEntries]) -> Callable[[Hashable], str]:
    shown = {_size_keys(u): _sizes_text(u) for u in units.values()}  # every key voted on is some unit's
    return shown.__getitem__


def _sizes_text(unit: UnitEntries) -> str:
    return " | ".join(f"{list(map(list, e.input_sizes))} -> {list(map(list, e.output_sizes))}" for e in unit)


def _describe_dtypes(units: dict[int, UnitEntries]) -> Callable[[Hashable], str]:
    shown = {_dtype_keys(u): ",".join(sorted({d for e in u for d in e.input_dtypes + e.output_dtypes}))
             for u in units.values()}
    return lambda key: "dtype " + shown[key]
