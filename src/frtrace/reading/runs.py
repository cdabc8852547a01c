"""Each group name's run of entries in one rank's buffer, made where the dump is read (in the
worker processes), so that the matcher receives them ready: the entries' positions, and for the
common case (each entry one whole collective, seq ids counting up by one) the first seq id and
the kind and state codes in seq order."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import eq
from typing import NamedTuple

from ..analysis.size_rules import COALESCED_TERMINATORS
from ..types import EntryColumns, code_column


class Run(NamedTuple):
    positions: Sequence[int]  # buffer indices of the name's entries, in buffer order
    first_seq: int | None  # None unless each entry is a whole collective and seq ids count up by one
    kinds: Sequence[int]  # the entries' kind codes (bytes when every code fits in one)
    states: Sequence[int]  # the entries' state codes, likewise


def make_runs(columns: EntryColumns) -> dict[str, Run]:
    """Group name -> its run, in the order of the names' first entries."""
    number_of: dict[str, int] = {}
    name_number = [number_of.setdefault(k.pg_name, len(number_of)) for k in columns.kinds]
    count = len(columns)
    if len(number_of) == 1:
        name = next(iter(number_of))
        return {name: Run(range(count), _first_seq(columns, columns.collective_seq_id, range(len(columns.kinds))),
                          columns.kind, columns.state)}  # already code columns: shared, not copied
    if len(number_of) > _MASKED_NAMES:
        return _runs_in_one_pass(columns, number_of, name_number)
    runs: dict[str, Run] = {}
    for name, number in number_of.items():
        codes = [code for code, n in enumerate(name_number) if n == number]  # its kinds (each held by some entry)
        # a 0/1 byte per entry, 1 where the entry is in this group: compress() selects by it in C
        if isinstance(columns.kind, bytes):
            mask = columns.kind.translate(bytes(n == number for n in name_number) + bytes(256 - len(name_number)))
            kinds = columns.kind.translate(None, bytes(c for c, n in enumerate(name_number) if n != number))  # the rest deleted
        else:
            mask = bytes(map(eq, map(name_number.__getitem__, columns.kind), repeat(number)))
            kinds = code_column(compress(columns.kind, mask), len(columns.kinds))
        positions = array("I", compress(range(count), mask))
        if not positions:
            continue
        seqs = list(compress(columns.collective_seq_id, mask))
        runs[name] = Run(positions, _first_seq(columns, seqs, codes),
                         kinds, code_column(compress(columns.state, mask), len(columns.states)))
    return runs


_MASKED_NAMES = 16  # up to this many group names, a C-level pass over the entries per name; past it, one pass in all


def _runs_in_one_pass(columns: EntryColumns, number_of: dict[str, int], name_number: list[int]) -> dict[str, Run]:
    """make_runs for a dump of many group names (50,000 one-op groups in one dump): the entries'
    positions sorted by name in one pass, so the cost stays linear in entries plus kinds."""
    positions = [array("I") for _ in number_of]
    codes: list[list[int]] = [[] for _ in number_of]
    for code, number in enumerate(name_number):
        codes[number].append(code)
    append_to = [p.append for p in positions]
    for position, code in enumerate(columns.kind):
        append_to[name_number[code]](position)
    kinds, states, seq_ids = columns.kind, columns.state, columns.collective_seq_id
    runs: dict[str, Run] = {}
    for name, number in number_of.items():
        where = positions[number]
        if not where:
            continue
        runs[name] = Run(where, _first_seq(columns, [seq_ids[p] for p in where], codes[number]),
                         code_column([kinds[p] for p in where], len(columns.kinds)),
                         code_column([states[p] for p in where], len(columns.states)))
    return runs


def _first_seq(columns: EntryColumns, seqs: Sequence[int], codes: Iterable[int]) -> int | None:
    """The run's first seq id where its entries, of the kinds `codes`, are each a whole collective
    with seq ids counting up by one (8-byte ints); else None."""
    if any(columns.kinds[k].is_p2p or columns.kinds[k].op in COALESCED_TERMINATORS for k in codes):
        return None
    if not isinstance(columns.collective_seq_id, array):  # some seq id of the dump is past 8 bytes, or not an int
        try:
            array("q", seqs)
        except (OverflowError, TypeError):
            return None
    first = seqs[0]
    return first if list(seqs) == list(range(first, first + len(seqs))) else None  # lists compare faster than arrays are made
