"""Each group name's run of entries in one rank's buffer, made where the dump is read (in the
worker processes), so that the matcher receives them ready: the entries' positions, and for the
common case (each entry one whole collective, seq ids counting up by one) the first seq id and
the kind and state codes in seq order."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import compress, repeat
from operator import eq
from typing import NamedTuple

from .rules import COALESCED_TERMINATORS
from .types import EntryColumns


class Run(NamedTuple):
    positions: Sequence[int]  # buffer indices of the name's entries, in buffer order
    first_seq: int | None  # None unless each entry is a whole collective and seq ids count up by one
    kinds: Sequence[int]  # the entries' kind codes (bytes when every code fits in one)
    states: Sequence[int]  # the entries' state codes, likewise


def codes(values: Sequence[int], count: int) -> Sequence[int]:
    """Codes below `count` as bytes when they fit (sliced and compared fastest), else an array."""
    return bytes(iter(values)) if count <= 256 else array("I", values)  # iter: not an array's raw buffer


def make_runs(columns: EntryColumns) -> dict[str, Run]:
    number_of: dict[str, int] = {}
    name_number = [number_of.setdefault(k.pg_name, len(number_of)) for k in columns.kinds]
    count = len(columns)
    runs: dict[str, Run] = {}
    for name, number in number_of.items():
        if len(number_of) == 1:
            positions: Sequence[int] = range(count)
            kinds, states = columns.kind, columns.state
        else:
            positions = array("I", compress(range(count), map(eq, map(name_number.__getitem__, columns.kind), repeat(number))))
            if not positions:
                continue
            kinds = list(map(columns.kind.__getitem__, positions))
            states = list(map(columns.state.__getitem__, positions))
        runs[name] = Run(positions, _first_seq(columns, positions, kinds),
                         codes(kinds, len(columns.kinds)), codes(states, len(columns.states)))
    return runs


def _first_seq(columns: EntryColumns, positions: Sequence[int], kinds: Sequence[int]) -> int | None:
    if any(columns.kinds[k].is_p2p or columns.kinds[k].op in COALESCED_TERMINATORS for k in set(kinds)):
        return None
    seqs = columns.collective_seq_id
    if not isinstance(positions, range):
        seqs = list(map(seqs.__getitem__, positions))
    first = seqs[0]
    try:
        consecutive = array("q", seqs) == array("q", range(first, first + len(seqs)))
    except (OverflowError, TypeError):
        return None
    return first if consecutive else None
