"""The loader's fast path.

Entries of one dump repeat the same few groups, ops, shapes and dtypes, so every field of every
entry is fetched at C speed (itemgetter over the list), and validation and interning run once per
distinct value, not once per entry. Any irregularity (a missing key, an odd type, an old format)
returns None, and the loader's careful path reads the dump field by field.
"""

from __future__ import annotations

import sys
from operator import itemgetter, methodcaller
from typing import Any

from .types import ENTRY_FIELDS, Frame

DTYPE_NAMES = {
    "float": "Float", "double": "Double", "half": "Half", "bfloat16": "BFloat16", "c10::bfloat16": "BFloat16",
    "c10::half": "Half", "int": "Int", "long": "Long", "short": "Short", "char": "Char", "bool": "Bool",
    "unsigned char": "Byte", "signed char": "Char", "int64_t": "Long", "int32_t": "Int", "uint8_t": "Byte",
}

def split_profiling_name(name: str) -> tuple[str, str]:
    """"nccl:all_reduce" -> ("nccl", "all_reduce"); a name without a backend prefix -> ("", name)."""
    backend, sep, op = name.partition(":")
    return (sys.intern(backend), sys.intern(op.strip())) if sep else ("", sys.intern(name.strip()))


def dtype_name(raw: str) -> str:
    """Version 2.0 wrote C++ names ("float"); later ones "Float". One spelling for both."""
    return sys.intern(DTYPE_NAMES.get(raw.lower(), raw))


_FAST_KEYS = ("record_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name",
              "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state", "is_p2p")
_FAST_OPTIONAL = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms", "frames")
_fetch = itemgetter(*_FAST_KEYS)
_INT = {int}
_OPTIONAL_INT = {int, type(None)}
_NUMBER = {int, float, type(None)}
_frame_fields = itemgetter("name", "filename", "line")


def _shape_key(shapes: Any) -> tuple:
    return tuple(map(tuple, shapes))


def fast_columns(raw_entries: list, stacks: dict[tuple[Frame, ...], int]):
    """Columns of one dump's entries (after rank and index), its stacks added to `stacks`; None
    where the dump is not regular enough, and the careful path must read it."""
    if not raw_entries:
        return ((),) * (len(ENTRY_FIELDS) - 2)
    try:
        rows = list(map(_fetch, raw_entries))
        optional = [list(map(methodcaller("get", key), raw_entries)) for key in _FAST_OPTIONAL]
    except (KeyError, TypeError, AttributeError):
        return None
    (record_ids, groups, coll_seqs, p2p_seqs, names, sizes_in, sizes_out,
     dtypes_in, dtypes_out, states, p2p_flags) = zip(*rows)
    created, started, completed, durations, frames = optional

    if not (set(map(type, coll_seqs)) <= _INT and set(map(type, p2p_seqs)) <= _INT
            and set(map(type, record_ids)) <= _OPTIONAL_INT and set(map(type, p2p_flags)) <= {bool}
            and set(map(type, created)) <= _OPTIONAL_INT and set(map(type, started)) <= _OPTIONAL_INT
            and set(map(type, completed)) <= _OPTIONAL_INT and set(map(type, durations)) <= _NUMBER
            and set(map(type, names)) <= {str} and set(map(type, states)) <= {str}):
        return None
    try:
        groups = list(map(tuple, groups))
        shapes_in = list(map(_shape_key, sizes_in))
        shapes_out = list(map(_shape_key, sizes_out))
        types_in = list(map(tuple, dtypes_in))
        types_out = list(map(tuple, dtypes_out))
        distinct_shapes = set(shapes_in) | set(shapes_out)
        distinct_types = set(types_in) | set(types_out)
        distinct_groups = set(groups)
    except TypeError:  # something unhashable or not a sequence
        return None
    if not all(type(d) is int for shape_list in distinct_shapes for shape in shape_list for d in shape):
        return None
    if not all(type(d) is str for dtype_list in distinct_types for d in dtype_list):
        return None
    if not all(len(g) == 2 and type(g[0]) is str and type(g[1]) is str for g in distinct_groups):
        return None
    if any(isinstance(s, str) for s in sizes_in + sizes_out):  # a string is a sequence too
        return None

    shape_of = {s: s for s in distinct_shapes}
    dtype_of = {t: tuple(map(dtype_name, t)) for t in distinct_types}
    group_of = {g: (sys.intern(g[0]), sys.intern(g[1])) for g in distinct_groups}
    name_of = {name: split_profiling_name(name) for name in set(names)}
    stack_ids = _fast_stacks(frames, stacks)
    if stack_ids is None:
        return None

    pg = list(map(group_of.__getitem__, groups))
    op = list(map(name_of.__getitem__, names))
    columns = (
        record_ids,
        tuple(g[0] for g in pg),
        tuple(g[1] for g in pg),
        coll_seqs,
        p2p_seqs,
        tuple(o[1] for o in op),
        tuple(o[0] for o in op),
        tuple(map(shape_of.__getitem__, shapes_in)),
        tuple(map(shape_of.__getitem__, shapes_out)),
        tuple(map(dtype_of.__getitem__, types_in)),
        tuple(map(dtype_of.__getitem__, types_out)),
        tuple(map(sys.intern, states)),
        p2p_flags,
        tuple(v or None for v in created),
        tuple(v or None for v in started),  # JSON writes 0 for unset
        tuple(v or None for v in completed),
        tuple(None if v is None else float(v) for v in durations),
        stack_ids,
    )
    return columns


def _fast_stacks(frames: list, stacks: dict[tuple[Frame, ...], int]) -> tuple | None:
    by_object: dict[int, int] = {}  # pickles share one frames list between entries: key on it
    by_fields: dict[tuple, int] = {}
    ids = []
    for frame_list in frames:
        if not frame_list:
            ids.append(-1)
            continue
        known = by_object.get(id(frame_list))
        if known is None:
            if type(frame_list) is not list:
                return None
            try:
                fields = tuple(map(_frame_fields, frame_list))
            except (KeyError, TypeError):
                return None
            known = by_fields.get(fields)
            if known is None:
                stack = tuple(Frame(str(n), str(f), ln if type(ln) is int else 0) for n, f, ln in fields)
                known = by_fields[fields] = stacks.setdefault(stack, len(stacks))
            by_object[id(frame_list)] = known
        ids.append(known)
    return tuple(ids)
