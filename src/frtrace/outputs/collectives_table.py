"""The database's collectives table, one row per aligned collective, built by column.

Runs of agreed collectives (every issuer holds the same kind, see GroupView.agreed) are added a
run at a time, as blocks of the lowest issuer's columns; the others row by row from their
entries, with the majority as the reference."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import repeat

from ..analysis import size_rules
from ..database import MATCH_STATE_OF_FINDING, BlockCodes, Collective, MatchInfo, MatchState, pg_desc, profiling_name
from ..types import AgreedRun, Checks, CollectiveCheck, Dump, Group, code_column


def _picked(column, positions):
    """A column's items at `positions` (ascending): a slice where they follow each other."""
    if positions[-1] - positions[0] == len(positions) - 1:
        return column[positions[0]:positions[-1] + 1]
    found = map(column.__getitem__, positions)
    return array(column.typecode, found) if isinstance(column, array) else list(found)


class CollectiveColumns:
    """The collectives table's columns, filled check by check (or run by run), and what the
    ncclcalls table needs to point at its rows: (group id, seq) -> row id, and each group's span.

    A column is kept as blocks of (codes, values) (database.BlockCodes): a run of agreed
    collectives adds one block per column, a value repeated (codes all zero), a kind per row
    (its kind codes, a copy of the reference's), or a slice of the issuers' own columns; checks
    added one by one gather in lists that become a block when the next run comes. At 4,096 ranks
    (416,400 collectives) a row each in 18 lists took 0.2 s to fill and 25 MB of the pickle."""

    def __init__(self, dumps: dict[int, Dump], ids: dict[Group, str], shared) -> None:
        self.dumps = dumps
        self.ids = ids
        self.shared = shared  # one list object per distinct shape list and stack
        self.rows = 0
        self.blocks: list[list[tuple]] = [[] for _ in Collective._fields[1:]]  # per field after the id (ids are row numbers)
        self._loose: list[list] = [[] for _ in Collective._fields[1:]]  # rows added one by one since the last block
        self.spans: dict[Group, list] = {}  # group -> [first collective id, first seq, last seq, view]
        self._stretches: dict[str, list[tuple[int, int, int]]] = {}  # group id -> (first seq, its id, count) per stretch added
        self._collective_of: dict[tuple[str, int], int] | None = None
        self._expected: dict[Group, frozenset] = {}
        self._shown: dict[tuple, tuple] = {}  # (op, input sizes, output sizes) -> their columns
        self._other_seqs: dict[int, list[int]] = {}  # id(view) -> its seq ids with other states, sorted
        self._by_code: list[list] | None = None  # see _display; every view shares one Codes
        self._states: list[str] | None = None  # every view's state codes' values, then "mixed"
        self._shown_states: list[list[str]] = []  # [self._states], as _run_blocks reads it
        self._ids_of: dict[int, list] = {}  # id of a record id column holding None (self.dumps keeps it) -> its values with -1
        self._issued_of: dict[tuple, tuple] = {}  # see _issued
        self._zeros: dict[int, bytes] = {}  # n -> n zero codes
        self._constants: dict[tuple, tuple] = {}  # see _held_by_all
        self._runs_shown: dict[tuple, tuple] = {}  # see _run_blocks

    def add(self, checks: Checks) -> None:
        """Add the checks of the analysis, in order."""
        for part in checks.parts:
            if type(part) is AgreedRun:
                self._add_agreed(part.group, part.source, part.first, part.last, ())
            elif part.agreed:
                self._add_agreed(part.group, part.source, part.collective_seq_id, part.collective_seq_id, part.missing_ranks)
            else:
                self._add_one(part)

    def columns(self) -> list:
        """The table's columns: the ids, then a BlockCodes per field."""
        self._close_loose()
        return [range(self.rows), *map(BlockCodes, self.blocks)]

    def _close_loose(self) -> None:
        if self._loose[0]:
            for blocks, values in zip(self.blocks, self._loose):
                blocks.append((range(len(values)), values))
            self._loose = [[] for _ in Collective._fields[1:]]

    def _shown_of(self, name: str, input_sizes: tuple, output_sizes: tuple) -> tuple:
        key = (name, input_sizes, output_sizes)
        found = self._shown.get(key)
        if found is None:
            found = self._shown[key] = (name, self.shared.shape_list(input_sizes), self.shared.shape_list(output_sizes),
                                        size_rules.numel(input_sizes), size_rules.numel(output_sizes))
        return found

    def _group(self, group: Group, first_seq: int, last_seq: int, view, count: int) -> tuple[str, frozenset, int]:
        """The group's id and rank set, and the id of the first of `count` new rows."""
        first_id = self.rows
        self.rows += count
        span = self.spans.get(group)
        if span is None:
            self.spans[group] = [first_id, first_seq, last_seq, view]
        else:
            span[2] = last_seq
        expected = self._expected.get(group)
        if expected is None:
            expected = self._expected[group] = frozenset(group.ranks)
        group_id = self.ids[group]
        self._stretches.setdefault(group_id, []).append((first_seq, first_id, count))
        return group_id, expected, first_id

    @property
    def collective_of(self) -> dict[tuple[str, int], int]:
        """(group id, seq) -> collective id, made when first asked for (only ranks whose calls do
        not follow their seq ids need it: a dict entry per collective, 0.4 s at 4,096 ranks)."""
        if self._collective_of is None:
            made = self._collective_of = {}
            for group_id, stretches in self._stretches.items():
                for first_seq, first_id, count in stretches:
                    made.update(zip(zip(repeat(group_id), range(first_seq, first_seq + count)), range(first_id, first_id + count)))
        return self._collective_of

    def _add_agreed(self, group: Group, view, first: int, last: int, missing: tuple[int, ...]) -> None:
        """Seq ids first..last of a group, each agreed, `missing` lacking from every one: a block per column."""
        n = last - first + 1
        group_id, expected, _ = self._group(group, first, last, view, n)
        self._close_loose()
        (group_ids, passed, seqs, p2p_seqs, record_ids, descs, names, input_sizes, output_sizes, expected_ranks,
         states, frames, input_numels, output_numels, missing_ranks, mismatched, mismatch) = self.blocks
        for column, value in ((group_ids, group_id), (passed, not missing), (descs, pg_desc(group.name, group.desc)),
                              (expected_ranks, expected), (missing_ranks, frozenset(missing) or None),
                              (mismatched, None), (mismatch, None)):
            column.append(self._held_by_all(n, value))
        seqs.append((range(n), range(first, last + 1)))
        for rank, track, a, b in view.owners(first, last):
            entries = track.entries
            positions, codes, distinct = self._issued(track, a, b)
            # the issuer's own columns, read at its positions: a pickle writes each column once
            p2p_seqs.append((positions, entries.p2p_seq_id))
            record_ids.append((positions, self._record_ids(entries.record_id)))
            frames.append((codes, [self.shared.frame_list(self.dumps[rank], s) for s in distinct]))
        ref, codes = view.reference, view.codes
        start, end = first - ref.first_seq, last - ref.first_seq + 1
        for column, block in zip((names, input_sizes, output_sizes, input_numels, output_numels),
                                 self._run_blocks(ref.kinds, start, end, self._display(codes))):
            column.append(block)
        if self._states is None:
            self._states = [*codes.states, "mixed"]
            self._shown_states = [self._states]
        others = self._other_seqs.get(id(view))
        if others is None:
            others = self._other_seqs[id(view)] = sorted(view.mixed_states)
        mixed = others[bisect_left(others, first):bisect_right(others, last)]
        if mixed:  # some issuer is in another state than the reference's
            run_states = array("i", list(ref.states[start:end]))  # bytes where codes fit in one, and "mixed" may not
            for seq in mixed:
                run_states[seq - first] = len(self._states) - 1
            states.append((run_states, self._states))
        else:
            states.extend(self._run_blocks(ref.states, start, end, self._shown_states))

    def _held_by_all(self, n: int, value) -> tuple:
        """The block of `n` rows that all hold `value`: (n zero codes, [value]), one object for
        every run of that length and value (most groups' runs hold True, None, and are of one
        length where their ranks run one program), which a pickle then writes once."""
        key = (n, type(value), value)  # typed: 1 and True are equal
        found = self._constants.get(key)
        if found is None:
            zeros = self._zeros.get(n)
            if zeros is None:
                zeros = self._zeros[n] = bytes(n)
            found = self._constants[key] = (zeros, [value])
        return found

    def _run_blocks(self, column, start: int, end: int, shown: list[list]) -> list[tuple]:
        """(column[start:end], values) for each list of values in `shown` (self keeps it): one
        slice and its blocks for the runs of every group whose reference holds the same column
        (Codes recodes each shared column once: a job's tensor-parallel groups share one), kept
        with the column so that no id is reused."""
        key = (id(column), start, end, id(shown))
        found = self._runs_shown.get(key)
        if found is None:
            part = column[start:end]
            found = self._runs_shown[key] = (column, [(part, values) for values in shown])
        return found[1]

    def _issued(self, track, first: int, last: int) -> tuple:
        """The buffer positions of seq ids first..last in the track, and their stack ids as codes
        of their distinct values with those values: made once for the issuers whose columns
        are the same objects (wire.Unpacker; self.dumps keeps them, so no id is reused), and
        then one object in the database's pickle."""
        start, end = first - track.first_seq, last - track.first_seq
        key = (id(track.positions), id(track.entries.stack_id), start, end)
        found = self._issued_of.get(key)
        if found is None:
            positions = track.positions[start:end + 1]
            stacks = _picked(track.entries.stack_id, positions)
            distinct = list(set(stacks))
            number = dict(zip(distinct, range(len(distinct))))
            found = self._issued_of[key] = (positions, code_column(map(number.__getitem__, stacks), len(distinct)), distinct)
        return found

    def _record_ids(self, column):
        """A dump's record ids, -1 for none (where one was None the column is a tuple: made once)."""
        if isinstance(column, array):
            return column
        found = self._ids_of.get(id(column))
        if found is None:
            found = self._ids_of[id(column)] = [-1 if r is None else r for r in column]
        return found

    def _display(self, codes) -> list[list]:
        """Per global kind code, what its rows show: name, sizes (shared lists), numels; by column."""
        if self._by_code is None:
            shown = [self._shown_of(profiling_name(k.backend, k.op), k.input_sizes, k.output_sizes) for k in codes.kinds]
            self._by_code = [list(column) for column in zip(*shown)] if shown else [[] for _ in range(5)]
        return self._by_code

    def _add_one(self, check: CollectiveCheck) -> None:
        if check.mismatch is None:  # every issuer agreed: the lowest is the reference, nobody else's entries are read
            lowest = check.source.lowest_issuer(check.collective_seq_id) if check.source is not None else None
            if lowest is None:
                return
            reference_rank, unit = lowest
            states = check.source.end_states(check.collective_seq_id)
            entries, differing = {}, ()
        else:
            entries = check.entries
            if not entries:
                return
            signature_of = {r: tuple((e.op, e.input_sizes, e.output_sizes, e.input_dtypes) for e in unit)
                            for r, unit in entries.items()}
            reference = Counter(signature_of.values()).most_common(1)[0][0]
            reference_rank = min(r for r, sig in signature_of.items() if sig == reference)
            differing = [r for r, sig in signature_of.items() if sig != reference]
            unit = entries[reference_rank]
            states = {u[-1].state for u in entries.values()}
        head = unit[0]
        shown = self._shown_of(self._name(unit), head.input_sizes, head.output_sizes)
        seq = check.collective_seq_id
        group_id, expected, collective_id = self._group(check.group, seq, seq, check.source, 1)
        desc = pg_desc(check.group.name, check.group.desc)
        match = None if check.mismatch is None else MatchInfo(MATCH_STATE_OF_FINDING.get(check.mismatch, MatchState.UNDECIDED),
                                                               check.mismatch)
        mismatched = {r: self._row(collective_id, group_id, desc, expected, entries[r], match, r) for r in differing}
        row = (  # every field but the id, the row's number
            group_id, check.mismatch is None and not check.missing_ranks, seq,
            head.p2p_seq_id, head.record_id if head.record_id is not None else -1, desc, shown[0],
            shown[1], shown[2], expected, states.pop() if len(states) == 1 else "mixed",
            self.shared.frame_list(self.dumps[reference_rank], head.stack_id), shown[3], shown[4],
            frozenset(check.missing_ranks) or None, mismatched or None, match,
        )
        for column, value in zip(self._loose, row):
            column.append(value)

    @staticmethod
    def _name(unit) -> str:
        entry = unit[0] if len(unit) == 1 else unit[-1]  # a coalesced group: its terminator's name
        return profiling_name(entry.backend, entry.op)

    def _row(self, collective_id: int, group_id: str, desc: str, expected: frozenset, unit, match, rank: int) -> Collective:
        """One rank's differing collective, as torchfrtrace's mismatch_collectives holds it."""
        head = unit[0]
        return Collective(
            collective_id, group_id, False, head.collective_seq_id, head.p2p_seq_id,
            head.record_id if head.record_id is not None else -1, desc, self._name(unit),
            self.shared.shape_list(head.input_sizes), self.shared.shape_list(head.output_sizes), expected, unit[-1].state,
            self.shared.frame_list(self.dumps[rank], head.stack_id),
            type_of_mismatch=None if match is None else MatchInfo(match.state, f"rank {rank} issued {self._name(unit)} "
                                                                               f"{list(map(list, head.input_sizes))}"),
        )

    def offsets(self) -> dict[Group, int]:
        """Per group whose collectives are seq ids first..last without a gap: id - seq."""
        offsets = {}
        for group, (first_id, first, last, _) in self.spans.items():
            last_first_seq, last_first_id, _ = self._stretches[self.ids[group]][-1]  # the stretch holding `last`
            if last_first_id + last - last_first_seq - first_id == last - first:
                offsets[group] = first_id - first
        return offsets
