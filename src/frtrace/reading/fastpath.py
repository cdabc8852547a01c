"""The loader's fast path.

Entries of one dump repeat the same few groups, ops, shapes and dtypes, so every field of every
entry is fetched at C speed (itemgetter over the list), and validation and interning run once per
distinct value, not once per entry. Any irregularity (a missing key, an odd type, an old format)
returns None, and the loader's careful path reads the dump field by field.
"""

from __future__ import annotations

import marshal
import sys
from math import inf
from array import array
from collections.abc import Iterable, Sequence
from itertools import chain, compress, repeat
from operator import eq, is_, itemgetter, methodcaller, not_
from typing import Any

from ..errors import printable
from .limits import MAX_DIMS, MAX_FRAMES, MAX_INT, MAX_TEXT
from ..types import EntryColumns, Frame, Kind, code_column, float_column, int_column, small_int_column, time_column

DTYPE_NAMES = {
    "float": "Float", "double": "Double", "half": "Half", "bfloat16": "BFloat16", "c10::bfloat16": "BFloat16",
    "c10::half": "Half", "int": "Int", "long": "Long", "short": "Short", "char": "Char", "bool": "Bool",
    "unsigned char": "Byte", "signed char": "Char", "int64_t": "Long", "int32_t": "Int", "uint8_t": "Byte",
}

def split_profiling_name(name: str) -> tuple[str, str]:
    """"nccl:all_reduce" -> ("nccl", "all_reduce"); a name without a backend prefix -> ("", name)."""
    backend, sep, op = name.partition(":")
    return (sys.intern(backend), sys.intern(op.strip())) if sep else ("", sys.intern(name.strip()))


def clean_text(text: str) -> str:
    """A dump's string as frtrace keeps it, on both loader paths: at most MAX_TEXT characters,
    nothing a terminal acts on (errors.printable), interned (a dump repeats a few names)."""
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "..."
    return sys.intern(printable(text))


def dtype_name(raw: str) -> str:
    """Version 2.0 wrote C++ names ("float"); later ones "Float". One spelling for both."""
    return sys.intern(DTYPE_NAMES.get(raw.lower(), raw))


def is_p2p_name(op: str) -> bool:
    """An op named "send 0->1" or "recv 1<-0" is point to point, whatever its is_p2p flag says
    (torchcomms writes False for every op; a batch's terminator, "coalesced", is not one)."""
    return op.split(" ", 1)[0] in ("send", "recv")


_PER_ENTRY = 8  # tensors and dtypes per entry on average, above which the careful path reads the dump
_KEY_BYTES = 1024  # bytes of marshalled kind per entry on average (PyTorch's take about 100)
_STACK_BYTES = 32768  # bytes of marshalled frames per entry on average: PyTorch's take 60 to 200 bytes a
# frame, so stacks of 150 frames and more take the fast path; past it, the careful path reads the dump


def _keys(values: Iterable, budget: int) -> list[bytes] | None:
    """Each value marshalled into a bytes key; None once the keys take more than `budget` bytes
    (and 64 KiB), or where marshal cannot write a value (not a dump's plain data, or nested too
    deep).

    marshal (version 4) writes a value shared by reference within one key once, so no key is
    bigger than the objects it holds; a value shared between keys is written into each of them,
    so the keys are made one at a time against the budget, and a small file that shares one big
    value among many entries stops the fast path there, not after."""
    budget += 65536
    keys = []
    try:
        for key in map(marshal.dumps, values, repeat(4)):
            budget -= len(key)
            if budget < 0:
                return None
            keys.append(key)
    except ValueError:
        return None
    return keys


_FAST_KEYS = ("record_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name",
              "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state", "is_p2p")
_FAST_OPTIONAL = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms", "frames")
_ALL_KEYS = _FAST_KEYS + _FAST_OPTIONAL
_INT = {int}
_LIST = {list}
_NO_FRAMES: list = []
_OPTIONAL_INT = {int, type(None)}
_NUMBER = {int, float, type(None)}
_frame_fields = itemgetter("name", "filename", "line")
_frame_line = itemgetter("line")


def _fields(raw_entries: list) -> list[tuple] | None:
    """The fields of every entry, one tuple per field; None when an entry is not a dict with them.

    Looked up by the dump's own key objects where its first entry has them: a pickle writes each
    key once and refers back to it (PyTorch's too), so each look-up finds its key by identity,
    not by comparing the strings (a tenth of the look-ups' cost)."""
    first = raw_entries[0]
    own = dict(zip(first, first)) if type(first) is dict else {}
    try:
        return list(zip(*map(itemgetter(*map(own.get, _ALL_KEYS, _ALL_KEYS)), raw_entries)))
    except (KeyError, TypeError):
        pass
    try:  # the optional fields missing from some or all entries (gloo writes no duration_ms)
        columns = list(zip(*map(itemgetter(*map(own.get, _FAST_KEYS, _FAST_KEYS)), raw_entries)))
        return columns + [tuple(map(methodcaller("get", key), raw_entries)) for key in _FAST_OPTIONAL]
    except (KeyError, TypeError, AttributeError):
        return None


def fast_columns(raw_entries: list, rank: int, stacks: dict[tuple[Frame, ...], int]) -> EntryColumns | None:
    """One dump's entries as columns, its stacks added to `stacks`; None where the dump is not
    regular enough, and the careful path must read it."""
    if not raw_entries:
        return EntryColumns.from_entries(rank, ())
    fields = _fields(raw_entries)
    if fields is None:
        return None
    (record_ids, groups, coll_seqs, p2p_seqs, names, sizes_in, sizes_out, dtypes_in, dtypes_out, states, p2p_flags,
     created, started, completed, durations, frames) = fields

    # names are checked once per kind (_kind: a row equal to a read one holds equal strings), states' lengths once per state
    if not (set(map(type, coll_seqs)) <= _INT and set(map(type, p2p_seqs)) <= _INT
            and set(map(type, record_ids)) <= _OPTIONAL_INT and set(map(type, p2p_flags)) <= {bool}
            and set(map(type, created)) <= _OPTIONAL_INT and set(map(type, started)) <= _OPTIONAL_INT
            and set(map(type, completed)) <= _OPTIONAL_INT and set(map(type, durations)) <= _NUMBER
            and set(map(type, states)) <= {str}):
        return None
    numbers = [int_column(record_ids), int_column(coll_seqs), int_column(p2p_seqs),
               time_column(created), time_column(started), time_column(completed), float_column(durations)]
    if not all(isinstance(column, array) for column in numbers) or inf in numbers[-1] or -inf in numbers[-1]:
        return None  # over 64 bits, or an infinite duration: the careful path drops the field
    found = _kind_codes(list(zip(groups, names, p2p_flags, sizes_in, sizes_out, dtypes_in, dtypes_out)), (sizes_in, sizes_out))
    if found is None:
        return None
    kinds, kind_codes, step = found
    state_of = {state: number for number, state in enumerate(dict.fromkeys(states))}
    if max(map(len, state_of)) > MAX_TEXT:
        return None
    stack_ids = _fast_stacks(frames, kind_codes, stacks, step)
    if stack_ids is None:
        return None
    return EntryColumns(
        rank, kinds, kind_codes,
        tuple(map(clean_text, state_of)), code_column(map(state_of.__getitem__, states), len(state_of)),
        *numbers, stack_ids,
    )


def _kind_codes(rows: list[tuple], sizes: tuple[Sequence, Sequence]) -> tuple[tuple[Kind, ...], Sequence[int], int] | None:
    """The kinds of entries whose rows (group, name, is_p2p, sizes and dtypes in and out) are
    `rows`, numbered in order of first appearance, each entry's code, and the length of the
    step that every row repeats (0 where some row does not); None where a value is not what a
    dump holds (see _kind) or the keys pass their budget. `sizes` are the rows' sizes in and
    out, as two columns.

    A training step repeats the ops of the step before. The last row is read first, and `step`
    is how far back its equal is; the first step's rows and the last step's are read, and every
    other row is compared (==, in C) with its counterpart in the first step, then, where it
    differs, in the last (a step cut short mid-buffer shifts the rows after it). Only the rows
    equal to neither are marshalled and read. Rows are compared only with rows read, of a bounded
    weight: a comparison stops where the read row ends, so a row of a huge or deeply shared value
    costs no more than a small one. Equal rows hold equal strings and bools, but sizes equal only
    as numbers (1 == 1.0 == True, and the careful path takes ints only): the numbers of every row
    are then checked to be ints in one pass over the two columns (the rows read were checked
    already, and each row is one read or one equal to a light one: the pass is bounded as they
    are; checking them again costs less than picking the others out)."""
    count = len(rows)
    reader = _RowReader(rows, _KEY_BYTES * count, _PER_ENTRY * count + 64)
    last = reader.codes([count - 1])
    if last is None:
        return None
    step = _step(rows) if reader.light(last) else 0
    firsts = lasts = None
    if step and 2 * step <= count:
        firsts, lasts = reader.codes(range(step)), reader.codes(range(count - step, count))
        if firsts is None or lasts is None:
            return None
    if firsts is None or not (reader.light(firsts) and reader.light(lasts)):  # no step to compare across: each row is read
        others = reader.codes(range(count - 1))
        return None if others is None else (*_numbered(list(reader.kinds), others + last), 0)
    apart = _apart(rows, step)
    if not apart:  # each row its counterpart's code: the first step's codes, repeated
        if not _int_shapes(sizes):
            return None
        kinds, first_codes = _numbered(list(reader.kinds), firsts)
        return kinds, _repeated(first_codes, count), step
    codes = _repeated(firsts, count)  # each row's, where it equals its counterpart in the first step
    ends = rows[count - step:]
    at_end = [(position - count) % step for position in apart]  # counterparts in the last step
    again = bytes(map(eq, map(rows.__getitem__, apart), map(ends.__getitem__, at_end)))
    for position, end, equal in zip(apart, at_end, again):
        if equal:
            codes[position] = lasts[end]
    rest = [position for position, equal in zip(apart, again) if not equal]
    if rest:
        own = reader.codes(rest)
        if own is None:
            return None
        for position, code in zip(rest, own):
            codes[position] = code
    if not _int_shapes(sizes):
        return None
    return (*_numbered(list(reader.kinds), codes), 0)


def _int_shapes(sizes: tuple[Sequence, Sequence]) -> bool:
    """Whether every number of the shapes of two size columns is an int: a shape equal to one
    read (at most MAX_DIMS numbers each) may hold a float or a bool equal to its int."""
    shapes = chain.from_iterable(map(chain.from_iterable, sizes))
    return set(map(type, chain.from_iterable(shapes))) <= _INT


def _repeated(step: Sequence, length: int) -> Sequence:
    """One step's values over and over, cut to `length`: what a buffer repeating that step holds,
    made in C (a list, bytes or an array, as `step` is)."""
    return (step * (length // len(step) + 1))[:length]


_CHUNK = 256  # rows compared with their counterparts as one list: only a chunk that differs is compared row by row


def _apart(rows: list[tuple], step: int) -> list[int]:
    """The positions of the rows past the first step that differ from their counterpart in it
    (the row `step`, 2 x `step`, ... rows before). A chunk of rows equal to its counterparts,
    as nearly all are, is compared as one list (in C, no value made per row); the rows of a
    chunk that differs are compared one by one."""
    count = len(rows)
    counterparts = _repeated(rows[:step], count - step)
    apart: list[int] = []
    for start in range(0, count - step, _CHUNK):
        mine, theirs = rows[step + start:step + start + _CHUNK], counterparts[start:start + _CHUNK]
        if mine != theirs:
            apart += compress(range(step + start, step + start + len(mine)), map(not_, map(eq, mine, theirs)))
    return apart


def _numbered(kinds: list[Kind], codes: list[int]) -> tuple[tuple[Kind, ...], Sequence[int]]:
    """The kinds in order of their first entry, and the codes numbered so (they were numbered
    as read: the last row first)."""
    order = list(dict.fromkeys(codes))
    if order != list(range(len(order))):
        number = {code: new for new, code in enumerate(order)}
        kinds = [kinds[code] for code in order]
        codes = list(map(number.__getitem__, codes))
    return tuple(kinds), code_column(codes, len(kinds))


_MAX_STEP = 1024  # rows in a training step, at most, that kinds are compared across
_MAX_WEIGHT = 256  # tensors, dimensions and dtypes that a row compared with others may hold


class _RowReader:
    """Rows read by their marshalled keys, each distinct key checked once (_kind), within one
    budget of key bytes and one of tensors and dtypes for the whole dump."""

    def __init__(self, rows: list[tuple], budget: int, room: int) -> None:
        self.rows = rows
        self.budget = budget
        self.room = [room]
        self.code_of: dict[bytes, int] = {}
        # two keys can make one kind: a list and a tuple, "float" and "Float", a value shared or not
        self.kinds: dict[Kind, int] = {}  # numbered as read

    def codes(self, positions: Sequence[int]) -> list[int] | None:
        """The kind codes of the rows at `positions`; None where one is not what a dump holds."""
        keys = _keys(map(self.rows.__getitem__, positions), self.budget)
        if keys is None:
            return None
        self.budget -= sum(map(len, keys))
        for key in dict.fromkeys(keys):
            if key not in self.code_of:
                kind = _kind(*marshal.loads(key), self.room)
                if kind is None:
                    return None
                self.code_of[key] = self.kinds.setdefault(kind, len(self.kinds))
        return list(map(self.code_of.__getitem__, keys))

    def light(self, codes: list[int]) -> bool:
        """Whether rows of these codes are each light enough to compare other rows with."""
        return all(len(kind.input_sizes) + len(kind.output_sizes) + sum(map(len, kind.input_sizes))
                   + sum(map(len, kind.output_sizes)) + len(kind.input_dtypes) + len(kind.output_dtypes) <= _MAX_WEIGHT
                   for kind in map(list(self.kinds).__getitem__, set(codes)))


def _step(rows: list[tuple]) -> int:
    """How many rows back the last row's equal is (a training step's length where the buffer
    repeats one step); 0 where there is none within _MAX_STEP rows. The last row is one read and
    light: each comparison stops where it ends."""
    try:
        return rows[-2::-1].index(rows[-1], 0, _MAX_STEP) + 1
    except ValueError:
        return 0


def _kind(group: Any, name: str, is_p2p: bool, sizes_in: Any, sizes_out: Any, dtypes_in: Any, dtypes_out: Any,
          room: list[int]) -> Kind | None:
    """The Kind of one distinct raw value, checked; None when a value is not what a dump holds,
    or holds more tensors and dtypes than are left in `room` (taken from it)."""
    if not (isinstance(group, (list, tuple)) and len(group) == 2 and type(group[0]) is str and type(group[1]) is str):
        return None
    lists = (sizes_in, sizes_out, dtypes_in, dtypes_out)
    if not all(isinstance(items, (list, tuple)) for items in lists):
        return None
    room[0] -= sum(map(len, lists))
    if room[0] < 0:
        return None
    shapes = []
    for sizes in (sizes_in, sizes_out):
        if not all(isinstance(shape, (list, tuple)) and len(shape) <= MAX_DIMS and all(type(d) is int and -1 <= d <= MAX_INT for d in shape)
                   for shape in sizes):
            return None
        shapes.append(tuple(map(tuple, sizes)))
    texts = [name, *group, *dtypes_in, *dtypes_out]
    if not all(type(t) is str and len(t) <= MAX_TEXT for t in texts):
        return None
    backend, op = split_profiling_name(clean_text(name))
    return Kind(clean_text(group[0]), clean_text(group[1]), op, backend, is_p2p or is_p2p_name(op),
                shapes[0], shapes[1],
                tuple(dtype_name(clean_text(d)) for d in dtypes_in), tuple(dtype_name(clean_text(d)) for d in dtypes_out))


def _fast_stacks(frames: tuple, kinds: Sequence[int], stacks: dict[tuple[Frame, ...], int], step: int = 0) -> array | None:
    """Each entry's stack id, new stacks added to `stacks` in order of first appearance; None where
    a frame is not a plain dict of name, filename and line. `step`: the length of a training step
    that every entry's kind repeats (0: none).

    A pickle may share one list of frames between entries: then each distinct list is read. Each
    read list is marshalled into a bytes key (in C; no raw value is hashed, so a deeply nested one
    cannot crash the hash), and a Python step runs once per distinct key, which checks its frames
    and makes its stack. PyTorch writes every entry its own list: see _codes_by_first_of_kind.
    Where the kinds repeat a step, the stacks nearly always do too: see _repeated_stacks."""
    if not set(map(type, filter(None, frames))) <= _LIST:
        return None
    lists = frames if all(frames) else [frame_list or _NO_FRAMES for frame_list in frames]
    if step and not stacks:
        codes = _repeated_stacks(lists, step, stacks)
        if codes is not None:
            return codes  # else the first step's stacks stay numbered: the first entries' numbers either way
    ids = list(map(id, lists))
    by_id = dict(zip(ids, lists))  # each distinct list object once
    shared = _SHARED_LISTS * len(by_id) <= len(lists)
    if shared and not stacks:  # read in the order of the entries: numbered as `stacks` numbers them
        code_by_id = _stack_codes(by_id, len(lists), stacks)
        return None if code_by_id is None else small_int_column(map(code_by_id.__getitem__, ids), len(stacks) - 1)
    local: dict[tuple[Frame, ...], int] = {}  # the dump's stacks, numbered as met here
    if shared:
        code_by_id = _stack_codes(by_id, len(lists), local)
        codes = None if code_by_id is None else array("i", map(code_by_id.__getitem__, ids))
    else:
        codes = _codes_by_first_of_kind(lists, by_id, kinds, local)
    if codes is None:
        return None
    by_local = list(local)
    number = {-1: -1}  # the local numbers -> ids in `stacks`, given in the order of the entries
    for code in dict.fromkeys(codes):
        if code >= 0:
            number[code] = stacks.setdefault(by_local[code], len(stacks))
    if codes.typecode == "b" and max(number.values()) < 128:  # one byte each, as small_int_column makes them
        return _translated(codes.tobytes(), number)
    return small_int_column(array("i", map(number.__getitem__, codes)))


def _translated(codes: bytes, mapping: dict[int, int]) -> array:
    """Codes of one byte each (their raw bytes), mapped by `mapping` (a code, signed or not, ->
    a value from -1 to 127) into signed bytes: one bytes.translate, in C."""
    table = bytearray(256)
    for code, value in mapping.items():
        table[code & 0xFF] = value & 0xFF
    mapped = array("b")
    mapped.frombytes(codes.translate(table))
    return mapped


_SHARED_LISTS = 4  # at most a quarter as many lists as entries: a pickle that shares them


def _repeated_stacks(lists: Sequence[list], step: int, stacks: dict[tuple[Frame, ...], int]) -> array | None:
    """The stack ids of entries each of whose lists of frames equals its counterpart's in the
    first `step` entries (`step` entries back, and so on): the first step's lists are read
    (numbered into the empty `stacks` in the order of the entries, which is theirs) and the rest
    compared with them, as one list in C; None where some list differs, or is not one a stack is
    read from. The same objects (a pickle that shares them) compare by identity and are read
    once; lists of their own are equal to a checked one, but their lines only as numbers (88.0
    == 88, True == 1): their types are checked in one pass."""
    count = len(lists)
    firsts = lists[:step]
    code_by_id = _stack_codes(dict(zip(map(id, firsts), firsts)), count, stacks)
    if code_by_id is None:
        return None
    counterparts = _repeated(firsts, count - step)
    rest = lists[step:]
    try:
        if rest != counterparts:
            return None
    except RecursionError:  # a checked first list may hold deep values under keys other than a frame's
        return None
    if not all(map(is_, rest, counterparts)) and not set(map(type, map(_frame_line, chain.from_iterable(rest)))) <= _INT:
        return None
    first_codes = small_int_column(map(code_by_id.__getitem__, map(id, firsts)), len(stacks) - 1)
    return _repeated(first_codes, count)


def _codes_by_first_of_kind(lists: list[list], by_id: dict[int, list], kinds: Sequence[int],
                            local: dict[tuple[Frame, ...], int]) -> array | None:
    """Each entry's number in `local`, where entries have their own lists of frames.

    An op of one kind is nearly always called from one place: so each entry's list is compared
    (==, in C) with the list of the first entry of its kind, and only those first lists and the
    lists that differ from them are read. A list equal to a checked one holds the same strings;
    its lines are numbers equal to ints, and their types are checked in one pass (88.0 == 88: the
    careful path refuses a float line, so the fast path does not take one for an int)."""
    count = len(lists)
    first_of_kind = dict(zip(reversed(kinds), range(count - 1, -1, -1)))  # kind code -> its first entry
    firsts = [lists[index] for index in first_of_kind.values()]
    code_by_id = _stack_codes(dict(zip(map(id, firsts), firsts)), count, local)
    if code_by_id is None:
        return None
    candidates = list(map(lists.__getitem__, map(first_of_kind.__getitem__, kinds)))
    try:
        same = list(map(eq, lists, candidates))
    except RecursionError:  # a checked first list may hold deep values under keys other than a frame's
        return None
    apart = list(compress(range(count), map(not_, same)))  # entries whose list is not their kind's first's
    differing = [lists[index] for index in apart]
    if differing:
        others = _stack_codes(dict(zip(map(id, differing), differing)), count, local)
        if others is None:
            return None
        code_by_id.update(others)
    if not set(map(type, map(_frame_line, chain.from_iterable(by_id.values())))) <= _INT:
        return None
    if isinstance(kinds, bytes) and len(local) < 128:  # each entry its kind's first's code, a signed byte: translated
        codes = _translated(kinds, {kind: code_by_id[id(lists[first])] for kind, first in first_of_kind.items()})
    else:
        codes = array("i", map(code_by_id.__getitem__, map(id, candidates)))
    for index in apart:
        codes[index] = code_by_id[id(lists[index])]
    return codes


def _stack_codes(lists: dict[int, list], count: int, stacks: dict[tuple[Frame, ...], int]) -> dict[int, int] | None:
    """id of each of `lists` -> its stack's id (-1 for none), new stacks added to `stacks`; None
    where a list is longer than a stack may be, is not marshallable, or holds a frame that is not
    one, or where the keys pass their budget (`count` entries' worth)."""
    if max(map(len, lists.values())) > MAX_FRAMES:
        return None
    keys = _keys(lists.values(), _STACK_BYTES * count)
    if keys is None:
        return None
    code_of = dict.fromkeys(keys)
    for key in code_of:  # a few distinct stacks: each checked once
        stack = _stack(marshal.loads(key))
        if stack is None:
            return None
        code_of[key] = stacks.setdefault(stack, len(stacks)) if stack else -1
    return dict(zip(lists, map(code_of.__getitem__, keys)))


def _stack(frame_list: list) -> tuple[Frame, ...] | None:
    """One distinct list of frame dicts as a stack; None where a frame is not a dict holding a
    name, a filename and a line of the right types and sizes."""
    if not all(type(frame) is dict for frame in frame_list):
        return None
    try:
        fields = list(map(_frame_fields, frame_list))
    except KeyError:
        return None
    if not all(type(name) is str and type(filename) is str and type(line) is int and len(name) <= MAX_TEXT
               and len(filename) <= MAX_TEXT and 0 <= line <= MAX_INT for name, filename, line in fields):
        return None
    return tuple(Frame(clean_text(name), clean_text(filename), line) for name, filename, line in fields)
