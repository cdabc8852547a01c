"""What a correct program's ranks agree on, per collective: the size and dtype rules by op."""

from __future__ import annotations

from math import prod

from ..types import Entry

COALESCED_TERMINATORS = frozenset({"coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})
_SAME_SIZES = frozenset({"all_reduce", "allreduce_coalesced", "broadcast", "_broadcast_oop", "reduce", "_reduce_oop"})
_IN_EQUALS_OUT = frozenset({"all_reduce", "allreduce_coalesced"})
_ALL_GATHER = frozenset({"all_gather", "_all_gather_base", "all_gather_into_tensor", "all_gather_into_tensor_coalesced"})
_REDUCE_SCATTER = frozenset({"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced"})
_ALL_TO_ALL = frozenset({"all_to_all", "all_to_all_single", "alltoall", "alltoall_base"})
# ops with a root, which can finish on some members before others issue them (a broadcast's root
# once it sent; gloo's tree serves some receivers before others): their finishing shows who joined
# nothing, and a late member of one is no clock skew
ROOTED_OPS = frozenset({"broadcast", "_broadcast_oop", "reduce", "_reduce_oop", "gather", "scatter"})
# communicator operations PyTorch's analyzer knows (2026): a split and an RMA window carry no data to compare
_NO_SIZES = frozenset({"barrier", "all_reduce_barrier", "all_reduce_sparse", "split", "new_window"}) | COALESCED_TERMINATORS
# each rank gives its own count (torchcomms' and ncclx's *_v ops): no size rule across ranks, dtypes still agree
_VARIABLE_SIZES = frozenset({"all_gather_v", "reduce_scatter_v"})
KNOWN_OPS = _SAME_SIZES | _ALL_GATHER | _REDUCE_SCATTER | _ALL_TO_ALL | _NO_SIZES | _VARIABLE_SIZES | {"gather", "scatter"}


def numel(shapes: tuple[tuple[int, ...], ...]) -> int:
    return sum(prod(shape) for shape in shapes)


def size_key(entry: Entry) -> object:
    """What must be equal on every rank of the group for this op; None when nothing must."""
    op = entry.op
    if op in _SAME_SIZES:
        return entry.input_sizes
    if op in _ALL_GATHER:
        return ("in", numel(entry.input_sizes))
    if op in _REDUCE_SCATTER:
        return ("out", numel(entry.output_sizes))
    if op == "gather":
        return entry.input_sizes  # every rank sends the same; only the root receives
    if op == "scatter":
        return entry.output_sizes  # every rank receives the same; only the root sends
    return None  # all_to_all (checked on totals), barrier, unknown ops


def own_size_problem(entry: Entry, group_size: int) -> str | None:
    """A size rule one rank breaks on its own, whatever the others did."""
    op = entry.op
    if op in _IN_EQUALS_OUT and entry.input_sizes != entry.output_sizes:
        return f"input {list(map(list, entry.input_sizes))} but output {list(map(list, entry.output_sizes))}"
    if op in _ALL_GATHER and entry.input_sizes and entry.output_sizes:
        if numel(entry.output_sizes) != group_size * numel(entry.input_sizes):
            return f"gathers {numel(entry.output_sizes)} elements from {numel(entry.input_sizes)} each of {group_size} ranks"
    if op in _REDUCE_SCATTER and entry.input_sizes and entry.output_sizes:
        if numel(entry.input_sizes) != group_size * numel(entry.output_sizes):
            return f"scatters {numel(entry.input_sizes)} elements into {numel(entry.output_sizes)} each for {group_size} ranks"
    return None


def is_all_to_all(op: str) -> bool:
    return op in _ALL_TO_ALL


def dtype_key(entry: Entry) -> frozenset[str] | None:
    if entry.op in _NO_SIZES:
        return None
    dtypes = frozenset(entry.input_dtypes) | frozenset(entry.output_dtypes)
    return dtypes or None
