"""What each dump says of its groups' progress in time, read in the worker beside the columns.

Dumps are not taken at one moment: after a timeout each rank dumps when its own watchdog fires,
on demand they arrive while ranks go on, and an old file can stand in for a lost one. What tells
the moments apart is in fields the columns do not keep, so each group's few facts are read here,
from the raw entries the worker already holds, and sent along (types.GroupMoment):

- which of the group's collectives the dump shows finished. A finished collective that waits for
  every member (not a rooted one: a broadcast's root, or the receivers gloo's tree served first,
  finish before others issue it) was issued by every member, so a member whose dump ends before
  it is an older dump, not a rank that stopped.
  Recorders that track completion say so in `state`. Gloo's entries stay "scheduled"; its
  `retired` turns True when an op ends, but ops that failed (a timeout, a peer gone) are retired
  too, and so is gloo's `pg_status` count. What no failure explains: an op retired although the
  rank issued another op more than the first op's timeout after it. A sync program would have
  raised at that timeout instead, and an async one (DDP's buckets) waits for its ops within a
  step, so the op had finished.
- the group's last collective: its seq id, creation time and timeout, by which a member that
  issued it after its peers had given up shows (analysis/moments.py);
- pg_status' count of the group's enqueued collectives, which runs past the last entry where
  the recorder did not log an op (monitored_barrier moves the counter on by 2 with no entry).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis.size_rules import COALESCED_TERMINATORS, ROOTED_OPS
from .limits import MAX_INT
from ..types import EntryColumns, GroupMoment

_NS_PER_MS = 1_000_000
_MAX_TIMEOUT_MS = 10**12  # about 30 years: a larger value is no timeout anyone set
_LOOK_BACK = 64  # ops before the cut looked at for one retired (gloo leaves some un-retired at random)


def _count(value: Any) -> int | None:
    """An int field as a count (JSON writes pg_status' values as strings); None where it is none."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 20:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_INT:
        return None
    return value


def _timeout_ms(raw: Any) -> int:
    value = raw.get("timeout_ms") if isinstance(raw, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_TIMEOUT_MS else 0


def recorder_off(raw: Any) -> bool:
    """Whether a dump is what a recorder that was off writes (TORCH_FR_BUFFER_SIZE=0): a version
    and nothing else, neither entries nor groups nor their status."""
    return (isinstance(raw, dict) and "version" in raw and not raw.get("entries") and not raw.get("pg_config")
            and not raw.get("pg_status"))


def group_moments(entries: EntryColumns, raw_entries: Sequence, raw_status: Any) -> tuple[GroupMoment, ...]:
    """Each group's GroupMoment, from the worker's columns (with their times), runs and raw entries."""
    if not len(entries) or len(entries) != len(raw_entries) or not entries.has_times or not entries.runs:
        return ()
    created = entries.time_created_ns
    newest = max(created)
    kinds = entries.kinds
    collective = [not (k.is_p2p or k.op in COALESCED_TERMINATORS) for k in kinds]
    everyone = [c and k.op not in ROOTED_OPS for c, k in zip(collective, kinds)]  # ops that wait for every member
    completed = entries.states.index("completed") if "completed" in entries.states else None
    gloo = entries.from_gloo
    status = raw_status if isinstance(raw_status, Mapping) else {}
    seq_ids = entries.collective_seq_id
    moments = []
    for name, run in entries.runs.items():
        positions = [p for p in run.positions if collective[entries.kind[p]]]
        if not positions:
            continue
        waited = [p for p in positions if everyone[entries.kind[p]]]
        last = positions[-1]
        raw_last = raw_entries[last]
        timeout = _timeout_ms(raw_last)
        joined, last_done = 0, False
        if completed is not None:
            joined = next((seq_ids[p] for p in reversed(waited) if entries.state[p] == completed), 0)
            last_done = entries.state[last] == completed
        elif gloo and timeout and created[last]:
            cut = newest - timeout * _NS_PER_MS
            joined = _retired_long_before(waited, seq_ids, created, raw_entries, cut)
            last_done = 0 < created[last] <= cut and isinstance(raw_last, dict) and raw_last.get("retired") is True
        enqueued = -1
        pg_id = raw_last.get("pg_id") if isinstance(raw_last, dict) else None
        if isinstance(pg_id, int) and not isinstance(pg_id, bool):
            said = status.get(str(pg_id), status.get(pg_id))
            if isinstance(said, Mapping):
                enqueued = _count(said.get("last_enqueued_collective"))
                enqueued = -1 if enqueued is None else enqueued
        seq = seq_ids[last]
        moments.append(GroupMoment(name, max(joined, 0), seq if isinstance(seq, int) else 0, created[last], timeout, enqueued,
                                   last_done))
    return tuple(moments)


def _retired_long_before(positions: list[int], seq_ids: Sequence[int], created: Sequence[int], raw_entries: Sequence,
                         cut: int) -> int:
    """The seq id of the group's latest op retired and created at or before `cut` (its timeout
    before the rank's newest op), among the _LOOK_BACK ops before the cut; 0 where none. Creation
    times rise with the buffer, so the cut is found by bisection, and every op taken is checked
    itself (a clock stepped back only makes it find less)."""
    at = bisect_right(positions, cut, key=created.__getitem__)
    for position in reversed(positions[max(0, at - _LOOK_BACK):at]):
        raw = raw_entries[position]
        if 0 < created[position] <= cut and isinstance(raw, dict) and raw.get("retired") is True:
            return seq_ids[position]
    return 0
