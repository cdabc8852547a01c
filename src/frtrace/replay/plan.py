"""A dump set's communication as data, for `python -m frtrace.replay` to run (`frtrace replay`).

The plan holds the job's process groups (ids, names, descs, ranks, in the order they were made) and,
per rank, its recorded collectives in buffer order: op, group, shapes, dtype, and the root of
rooted ops (gather/scatter: the member that had the list; broadcast/reduce: the dumps do not
record it, so the group's first rank). Needs no torch: only the runner does.

Wrapped buffers start at different ops on different members: each group's ops are kept from the
first seq id every member's buffer still holds, and that many minus one cheap filler all_reduces
open the replay (every member, group by group, in one order), so the replay's seq ids are the
recording's. Ranks without a dump are *silent*: they write no dump, and run what their peers
did until the first op the peers wait for them in (a healthy rank's program on their groups).

Modes: `as-recorded` reproduces the recording, desync included. `majority` gives every rank the
program of one healthy rank (the one that recorded the most ops), carried over to the rank's own
groups of the same kind (desc and size): the culprit's deviation is gone and the ranks it
blocked finish what they would have done. This fits jobs whose ranks run one program on their
own groups (data and tensor parallel); pipeline stages, which send where others receive, do not.
"""

from __future__ import annotations

from collections import defaultdict

from ..builder import group_ids
from ..reading.groups import GroupTable
from ..types import Analysis, Dump

PLAN_FORMAT = "frtrace-replay"
PLAN_VERSION = 1
FILLER = {"op": "all_reduce", "in": [[1]], "out": [[1]], "dtype": "Float", "filler": True}
_ROOTED = {"gather": "out", "scatter": "in"}  # the root is the member whose entry has this list
_P2P = ("send", "recv")


class _Groups:
    """The job's groups by the id the plan names them by: builder.group_ids' (the group's name,
    or name:ranks where split_group made two groups of one name)."""

    def __init__(self, table: GroupTable) -> None:
        self.table = table
        self.id_of = group_ids(table.groups)  # group key -> id
        self.by_id = {self.id_of[g.key]: g for g in table.groups}

    def ranks(self, group_id: str) -> tuple[int, ...]:
        return self.by_id[group_id].ranks

    def family(self, group_id: str) -> tuple[str, int]:
        group = self.by_id[group_id]
        return group.desc, len(group.ranks)


def build_plan(dumps: dict[int, Dump], table: GroupTable, analysis: Analysis, mode: str) -> dict:
    groups = _Groups(table)
    listed = [{"id": groups.id_of[g.key], "name": g.name, "desc": g.desc, "ranks": list(g.ranks)} for g in table.groups]
    notes: list[str] = []
    ops: dict[int, list[dict]] = {}
    for rank, dump in dumps.items():
        ops[rank] = _recorded(rank, dump, groups, notes)
    _rooted(ops)
    fillers = _trim_wrapped(ops, groups, notes)
    silent = [r for r in table.world if r not in dumps]
    if mode == "majority":
        silent = _majority(ops, groups, analysis, silent, notes)
    else:
        _silent_programs(ops, groups, analysis, silent, notes)
    plan_ranks = {}
    for rank in table.world:
        opening = [dict(FILLER, group=gid) for gid, count in fillers if rank in groups.ranks(gid) for _ in range(count)]
        plan_ranks[str(rank)] = opening + ops.get(rank, [])
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "mode": mode, "world_size": len(table.world),
            "backend_recorded": _backend(dumps), "groups": listed, "silent_ranks": silent, "ranks": plan_ranks,
            "verdict_recorded": analysis.headline, "culprits_recorded": list(analysis.culprit_ranks), "notes": notes}


def _backend(dumps: dict[int, Dump]) -> str:
    for dump in dumps.values():
        for kind in dump.entries.kinds:
            if kind.backend:
                return kind.backend
    return ""


def _recorded(rank: int, dump: Dump, groups: _Groups, notes: list[str]) -> list[dict]:
    found = []
    skipped: dict[str, int] = defaultdict(int)
    for entry in dump.entries:
        group = groups.table.group_of(rank, entry.pg_name)
        base = entry.op.split(" ")[0]
        if group is None or base == "coalesced" or not base:
            skipped[entry.op or "unnamed op"] += 1
            continue
        op = {"op": base, "group": groups.id_of[group.key], "in": [list(s) for s in entry.input_sizes],
              "out": [list(s) for s in entry.output_sizes],
              "dtype": (entry.input_dtypes or entry.output_dtypes or ("Float",))[0], "seq": entry.collective_seq_id}
        if base in _P2P:
            peer = entry.op.split("->" if base == "send" else "<-")[-1]
            if not peer.isdigit():
                skipped[entry.op] += 1  # receive-from-any: which send it took is not recorded
                continue
            op["peer"] = group.ranks[int(peer)] if int(peer) < len(group.ranks) else None
            op["seq"] = None
        found.append(op)
    for op, count in skipped.items():
        notes.append(f"rank {rank}: {count} x {op} left out (no group, a coalesced marker, or a receive from any rank)")
    return found


def _rooted(ops: dict[int, list[dict]]) -> None:
    """Each rooted op's root, as a global rank: for gather and scatter the member whose entry has
    the list; for broadcast and reduce (not recorded) the group's first rank."""
    holders: dict[tuple, int] = {}
    for rank, listed in ops.items():
        for op in listed:
            side = _ROOTED.get(op["op"])
            if side and op[side]:
                holders[(op["group"], op["seq"])] = rank
    for listed in ops.values():
        for op in listed:
            if op["op"] in _ROOTED or op["op"] in ("broadcast", "reduce"):
                op["root"] = holders.get((op["group"], op["seq"]))


def _trim_wrapped(ops: dict[int, list[dict]], groups: _Groups, notes: list[str]) -> list[tuple[str, int]]:
    """Keep each group's collectives from the first seq id all its recorded members hold; return
    (group name, fillers) for the seq ids before it."""
    first: dict[str, int] = {}
    for listed in ops.values():
        starts: dict[str, int] = {}
        for op in listed:
            if op.get("seq") is not None:
                starts.setdefault(op["group"], op["seq"])
        for name, seq in starts.items():
            first[name] = max(first.get(name, 1), seq)
    for rank, listed in ops.items():
        kept = [op for op in listed if op.get("seq") is None or op["seq"] >= first.get(op["group"], 1)]
        if len(kept) < len(listed):
            notes.append(f"rank {rank}: {len(listed) - len(kept)} op(s) before what every member of their group still "
                         "holds left out (wrapped buffers)")
        ops[rank] = kept
    order = [groups.id_of[g.key] for g in groups.table.groups]
    return [(gid, first[gid] - 1) for gid in order if first.get(gid, 1) > 1]


def _reference(ops: dict[int, list[dict]], analysis: Analysis) -> int | None:
    """The healthy rank whose program others are given: of the ranks with a dump that are not
    culprits, the one that recorded the most ops (the lowest of equals)."""
    healthy = [r for r in ops if r not in analysis.culprit_ranks]
    return max(healthy, key=lambda r: (len(ops[r]), -r)) if healthy else None


def _carry_to(rank: int, program: list[dict], groups: _Groups) -> list[dict] | None:
    """`program` on `rank`'s own groups of the same kinds (desc and size); None where it has none
    of some kind the program uses."""
    own: dict[tuple, str] = {}
    for gid, group in groups.by_id.items():
        if rank in group.ranks:
            own.setdefault(groups.family(gid), gid)
    carried = []
    for op in program:
        target = own.get(groups.family(op["group"]))
        if target is None:
            return None
        carried.append(_carried(op, target, groups))
    return carried


def _silent_programs(ops: dict[int, list[dict]], groups: _Groups, analysis: Analysis, silent: list[int],
                     notes: list[str]) -> None:
    """A rank without a dump did what its peers did until the first op they wait for it in: the
    reference program, carried to its groups and cut there. It still writes no dump."""
    reference = _reference(ops, analysis)
    for rank in silent:
        carried = _carry_to(rank, ops[reference], groups) if reference is not None else None
        if carried is None:
            notes.append(f"rank {rank} left no dump and no rank's program fits its groups: it issues nothing")
            continue
        awaited = [(groups.id_of[f.group.key], f.collective_seq_id) for f in analysis.findings
                   if rank in f.ranks and f.collective_seq_id is not None]
        cut = next((i for i, op in enumerate(carried)
                    if any(op["group"] == gid and op.get("seq") is not None and op["seq"] >= seq for gid, seq in awaited)),
                   len(carried))
        ops[rank] = carried[:cut]
        notes.append(f"rank {rank} left no dump: it runs rank {reference}'s program on its own groups up to the first op "
                     f"the others wait for it in ({cut} ops), and writes no dump")


def _majority(ops: dict[int, list[dict]], groups: _Groups, analysis: Analysis, silent: list[int],
              notes: list[str]) -> list[int]:
    """Give every rank the reference rank's program on its own groups; return the ranks still
    silent (no program fits them)."""
    reference = _reference(ops, analysis)
    if reference is None:
        notes.append("majority: every rank with a dump is a culprit; replayed as recorded")
        return silent
    program = ops[reference]
    still_silent = []
    for rank in groups.table.world:
        carried = _carry_to(rank, program, groups) if rank != reference else program
        if carried is not None:
            ops[rank] = carried
            continue
        notes.append(f"majority: rank {rank} has no group of some kind rank {reference}'s program uses; "
                     + ("left silent" if rank in silent else "replayed as recorded"))
        if rank in silent:
            still_silent.append(rank)
    notes.append(f"majority: every rank runs rank {reference}'s program ({len(program)} ops) on its own groups")
    return still_silent


def _carried(op: dict, group: str, groups: _Groups) -> dict:
    """The op on another group of its kind: roots and peers keep their place in the group."""
    carried = dict(op, group=group)
    source, target = groups.ranks(op["group"]), groups.ranks(group)
    for key in ("root", "peer"):
        if carried.get(key) is not None and carried[key] in source:
            carried[key] = target[source.index(carried[key])]
    return carried
