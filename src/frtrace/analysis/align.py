"""Alignment: each rank's entries split by group into units, and per group an index of who
issued which collective, by sequence id (never by record_id, a per-process counter).

A member's status for collective #s of a group is one of: issued (its buffer holds it), not
issued (its buffer ends before #s in that group), or unknown (no dump, or #s fell out of its
ring buffer)."""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress, islice, repeat
from operator import attrgetter, itemgetter, ne
from typing import NamedTuple

from . import size_rules
from ..reading import runs
from ..reading.groups import GroupTable
from ..types import Dump, Entry, EntryColumns, Group, Kind, once_per_object, recode, translation_table, wide_tables

_P2P_NAME = re.compile(r"^(send|recv)\s*(\d+)\s*(->|<-)\s*(\d+)")
_RECV_ANY = re.compile(r"^recv\s*(\d+)\s*<-\s*\?")
ANY_SOURCE = -1  # the src of a receive-from-any
_TRACKING_BACKENDS = frozenset({"nccl", "ncclx", "rccl", "xccl", "hccl", "mccl"})


# ------------------------------------------------------------------------------ per-rank views
# A unit is one collective as one rank issued it: a tuple of its entries, one entry or a coalesced
# group's entries ending in the terminator, which carries the group's real state.
UnitEntries = tuple  # tuple[Entry, ...]


def global_rank(group: Group, local_rank: int) -> int | None:
    """The global rank of a group's `local_rank`-th member (send/recv names count in the group)."""
    if 0 <= local_rank < len(group.ranks):
        return group.ranks[local_rank]
    return None


def unit_state(unit: UnitEntries) -> str:
    return unit[-1].state


def unit_ops(unit: UnitEntries) -> tuple[str, ...]:
    return tuple(e.op for e in unit)


def entry_label(entry: Entry, table: GroupTable) -> str:
    """One entry as the reports name it: `all_reduce #7 of tp`, `send 0->1 p2p #2 of pp`."""
    group = table.group_of(entry.rank, entry.pg_name)
    number = f"p2p #{entry.p2p_seq_id}" if entry.is_p2p else f"#{entry.collective_seq_id}"
    return f"{entry.op} {number} of {group.label if group else entry.pg_name}"


def unit_label(unit: UnitEntries) -> str:
    ops = [e.op for e in unit if e.op not in size_rules.COALESCED_TERMINATORS]
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


class P2POp(NamedTuple):
    """A tuple, so that a track's many p2p ops are made in C (_p2p_only); one object per op,
    never copied (the analysis tells them apart by identity)."""

    entries: EntryColumns  # its rank's; the op's entry is built when read (a job holds many p2p ops)
    index: int  # its buffer index
    kind: str  # "send" or "recv"
    src: int  # global ranks
    dst: int
    state: str  # a batched op takes its batch terminator's state
    batched: bool = False  # posted in a batch with other p2p ops: its own state is not recorded

    @property
    def entry(self) -> Entry:
        return self.entries[self.index]

    @property
    def peer(self) -> int:
        return self.dst if self.kind == "send" else self.src


@dataclass(slots=True)
class Track:
    """One rank's ops in one group: its p2p ops in buffer order and its collectives by seq id.

    The common case, one entry per collective with consecutive seq ids, is kept by column:
    `positions` (buffer indices), `kinds` and `states`, one per seq id from first_seq. Anything
    else (coalesced groups, p2p batches, gaps) keeps per seq id its unit's buffer indices in
    `units` and its entries' global kind codes in `unit_kinds`; its entries are built when read."""

    p2p: Sequence[P2POp] = ()  # made whole, never added to: a column track shares the empty one
    first_seq: int | None = None
    last_seq: int = 0
    entries: EntryColumns | None = None
    positions: Sequence[int] = ()
    kinds: Sequence[int] = ()  # global kind codes (Codes.kinds), one per seq id
    states: Sequence[int] = ()  # global state codes (Codes.states)
    units: dict[int, tuple[int, ...]] | None = None  # seq id -> its unit's buffer indices
    unit_kinds: dict[int, tuple[int, ...]] | None = None  # seq id -> its unit's global kind codes

    def _offset(self, seq: int) -> int | None:
        """#seq's place in a column track's columns; None where the track does not hold it."""
        if self.first_seq is None or not self.first_seq <= seq <= self.last_seq:
            return None
        return seq - self.first_seq

    def unit(self, seq: int) -> UnitEntries | None:
        if self.units is not None:
            positions = self.units.get(seq)
            return None if positions is None else tuple(map(self.entries.__getitem__, positions))
        at = self._offset(seq)
        return None if at is None else (self.entries[self.positions[at]],)

    def first_position(self, seq: int) -> int | None:
        """The buffer index of #seq's unit's first entry, without building it; None where the
        track does not hold #seq."""
        if self.units is not None:
            positions = self.units.get(seq)
            return positions[0] if positions else None
        at = self._offset(seq)
        return None if at is None else self.positions[at]

    def kinds_at(self, seq: int) -> tuple[int, ...] | None:
        """The global kind codes of #seq's unit, without building its entries."""
        if self.units is not None:
            return self.unit_kinds.get(seq)
        at = self._offset(seq)
        return None if at is None else (self.kinds[at],)

    def unit_end_states(self) -> dict[int, str]:
        """seq id -> its unit's state (its last entry's), for a track of units."""
        entries = self.entries
        lasts = map(entries.state.__getitem__, map(itemgetter(-1), self.units.values()))
        return dict(zip(self.units, map(entries.states.__getitem__, lasts)))

    def end_state(self, seq: int, codes: "Codes") -> str | None:
        """The state of #seq's unit (its last entry's: a coalesced group's terminator carries it)."""
        if self.units is not None:
            positions = self.units.get(seq)
            return None if positions is None else self.entries.states[self.entries.state[positions[-1]]]
        at = self._offset(seq)
        return None if at is None else codes.states[self.states[at]]


_KNOWN_BACKENDS = _TRACKING_BACKENDS | {"gloo", "c10d", ""}


def unknown_names(dumps: dict[int, Dump]) -> list[str]:
    """Notes on backends and op names frtrace has no rules for; such ops are compared by name only."""
    ops: dict[str, int] = {}
    backends: dict[str, int] = {}
    for rank, dump in dumps.items():
        for kind in dump.entries.kinds:
            if not kind.is_p2p and kind.op not in size_rules.KNOWN_OPS:
                ops.setdefault(kind.op or "(empty name)", rank)
            if kind.backend not in _KNOWN_BACKENDS:
                backends.setdefault(kind.backend, rank)
    notes = []
    if ops:
        notes.append("op names without size rules, compared by name only: "
                     + ", ".join(f"{op!r} (first on rank {r})" for op, r in sorted(ops.items())))
    if backends:
        notes.append("unknown backends, read like NCCL: " + ", ".join(f"{b!r} (rank {r})" for b, r in sorted(backends.items())))
    return notes


def tracks_completion(dump: Dump) -> bool:
    states = dump.entries.states
    return not _TRACKING_BACKENDS.isdisjoint(map(_backend, dump.entries.kinds)) or "completed" in states or "started" in states


class Codes:
    """One code for each distinct kind and state across all dumps, so that the runs of different
    ranks compare as plain bytes (or arrays, past 256 distinct values).

    A kind's code leaves its group's name out: runs are compared only among a group's members,
    who all name it alike (GroupTable maps a rank's name to its group), and what a code is read
    for (op, sizes, dtypes) is the same in every group of the name. So the 512 tensor-parallel
    groups of a job share one code per op, where each would have made its own; then ranks running
    one program get equal maps, and each shared run is recoded once for all of them."""

    def __init__(self, dumps: dict[int, Dump]) -> None:
        kind_ids: dict[Kind, tuple[int, Kind]] = {}  # a kind without its group's name -> (its code, the first kind)
        state_ids: dict[str, tuple[int, str]] = {}
        # ranks share their kinds' and states' tuples (wire.Unpacker): each tuple's map is made once
        kind_maps = _maps({rank: dump.entries.kinds for rank, dump in dumps.items()}, kind_ids, _unnamed)
        state_maps = _maps({rank: dump.entries.states for rank, dump in dumps.items()}, state_ids)
        self.kinds: list[Kind] = [kind for _, kind in kind_ids.values()]
        self.states: list[str] = [state for _, state in state_ids.values()]
        self._kind_maps, self._state_maps = kind_maps, state_maps
        self._tables: dict[int, tuple] = {}  # id of a map -> its bytes.translate table(s)
        self._recodings: dict[tuple[int, int], tuple] = {}  # ids of local codes and map -> (the codes, recoded)
        self._columns: dict[tuple[int, int, int], tuple] = {}  # ids of a run and its maps -> (the run, its track's parts)
        self._present: dict[int, tuple] = {}  # id of a track's kind codes -> (the codes, the distinct ones)
        # every code in a byte: then all tracks compare as bytes, else all as arrays (a dump's own
        # codes may not fit in a byte where the job's do: 300 groups running one op)
        self._narrow = (len(self.kinds) <= 256, len(self.states) <= 256)

    def kind_map(self, rank: int) -> list[int]:
        """The rank's local kind codes -> global ones."""
        return self._kind_maps[rank]

    def kinds_of(self, rank: int, local: Sequence[int]) -> Sequence[int]:
        return self._recoded(local, self._kind_maps[rank], self._narrow[0])

    def states_of(self, rank: int, local: Sequence[int]) -> Sequence[int]:
        return self._recoded(local, self._state_maps[rank], self._narrow[1])

    def column_track(self, rank: int, run: runs.Run, entries: EntryColumns) -> Track:
        """The track of a rank's run of one entry per seq id, its codes made global: each run
        that ranks share (wire.Unpacker) with equal maps recoded once, and found in one look-up."""
        kind_map, state_map = self._kind_maps[rank], self._state_maps[rank]
        key = (id(run), id(kind_map), id(state_map))
        found = self._columns.get(key)
        if found is None or found[0] is not run:
            found = self._columns[key] = (
                run, run.first_seq + len(run.positions) - 1, self._recoded(run.kinds, kind_map, self._narrow[0]),
                self._recoded(run.states, state_map, self._narrow[1]))
        _, last, kinds, states = found
        return Track((), run.first_seq, last, entries, run.positions, kinds, states)  # by position: fewer steps

    def present(self, kinds: Sequence[int]) -> frozenset[int]:
        """The distinct codes of a column of kind codes: made once for each column that tracks
        share (the tensor-parallel groups of a job, each member's, hold one object)."""
        found = self._present.get(id(kinds))
        if found is None or found[0] is not kinds:
            found = self._present[id(kinds)] = (kinds, frozenset(kinds))
        return found[1]

    def _recoded(self, local: Sequence[int], mapping: list[int], narrow: bool) -> Sequence[int]:
        """The local codes mapped: by one translation where every code fits in a byte, else by
        recode; each shared map's tables made once (maps live as long as self), and each shared
        column (wire.Unpacker) recoded once per map (the result is read, never changed)."""
        found = self._recodings.get((id(local), id(mapping)))
        if found is not None and found[0] is local:
            return found[1]
        if narrow and not isinstance(local, bytes):  # more codes of its own than a byte holds, as said in __init__
            recoded = bytes(map(mapping.__getitem__, local))
        else:
            tables = self._tables.get(id(mapping))
            if tables is None:
                tables = self._tables[id(mapping)] = (translation_table(mapping),) if narrow else wide_tables(mapping)
            recoded = local.translate(tables[0]) if narrow else recode(local, mapping, tables)
        self._recodings[(id(local), id(mapping))] = (local, recoded)
        return recoded


_backend = attrgetter("backend")  # of a Kind, read in C
_unnamed = itemgetter(slice(1, None))  # a kind but its group's name (its first field), as a plain tuple


def _maps(values_of: dict[int, tuple], ids: dict, key: Callable = lambda value: value) -> dict[int, list[int]]:
    """Rank -> its local codes' global ones (new values numbered in `ids` by `key`, each keeping
    the first value of its key), made once for each tuple that ranks share; equal maps are one
    list. Each value object is keyed once: where no two ranks' tuples are one (a kind names its
    group), ranks still share each kind (wire.Unpacker), and a kind's key hashes its sizes."""
    lists: dict[tuple, list[int]] = {}
    code_of: dict[int, int] = {}  # id of a value met -> its code (the values outlive this call)

    def codes(values: tuple) -> list[int]:
        made = list(map(code_of.get, map(id, values)))
        if None in made:
            made = [ids.setdefault(key(v), (len(ids), v))[0] if code is None else code for v, code in zip(values, made)]
            code_of.update(zip(map(id, values), made))
        return lists.setdefault(tuple(made), made)

    return once_per_object(values_of, codes)


def build_tracks(dump: Dump, table: GroupTable, codes: Codes, cut: dict | None = None) -> tuple[dict[Group, Track], list[str]]:
    """Split one rank's entries by group into tracks: by column where each collective is one
    entry with the next seq id, else into units (coalesced groups joined) and p2p ops. `cut`:
    runs already cut into units, shared by the ranks whose runs are alike (see _consecutive_units)."""
    notes: list[str] = []
    tracks: dict[Group, Track] = {}
    columns = dump.entries
    rank = dump.rank
    group_of = table.by_rank.get
    if columns.runs is None:
        columns.runs = runs.make_runs(columns)
    for name, run in columns.runs.items():
        group = group_of((rank, name))
        if group is None:
            continue
        at = bisect_left(group.ranks, rank)
        member = at < len(group.ranks) and group.ranks[at] == rank  # else a config naming a group without it
        if member and run.first_seq is not None:
            track = codes.column_track(rank, run, columns)
        else:
            track = _unit_track(rank, group, columns, run, member, notes, codes.kind_map(rank), cut)
        if track is not None:
            tracks[group] = track
    return tracks, notes


def _unit_track(rank: int, group: Group, columns: EntryColumns, run: runs.Run, member: bool,
                notes: list[str], kind_map: list[int], cut: dict | None = None) -> Track | None:
    """The track of a group's entries one by one, read from the columns: coalesced groups joined
    into units, p2p ops parsed (once per kind), a p2p batch's terminator giving the batch its
    state. Only the p2p ops' entries are built here."""
    terminators = size_rules.COALESCED_TERMINATORS
    kinds = columns.kinds
    positions = run.positions
    present = set(run.kinds)
    if not any(kinds[code].is_p2p for code in present):  # collectives only: no p2p op, no batch
        if not member:
            return None
        found = _consecutive_units(columns, run, kind_map, cut, present)
        if found is not None:
            track = Track(entries=columns, units=found[0], unit_kinds=found[1])
            track.first_seq, track.last_seq = next(iter(track.units)), max(track.units)
            return track
    elif all(kinds[code].is_p2p for code in present):  # p2p ops only: no collective, no batch
        found = _p2p_only(group, columns, run, present)
        if found is not None:
            return Track(entries=columns, units={}, unit_kinds={}, p2p=found)
    by_seq: dict[int, list[int]] = {}
    p2p: list[tuple[int, str, int, int]] = []  # (buffer index, send or recv, src, dst)
    parsed_of: dict[int, tuple[str, int, int] | None] = {}  # kind code -> what its name says
    batch_state: dict[int, str] = {}
    last_coll: int | None = None
    prev_was_p2p = False
    for position in positions:
        code = columns.kind[position]
        kind = kinds[code]
        if kind.is_p2p:
            if code not in parsed_of:
                parsed_of[code] = _p2p_ends(kind.op, group)
            parsed = parsed_of[code]
            if parsed is None:
                notes.append(f"rank {rank}: p2p op {kind.op!r} in {group.label} names no rank of the group; not matched")
            else:
                p2p.append((position, *parsed))
            prev_was_p2p = True
            continue
        seq = columns.collective_seq_id[position]
        if kind.op in terminators and prev_was_p2p and seq == (seq if last_coll is None else last_coll):
            # ends a batch of p2p ops: its collective seq id was not bumped
            batch_state[columns.p2p_seq_id[position]] = columns.states[columns.state[position]]
            prev_was_p2p = False
            continue
        by_seq.setdefault(seq, []).append(position)
        last_coll = seq
        prev_was_p2p = False

    if not (member and by_seq) and not p2p:
        return None
    track = Track(entries=columns, units={}, unit_kinds={})
    if member and by_seq:
        track.first_seq = next(iter(by_seq))
        track.last_seq = max(by_seq)
        code_of = kind_map.__getitem__
        track.units = {seq: tuple(unit) for seq, unit in by_seq.items()}
        track.unit_kinds = {seq: tuple(map(code_of, map(columns.kind.__getitem__, unit))) for seq, unit in by_seq.items()}
    batch_sizes = Counter(seq for seq in map(columns.p2p_seq_id.__getitem__, (p[0] for p in p2p)) if seq in batch_state)
    track.p2p = [P2POp(columns, position, kind, src, dst,
                       batch_state.get(columns.p2p_seq_id[position], columns.states[columns.state[position]]),
                       batch_sizes[columns.p2p_seq_id[position]] > 1)
                 for position, kind, src, dst in p2p]
    return track


def _consecutive_units(columns: EntryColumns, run: runs.Run, kind_map: list[int], cut: dict | None = None,
                       present: Iterable[int] = ()) -> tuple[dict, dict] | None:
    """A run of collectives as units (seq id -> its entries' buffer indices, and their global kind
    codes) where each unit's entries are next to each other in the run and no seq id comes back
    after another's: cut where the seq id changes, by C-level passes. None otherwise.

    The ranks of a job nearly all hold the same ops in the same places: where `cut` is given, a
    run is cut once for every rank whose run, seq ids and global codes of the kinds `present` in
    the run (the caller's set of its kind codes, or found here) are the same (its key, the
    columns' bytes, costs a tenth of the cutting), and they share its units, which nobody changes."""
    key = None
    positions = run.positions  # an array, or a range where the run is the dump's only group
    if cut is not None and isinstance(columns.collective_seq_id, array) and isinstance(positions, (array, range)):
        kinds = run.kinds if isinstance(run.kinds, bytes) else (run.kinds.typecode, run.kinds.tobytes())
        places = positions.tobytes() if isinstance(positions, array) else (positions.start, positions.stop, positions.step)
        key = (kinds, places, columns.collective_seq_id.typecode, columns.collective_seq_id.tobytes(),
               tuple((code, kind_map[code]) for code in sorted(present or set(run.kinds))))
        if key in cut:
            return cut[key]
    found = _cut_into_units(columns, run, kind_map)
    if key is not None:
        cut[key] = found
    return found


def _cut_into_units(columns: EntryColumns, run: runs.Run, kind_map: list[int]) -> tuple[dict, dict] | None:
    seqs = list(map(columns.collective_seq_id.__getitem__, run.positions))
    starts = [0, *compress(range(1, len(seqs)), map(ne, islice(seqs, 1, None), seqs))]
    firsts = list(map(seqs.__getitem__, starts))
    if len(set(firsts)) != len(firsts):
        return None
    ends = [*islice(starts, 1, None), len(seqs)]
    positions, codes = tuple(run.positions), tuple(map(kind_map.__getitem__, run.kinds))
    units = dict(zip(firsts, map(positions.__getitem__, map(slice, starts, ends))))
    unit_kinds = dict(zip(firsts, map(codes.__getitem__, map(slice, starts, ends))))
    return units, unit_kinds


_new_p2p = partial(tuple.__new__, P2POp)  # P2POp from a tuple of its fields, in C


def _p2p_only(group: Group, columns: EntryColumns, run: runs.Run, present: set[int]) -> list[P2POp] | None:
    """The p2p ops of a run that holds nothing else (no batch terminator: none is batched), made
    by C-level passes from its kinds' (`present`: the run's kind codes) ends; None where a kind's
    name names no rank of the group (the entry-by-entry reading says so of each such op)."""
    ends_of = {code: _p2p_ends(columns.kinds[code].op, group) for code in present}
    if None in ends_of.values():
        return None
    kinds, sources, destinations = zip(*map(ends_of.__getitem__, run.kinds))
    states = map(columns.states.__getitem__, run.states)
    return list(map(_new_p2p, zip(repeat(columns), run.positions, kinds, sources, destinations, states, repeat(False))))


def _p2p_ends(op: str, group: Group) -> tuple[str, int, int] | None:
    """("send" or "recv", global src, global dst) of a p2p op's name; None when it names no
    rank of the group."""
    parsed = _P2P_NAME.match(op)
    if parsed:
        kind, a, arrow, b = parsed.group(1), int(parsed.group(2)), parsed.group(3), int(parsed.group(4))
        local_src, local_dst = (a, b) if arrow == "->" else (b, a)
        src, dst = global_rank(group, local_src), global_rank(group, local_dst)
    elif (any_source := _RECV_ANY.match(op)) is not None:  # "recv 3<-?": from whoever sends
        kind, src, dst = "recv", ANY_SOURCE, global_rank(group, int(any_source.group(1)))
    else:
        return None
    return None if src is None or dst is None else (kind, src, dst)


def _holders(columns: list[tuple[int, Track]]) -> dict[tuple[int, int], tuple[int, Track]]:
    """Each distinct range (first and last seq id) of the column tracks (rank, track, in rank
    order) -> its lowest-ranked holder."""
    lowest: dict[tuple[int, int], tuple[int, Track]] = {}
    for rank, track in columns:
        lowest.setdefault((track.first_seq, track.last_seq), (rank, track))
    return lowest


def _lowest_holders(lowest: dict[tuple[int, int], tuple[int, Track]], first: int, count: int) -> list[tuple[int, Track] | None]:
    """Per seq id from `first` (`count` of them), the lowest-ranked column track holding it
    (`lowest`: _holders), None where none does: each distinct range written once, by C-level
    slices, the lower ranks last."""
    owners: list[tuple[int, Track] | None] = [None] * count
    for (start, last), item in sorted(lowest.items(), key=lambda pair: -pair[1][0]):
        a, b = max(start - first, 0), min(last - first + 1, count)
        if a < b:
            owners[a:b] = [item] * (b - a)
    return owners


def _range_ends(ranges: Iterable[tuple[int, int]], first: int, count: int) -> list[int]:
    """The places (from `first`, within 0..count) where a column track's range (first and last
    seq id) starts or ends past its last seq id, in order: where _lowest_holders' owner may change."""
    ends = set()
    for start, last in ranges:
        ends.update((min(max(start - first, 0), count), min(max(last - first + 1, 0), count)))
    return sorted(ends)


class _Spread:
    """What a group's column tracks hold, over every seq id any of them holds (from `first`):
    per seq id the kind and state code of its holders (None where none holds it), the places
    where two holders differ in kind or in state, and the lowest-ranked holder.

    Where dumps were taken at different moments each member holds a range of its own, and most of
    a group's seq ids are held by some members only: checked one at a time, each asked every track
    (thousands) where this answers it at once. Made by C-level slices: tracks by first seq id, each
    compared with what the ones before it cover and adding what they do not (the covered seq ids
    are one run from the first track's on, or several where ranges leave gaps)."""

    def __init__(self, columns: list[tuple[int, Track]]) -> None:
        self.first = min((t.first_seq for _, t in columns), default=0)
        last = max((t.last_seq for _, t in columns), default=-1)
        count = last - self.first + 1
        self.kinds: list[int | None] = [None] * count
        self.states: list[int | None] = [None] * count
        self.odd_kinds: set[int] = set()
        self.odd_states: set[int] = set()
        covered_to = -1  # the covered run's end (exclusive), of the places from the first
        for _, track in sorted(columns, key=lambda item: item[1].first_seq):
            start, end = track.first_seq - self.first, track.last_seq - self.first + 1
            split = min(max(covered_to, start), end)  # start..split: covered already; split..end: not
            if split > start:
                self._compare(start, track.kinds[:split - start], self.kinds, self.odd_kinds)
                self._compare(start, track.states[:split - start], self.states, self.odd_states)
            self.kinds[split:end] = track.kinds[split - start:]
            self.states[split:end] = track.states[split - start:]
            covered_to = max(covered_to, end)
        self.owners = _lowest_holders(_holders(columns), self.first, count)

    @staticmethod
    def _compare(start: int, held: Sequence[int], spread: list, odd: set[int]) -> None:
        mine = list(held)
        if spread[start:start + len(mine)] != mine:
            odd.update(start + i for i, (a, b) in enumerate(zip(spread[start:start + len(mine)], mine)) if a != b)


class GroupView:
    """Everything known about one group: each member's track and status per sequence id.

    Members' column tracks are compared slice by slice at C speed against one reference track;
    a seq id where every issuer holds the reference's kind, with no size rule broken, is
    `agreed`, and needs no check entry by entry."""

    def __init__(self, group: Group, tracks: dict[int, Track], dumps: dict[int, Dump], codes: Codes,
                 own_numbers: bool = True, unseen: frozenset[int] = frozenset()) -> None:
        self.group = group
        self.own_numbers = own_numbers  # False: #n counts from the oldest op held (anchor.py), not comparable with siblings
        self.codes = codes
        self.tracks = tracks  # in rank order
        self.size = len(group.ranks)
        self.known_last: dict[int, int] = {}  # members whose status past their last op is known
        self.unknown: set[int] = set()
        # members whose dump says nothing of the end (moments.py: dumped earlier than their
        # peers, or their recorder was off): never counted as not having issued an op, nor awaited
        self.unseen = unseen.intersection(group.ranks) if unseen else frozenset()
        for rank in group.ranks:
            dump = dumps.get(rank)
            track = tracks.get(rank)
            if rank in self.unseen:
                continue
            if dump is None:
                self.unknown.add(rank)
            elif track is not None and track.first_seq is not None:
                self.known_last[rank] = track.last_seq
            elif not dump.wrapped:
                self.known_last[rank] = 0
            else:
                self.unknown.add(rank)
        self.cut: dict[int, int] = {}  # a wrapped buffer's first unit may be a cut coalesced group
        self._collective: list[tuple[int, Track]] = []  # (rank, track) of the members holding collectives
        columns: list[tuple[int, Track]] = []  # ... of those, the tracks by column; the others' are of units
        unit_seqs: set[int] = set()  # seq ids some unit track holds
        for rank, track in tracks.items():
            if track.first_seq is None:
                continue
            self._collective.append((rank, track))
            if track.units is None:
                columns.append((rank, track))
                first = track.positions[0]
            else:
                unit_seqs.update(track.units)
                first = track.first_position(track.first_seq)
            if first is None or first == 0:  # the buffer's oldest entry: what came before it is gone, where it wrapped
                dump = dumps.get(rank)
                if dump is not None and dump.wrapped:
                    self.cut[rank] = track.first_seq
        self._lasts = sorted(zip(self.known_last.values(), self.known_last))  # (last, rank), by zip: no Python step a member
        self._last_values = sorted(self.known_last.values())  # sorted apart: read out of _lasts, they counted more instructions
        self._fine_codes: dict[int, bool] = {}
        self._spread: _Spread | None = None  # made when asked past SPREAD_AFTER times (_agreed_at)
        self._asked = 0
        # where every issuer's track is one of units (a coalesced group): their seq id -> kind codes
        # and seq id -> end state dicts, looked up for all of them at once by a C-level map
        self._unit_kinds: list[dict] | None = None
        self._unit_states: list[dict] | None = None
        if self._collective and not columns:
            self._unit_kinds = [t.unit_kinds for _, t in self._collective]
        self._by_column = len(columns) == len(self._collective)  # no member's track is of units
        self._compare_columns(columns, unit_seqs)

    def _compare_columns(self, columns: list[tuple[int, Track]], unit_seqs: set[int]) -> None:
        self.reference: Track | None = None
        self.disputed: set[int] = set()  # seq ids of the reference's range that need the check entry by entry
        self.mixed_states: set[int] = set()  # seq ids some issuer of which is in another state than the reference
        self._unit_seqs: set[int] = set()  # seq ids some unit track holds
        holders = _holders(columns)  # the column tracks' distinct ranges, each with its lowest-ranked holder
        self._ranges = sorted(holders)
        if not columns:
            return
        # the longest range's lowest holder (a longest track of the lowest rank: each range's is its lowest)
        self._reference_holder = max(holders.values(), key=lambda item: (item[1].last_seq - item[1].first_seq, -item[0]))
        ref = self.reference = self._reference_holder[1]
        disputed = self.disputed
        ref_first, ref_last, ref_kinds, ref_states = ref.first_seq, ref.last_seq, ref.kinds, ref.states
        for _, track in columns:  # (no min() or max() of two per member: each parses its arguments, 0.3 us)
            first = track.first_seq
            if first == ref_first and track.kinds is ref_kinds and track.states is ref_states:
                continue  # one column object (wire.Unpacker, Codes) from one seq id: nothing differs (nor for ref itself)
            last = track.last_seq  # outside the reference's range nothing is agreed
            lo, hi = first if first > ref_first else ref_first, last if last < ref_last else ref_last
            if lo > hi:
                continue
            mine, theirs = slice(lo - first, hi - first + 1), slice(lo - ref_first, hi - ref_first + 1)
            if track.kinds[mine] != ref_kinds[theirs]:
                disputed.update(lo + i for i, (a, b) in enumerate(zip(track.kinds[mine], ref_kinds[theirs])) if a != b)
            if track.states[mine] != ref_states[theirs]:
                self.mixed_states.update(lo + i for i, (a, b) in enumerate(zip(track.states[mine], ref_states[theirs])) if a != b)
        self._unit_seqs = unit_seqs
        disputed.update(unit_seqs)
        disputed.update(self.cut.values())
        self._agreed = self._agreed_flags()
        count = ref_last - ref_first + 1
        # per seq id its lowest holder, where the tracks hold several ranges: with one (a group of
        # ranks dumped together) its lowest holder, the reference's, holds every one (no list made)
        self._owner = _lowest_holders(holders, ref_first, count) if len(holders) > 1 else None
        self._owner_cuts = _range_ends(self._ranges, ref_first, count)

    def agreed(self, seq: int) -> bool:
        """Every issuer of #seq holds one kind, which breaks no size rule: the check has nothing to find."""
        ref = self.reference
        return ref is not None and ref.first_seq <= seq <= ref.last_seq and self._agreed[seq - ref.first_seq] == 1

    def agreed_through(self, seq: int) -> int:
        """The last seq id of the run from #seq on that is agreed and issued by every member
        whose status is known (not_issued is empty): found with bytes.find, not seq by seq;
        seq - 1 where #seq is not such."""
        ref = self.reference
        if ref is None or not ref.first_seq <= seq <= ref.last_seq or not self._agreed[seq - ref.first_seq]:
            return seq - 1
        end = self._agreed.find(0, seq - ref.first_seq)
        last = ref.last_seq if end < 0 else ref.first_seq + end - 1
        return min(last, self._last_values[0]) if self._last_values else last

    def _agreed_flags(self) -> bytearray:
        """Per seq id of the reference's range, 1 where agreed: its kind breaks no rule (found for
        the whole range at once with bytes.translate), it is not disputed."""
        ref = self.reference
        ok = bytearray(256 if isinstance(ref.kinds, bytes) else len(self.codes.kinds))
        for code in self.codes.present(ref.kinds):
            kind = self.codes.kinds[code]
            ok[code] = size_rules.own_size_problem(kind, self.size) is None and not size_rules.is_all_to_all(kind.op)
        if isinstance(ref.kinds, bytes):
            flags = bytearray(ref.kinds.translate(ok))
        else:
            flags = bytearray(map(ok.__getitem__, ref.kinds))
        for seq in self.disputed:
            if ref.first_seq <= seq <= ref.last_seq:
                flags[seq - ref.first_seq] = 0
        return flags

    def owners(self, first: int, last: int) -> Iterator[tuple[int, Track, int, int]]:
        """Agreed seq ids first..last, split where their lowest issuing rank changes:
        (rank, its track, first seq id, last seq id) per part."""
        base = self.reference.first_seq
        start, end = first - base, last - base + 1
        if start >= end:
            return
        if self._owner is None:  # one range: its holder, the reference's
            rank, track = self._reference_holder
            yield rank, track, first, last
            return
        # the lowest holder changes only where some track's range starts or ends: looked at there
        # alone, not at every seq id (a group of ranks dumped together holds one range)
        cuts = self._owner_cuts
        owner = self._owner
        held = owner[start]
        for at in (*cuts[bisect_right(cuts, start):bisect_left(cuts, end)], end):
            if at < end and owner[at] is held:
                continue
            rank, track = held
            yield rank, track, start + base, at - 1 + base
            start = at
            held = owner[at] if at < end else None

    def alike(self, seq: int) -> bool:
        """Every issuer of #seq holds the same kinds in the same order, none of them breaking a
        size rule by itself (nor an all_to_all, whose sizes add up across the group): what
        `agreed` says of a single entry, said of units of several (coalesced groups) from their
        kind codes, so that no entry is built. False where the check entry by entry must look."""
        if self._unit_kinds is not None:
            held = set(map(dict.get, self._unit_kinds, repeat(seq)))
            held.discard(None)
            return len(held) == 1 and all(map(self._fine, held.pop()))
        at = self._agreed_at(seq)
        if at is not None:
            return self._fine(self._spread.kinds[at])
        found = None
        for _, track in self._collective:
            kinds = track.kinds_at(seq)
            if kinds is None:
                continue
            if found is None:
                found = kinds
            elif kinds != found:
                return False
        return found is not None and all(map(self._fine, found))

    # questions answered by asking each issuer before the spread is made: a group asked of a seq
    # id or two (a healthy job's last op) costs a pass over its tracks, not the spread of all they hold
    SPREAD_AFTER = 16

    def _agreed_at(self, seq: int) -> int | None:
        """#seq's place in the spread (_spread) where every issuer holds it alike: no unit track
        holds it, and the column tracks that do hold one kind (their states the caller checks).
        None otherwise: the issuers must be asked one by one. (A wrapped buffer's first seq id,
        disputed for the check, is answered here too: these answers ask the same of every holder.)"""
        if self._spread is None:
            self._asked += 1
            if self._asked <= self.SPREAD_AFTER:
                return None
            self._spread = _Spread([(r, t) for r, t in self._collective if t.units is None])
        spread = self._spread
        at = seq - spread.first
        if not 0 <= at < len(spread.kinds) or spread.kinds[at] is None or at in spread.odd_kinds or seq in self._unit_seqs:
            return None
        return at

    def _fine(self, code: int) -> bool:
        fine = self._fine_codes.get(code)
        if fine is None:
            kind = self.codes.kinds[code]
            fine = self._fine_codes[code] = (size_rules.own_size_problem(kind, self.size) is None
                                              and not size_rules.is_all_to_all(kind.op))
        return fine

    def lowest_issuer(self, seq: int) -> tuple[int, UnitEntries] | None:
        """The lowest-ranked issuer of #seq and its unit; None if nobody issued it."""
        at = self._agreed_at(seq)
        if at is not None:
            rank, track = self._spread.owners[at]
            return rank, track.unit(seq)
        for rank, track in self._collective:
            unit = track.unit(seq)
            if unit is not None:
                return rank, unit
        return None

    def end_states(self, seq: int) -> set[str]:
        """The states #seq's issuers hold it in (a unit's state is its last entry's)."""
        if self._unit_kinds is not None:
            if self._unit_states is None:
                self._unit_states = [track.unit_end_states() for _, track in self._collective]
            held = set(map(dict.get, self._unit_states, repeat(seq)))
            held.discard(None)
            return held
        at = self._agreed_at(seq)
        if at is not None and at not in self._spread.odd_states:  # every issuer in one state
            return {self.codes.states[self._spread.states[at]]}
        return {state for _, track in self._collective if (state := track.end_state(seq, self.codes)) is not None}

    def unit(self, seq: int, rank: int) -> UnitEntries | None:
        track = self.tracks.get(rank)
        return track.unit(seq) if track is not None else None

    def issuers(self, seq: int) -> dict[int, UnitEntries]:
        found = {}
        for rank, track in self._collective:
            unit = track.unit(seq)
            if unit is not None:
                found[rank] = unit
        return found

    def not_issued(self, seq: int) -> tuple[int, ...]:
        if not self._last_values or seq <= self._last_values[0]:
            return ()
        count = bisect_left(self._last_values, seq)
        return tuple(sorted(rank for _, rank in self._lasts[:count])) if count else ()

    def seqs(self) -> Sequence[int]:
        """Every seq id some issuer holds, in order: a range where the column tracks' ranges
        leave no gap and no unit track adds any (a group's tracks mostly hold one range)."""
        ranges = self._ranges
        if ranges and self._by_column:
            first, last = ranges[0]
            for start, end in ranges[1:]:
                if start > last + 1:
                    break
                last = max(last, end)
            else:
                return range(first, last + 1)
        found: set[int] = set()
        for first, last in ranges:
            found.update(range(first, last + 1))
        for _, track in self._collective:
            if track.units is not None:
                found.update(track.units)
        return sorted(found)


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


def by_number(ranks, one: str, several: str) -> str:
    """The form that agrees with a list of ranks: by_number([3], "waits", "wait") -> "waits"."""
    return one if len(ranks) == 1 else several


MAX_RANK_RUNS = 8  # runs of consecutive ranks said in words; a thousand scattered ones are counted


def ranks_word(ranks: Iterable[int]) -> str:
    """"rank 3", "ranks 0-2,5", or past MAX_RANK_RUNS runs the first ones and a count, "ranks
    0,8,16,24,32,40,48,56,... (128 ranks)": a sentence stays a sentence at any scale (the JSON
    lists them all)."""
    ranks = sorted(set(ranks))
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs = format_ranks(ranks).split(",")
    if len(runs) <= MAX_RANK_RUNS:
        return f"ranks {','.join(runs)}"
    return f"ranks {','.join(runs[:MAX_RANK_RUNS])},... ({len(ranks)} ranks)"
