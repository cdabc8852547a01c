"""Line up the seq ids of groups whose members' buffers cannot number them.

A torchcomms recorder counts every op of the process with one counter. Once its ring buffer
wraps (or the recorder is reset), a group's own numbers are lost: the loader numbers each
group's ops in buffer order from the oldest op the buffer still holds, and marks the dump
`relative_seqs`. Each member's numbers then start at a different op of the group.

They are lined up by completion. A collective completes on all its members or on none, so every
member's last completed op of a group is the same collective, and the group's first op in flight
follows it on every member. Each relative member is shifted so that its completed ops end where
the others' do: where a member holds group numbers of its own (its buffer starts at the process's
first op), they are the reference; else the numbers count from the oldest op any member holds,
and the group's #n is not its sibling groups' #n (the analysis does not compare them).

A member that holds none of a group's completed ops starts at the group's first op in flight,
where its buffer holds something completed before (so it reaches back that far). A group is
left unaligned, and the verdict inconclusive, where completion cannot decide: a member's dump
records no completion, its completed ops do not come first, it holds nothing completed, or the
ops the members completed at one number differ.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from ..analysis.align import format_ranks, tracks_completion
from .groups import GroupTable
from ..loader import process_counter_note, renumber_per_group
from .runs import make_runs
from ..types import SEQ_PROCESS, SEQ_PROCESS_WRAPPED, SEQ_UNCLEAR, Dump, Group, int_column


@dataclass
class Anchoring:
    notes: list[str] = field(default_factory=list)
    unaligned: list[tuple[Group, str]] = field(default_factory=list)  # (group, why its members cannot be lined up)
    renumbered: set[Group] = field(default_factory=set)  # numbered from the oldest op held, not by the group's own count


@dataclass
class _Member:
    rank: int
    positions: list[int]  # buffer indices of the group's collectives, in buffer order
    completed: int  # how many of its numbers, from its first, completed


def anchor_relative_seqs(dumps: dict[int, Dump], table: GroupTable) -> Anchoring:
    """Shift the seq ids of relative dumps so that each group's members line up (in place: this
    belongs to loading, before the analysis reads the dumps); say what could not be lined up."""
    result = Anchoring()
    _adopt_process_counter(dumps, result)
    relative = {rank for rank, dump in dumps.items() if dump.relative_seqs}
    if not relative:
        return result
    shifts: dict[int, dict[int, int]] = {rank: {} for rank in relative}  # rank -> buffer index -> shift
    for group in table.groups:
        if not relative.intersection(group.ranks):
            continue
        members, why = _members(group, dumps, table)
        if why is None:
            why = _shift(group, members, dumps, relative, shifts)
        if not members.keys() - relative:
            result.renumbered.add(group)
        if why is not None:
            result.unaligned.append((group, why))
    for rank, by_position in shifts.items():
        entries = dumps[rank].entries
        if not any(by_position.values()):
            continue
        seqs = list(entries.collective_seq_id)
        for position, shift in by_position.items():
            seqs[position] += shift
        entries.collective_seq_id = int_column(seqs)
        entries.runs = make_runs(entries)
    lined_up = sorted(relative - {r for g, _ in result.unaligned for r in g.ranks})
    if lined_up:
        result.notes.append(f"rank(s) {format_ranks(lined_up)}: groups lined up by their completed ops (process-wide seq ids, "
                            "buffer wrapped or reset); seq ids count from the oldest op any member's buffer holds")
    return result


def _adopt_process_counter(dumps: dict[int, Dump], result: Anchoring) -> None:
    """Dumps whose seq ids fit a per-group and a per-process counter alike (a short buffer shows
    no gap) are read as the job's other dumps are, where some of them count per process."""
    if not any(d.seq_counter in (SEQ_PROCESS, SEQ_PROCESS_WRAPPED) for d in dumps.values()):
        return
    unclear = [rank for rank, d in dumps.items() if d.seq_counter == SEQ_UNCLEAR]
    for rank in unclear:
        dump = dumps[rank]
        counter = renumber_per_group(dump.entries, dump.restarted)
        dump.entries.runs = make_runs(dump.entries)
        dumps[rank] = replace(dump, seq_counter=counter)
    if unclear:
        result.notes.append(f"rank(s) {format_ranks(unclear)}: seq ids show no gap in view, but the other dumps' count "
                            f"every op of the process: read the same way ({process_counter_note(SEQ_PROCESS_WRAPPED)})")


def _members(group: Group, dumps: dict[int, Dump], table: GroupTable) -> tuple[dict[int, _Member], str | None]:
    members: dict[int, _Member] = {}
    for rank in group.ranks:
        dump = dumps.get(rank)
        if dump is None:
            continue
        entries = dump.entries
        positions: list[int] = []
        for name, run in (entries.runs or make_runs(entries)).items():
            if table.group_of(rank, name) is group:
                positions.extend(p for p in run.positions if not entries.kinds[entries.kind[p]].is_p2p)
        if not positions:
            continue
        positions.sort()
        if dump.relative_seqs and not tracks_completion(dump):
            return members, f"rank {rank}'s dump records no completion, so its ops cannot be placed against the others'"
        completed = _completed_prefix(entries, positions)
        if completed is None:
            return members, f"rank {rank} completed ops of it after ops still in flight, so completion cannot place them"
        if dump.relative_seqs and not completed and not _completed_before(entries, positions[0]):
            return members, (f"rank {rank}'s buffer holds no completed op of it, nor anything completed before its first "
                             "op in it, so where its ops start cannot be told")
        members[rank] = _Member(rank, positions, completed)
    return members, None


def _completed_before(entries, position: int) -> bool:
    """Whether an op older than `position` completed: the buffer reaches back past the ops in
    flight, so a member with none of a group's completed ops holds the group's first op in flight."""
    completed = entries.states.index("completed") if "completed" in entries.states else None
    return completed is not None and completed in entries.state[:position]


def _completed_prefix(entries, positions: list[int]) -> int | None:
    """How many of the group's numbers, from the member's first, completed (every entry of a
    number completed); None when a completed number follows one that did not complete."""
    done: dict[int, bool] = {}
    for p in positions:
        seq = entries.collective_seq_id[p]
        done[seq] = done.get(seq, True) and entries.states[entries.state[p]] == "completed"
    flags = [done[s] for s in sorted(done)]
    count = flags.index(False) if False in flags else len(flags)
    return None if any(flags[count:]) else count


def _shift(group: Group, members: dict[int, _Member], dumps: dict[int, Dump], relative: set[int],
           shifts: dict[int, dict[int, int]]) -> str | None:
    """Record each relative member's shift; why the group cannot be lined up, or None."""
    if not relative & members.keys():
        return None
    anchored = [m for r, m in members.items() if r not in relative]
    if anchored:  # members with numbers of their own: the number after their last completed one is the reference
        boundary = Counter(_first_in_flight(dumps[m.rank].entries, m) for m in anchored).most_common(1)[0][0]
    else:
        boundary = max(m.completed for r, m in members.items() if r in relative) + 1
    placed: dict[int, dict[int, str]] = {}  # number -> rank -> op, for completed numbers
    for rank, member in members.items():
        entries = dumps[rank].entries
        shift = boundary - 1 - member.completed if rank in relative else 0
        if rank in relative:
            shifts[rank].update(dict.fromkeys(member.positions, shift))
        for p in member.positions:
            seq = entries.collective_seq_id[p] + shift
            if seq < boundary:
                placed.setdefault(seq, {})[rank] = entries.kinds[entries.kind[p]].op
    for seq, ops in sorted(placed.items()):
        if len(set(ops.values())) > 1:
            return (f"its members completed different ops at one place once lined up by completion "
                    f"({', '.join(f'rank {r}: {op}' for r, op in sorted(ops.items())[:4])}{', ...' if len(ops) > 4 else ''}), "
                    "so the lining up is in doubt")
    return None


def _first_in_flight(entries, member: _Member) -> int:
    """The number of a member's first op not completed (one past its last, where all completed)."""
    seqs = sorted({entries.collective_seq_id[p] for p in member.positions})
    return seqs[member.completed - 1] + 1 if member.completed else seqs[0]

