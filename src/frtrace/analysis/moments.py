"""Time as evidence, between aligning the groups and building the wait-for graph: which ranks'
dumps were taken earlier than their peers', and which member issued an op after its peers had
given up on it.

A collective that waits for every member (not a rooted one: a broadcast's root finishes before
some receivers issue it) and finished on one member was issued by every member. Which ones each
dump shows finished: reading/progress.py (`state`; gloo's `retired` on an op created its timeout
before the rank's newest op), or the rank's own buffer holding two whole steps after it. A member
whose dump ends before such a collective was dumped earlier: a stale dump. What it did at the end
is unknown, so it is never named for an op it lacks, and the analysis reads it as a member whose
position past its dump is not known (align.GroupView, verdict._without_unseen). That is said,
never guessed.

A member whose op was created more than the op's timeout after its peers' (their deadline and a
second for clocks) arrived after they had given up: it is the culprit, they are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..reading.groups import GroupTable
from ..types import Dump, Finding, Group, GroupMoment
from .size_rules import ROOTED_OPS
from .align import Track, by_number, ranks_word
from .steps import buffer_of, on_step

_NS_PER_MS = 1_000_000
_CLOCKS_NS = 1_000_000_000  # what the clocks of two hosts may differ by, beside a timeout
_WHOLE_STEPS = 2  # whole steps of its own after an op that show a rank waited for it
_LOOK_BACK = 64  # a track's latest collectives read for one completed (torchcomms' lined-up groups)
_NO_MOMENTS: dict[str, GroupMoment] = {}  # a rank whose dump says nothing of its groups' moments (never changed)


@dataclass(frozen=True, slots=True)
class Stale:
    """Why a rank's dump is older than its peers': it ends at #last of `group`, where `witness`
    shows #joined finished, which every member joined."""

    rank: int
    group: Group
    last: int  # the rank's last collective in the group
    joined: int
    witness: int
    how: str  # what showed #joined finished

    def said(self) -> str:
        if self.last:
            held = f"ends at #{self.last} of {self.group.label}"
        else:
            held = f"holds no op of {self.group.label}"
        return (f"rank {self.rank}'s dump is older than its peers': it {held}, but rank {self.witness}'s shows #{self.joined} "
                f"finished ({self.how}), which rank {self.rank} must have joined; where rank {self.rank} was at the end "
                "cannot be told, so it is named for nothing it lacks")


def stale_ranks(dumps: dict[int, Dump], tracks_by_rank: dict[int, dict[Group, Track]], table: GroupTable,
                moments: dict[int, dict[str, GroupMoment]], renumbered=frozenset(), unaligned=frozenset(),
                codes=None) -> dict[int, Stale]:
    """Each rank whose dump is older than a collective of one of its groups that a member's dump
    shows finished (one that waits for every member): it ends before that op. The proof, by rank
    (the first group that shows it)."""
    witnesses = _Witnesses(dumps, table, codes)
    found: dict[int, Stale] = {}
    for group in table.groups:
        if group in unaligned:  # its members could not be lined up: their numbers say nothing of each other
            continue
        lasts = {}
        shown, first_shown = 0, None  # the highest joined_through of the members' moments, its first member
        name = group.name
        for rank in group.ranks:
            dump = dumps.get(rank)
            if dump is None or dump.recorder_off:
                continue
            track = tracks_by_rank[rank].get(group)
            if track is not None and track.first_seq is not None:
                lasts[rank] = track.last_seq
            elif _shows_its_moment(dump):
                lasts[rank] = 0
            else:  # an empty buffer, or one that wrapped past the group, shows no moment in it (a
                continue  # recorder that keeps only ops in flight, NVRx, holds nothing finished)
            moment = moments.get(rank, _NO_MOMENTS).get(name)  # read here: one pass over the members
            if moment is not None and moment.joined_through > shown:
                shown, first_shown = moment.joined_through, rank
        if len(lasts) < 2:
            continue
        # (a member holding the op unfinished while another completed it is no older dump: an op
        # that completed on some members and not on others is stuck below PyTorch)
        joined, witness, how = witnesses.best(group, lasts, tracks_by_rank, min(lasts.values()), group in renumbered,
                                              (shown, first_shown))
        if witness is None:
            continue
        for rank, last in lasts.items():
            if rank not in found and last < joined:
                found[rank] = Stale(rank, group, last, joined, witness, how)
    return found


def _shows_its_moment(dump: Dump) -> bool:
    """Whether a dump holding no op of a group still shows where its rank was: its buffer never
    wrapped and it holds finished ops (a recorder that keeps only ops in flight holds none)."""
    entries = dump.entries
    return bool(len(entries)) and not dump.wrapped and ("completed" in entries.states or entries.from_gloo)


class _Witnesses:
    """What members' dumps show finished in a group: from the worker's reading (state, or gloo's
    retired long before its newest op), else from a member's own buffer: an op followed by two
    whole steps of the step the rank repeats was waited for (a program waits for a step's ops
    before the next step), however its ops were issued."""

    def __init__(self, dumps: dict[int, Dump], table: GroupTable, codes=None) -> None:
        self.dumps = dumps
        self.table = table
        self.codes = codes  # align.Codes: a track's states, where the worker's numbers are not the track's
        self.cuts: dict[int, int | None] = {}  # rank -> the buffer index with whole steps after it

    def best(self, group: Group, lasts: dict[int, int], tracks_by_rank, behind: int, renumbered: bool,
             shown: tuple[int, int | None]) -> tuple[int, int | None, str]:
        """(the highest collective of `group` past `behind` a member shows finished, that member,
        how), from every member's reading (`shown`: the highest joined_through of the moments of the
        members in `lasts`, and its first member); where none shows one, from the furthest member's
        own steps (read for that one member only: a buffer costs a pass over its entries). A group
        whose seq ids were lined up anew (anchor.py) is read from its members' tracks: the worker's
        numbers are the buffer's own."""
        joined, witness = behind, None
        if renumbered:
            for rank in lasts:
                done = self._completed_in_track(tracks_by_rank[rank].get(group), behind)
                if done > joined:
                    joined, witness = done, rank
        elif shown[0] > joined:
            joined, witness = shown
        if witness is not None:
            how = "completed" if not self.dumps[witness].entries.from_gloo else "retired, and its rank issued ops past its timeout"
            return joined, witness, how
        if max(lasts.values()) < behind + 1 + _WHOLE_STEPS:  # an op of a step recurs in every step: too few after it
            return behind, None, ""
        furthest = max(lasts, key=lambda r: (lasts[r], -r))
        seq = self._after_steps(furthest, tracks_by_rank[furthest].get(group), behind)
        return (seq, furthest, "its rank went through whole steps after it") if seq > behind else (behind, None, "")

    def _completed_in_track(self, track: Track | None, behind: int) -> int:
        """The highest collective of the track past `behind`, waiting for every member, that it
        holds completed (0: none, or no states to read)."""
        if track is None or track.first_seq is None or self.codes is None:
            return 0
        lowest = max(track.first_seq, behind + 1, track.last_seq - _LOOK_BACK)  # the latest ops: a wait is near the end
        for seq in range(track.last_seq, lowest - 1, -1):
            if track.end_state(seq, self.codes) == "completed":
                unit = track.unit(seq)
                if unit and all(e.op not in ROOTED_OPS for e in unit):
                    return seq
        return 0

    def _after_steps(self, rank: int, track: Track | None, behind: int) -> int:
        """The highest collective of the track past `behind` that waits for every member and that
        the rank's buffer follows with whole steps (0: none)."""
        if track is None or track.first_seq is None:
            return 0
        cut = self._cut(rank)
        if cut is None:
            return 0
        for seq in range(track.last_seq, max(track.first_seq, behind + 1) - 1, -1):
            position = track.first_position(seq)
            if position is not None and position <= cut:
                unit = track.unit(seq)
                if unit and all(e.op not in ROOTED_OPS for e in unit):
                    return seq
        return 0

    def _cut(self, rank: int) -> int | None:
        """The buffer index of the rank's last op with _WHOLE_STEPS whole steps after it; None where
        its buffer repeats no step of two kinds of op or more. A step of one kind (the same
        all_reduce again and again) may be a step's async ops (DDP's buckets), not steps."""
        if rank not in self.cuts:
            dump = self.dumps[rank]
            buffer = buffer_of(dump, lambda entry: self.table.group_of(rank, entry.pg_name))
            step = on_step(buffer, buffer.ops[-1][0]) if buffer.ops else None
            after = len(step[0]) * _WHOLE_STEPS if step and len(set(step[0])) > 1 else 0
            self.cuts[rank] = buffer.ops[-1 - after][0] if after and len(buffer.ops) > after else None
        return self.cuts[rank]


def moments_by_name(dumps: dict[int, Dump]) -> dict[int, dict[str, GroupMoment]]:
    """rank -> group name -> what its dump says of the group's progress in time."""
    return {rank: {m.pg_name: m for m in dump.moments} for rank, dump in dumps.items() if dump.moments}


def late_arrivals(dumps: dict[int, Dump], table: GroupTable, moments: dict[int, dict[str, GroupMoment]],
                  unseen: frozenset[int], tracks_by_rank: dict[int, dict[Group, Track]]) -> list[Finding]:
    """A finding per group whose last collective some members issued after the others' deadline
    (their creation time plus its timeout) had passed, where no member's dump shows it finished
    and every member with a dump holds it last: the late members are its ranks. `unseen`: ranks
    whose dump says nothing of the end (stale, or their recorder was off). The members' last ops
    are compared as the tracks number them (lined up across ranks where the seq ids were not)."""
    findings = []
    for group in table.groups:
        held = {}
        lasts = set()
        name = group.name
        for rank in group.ranks:
            if rank not in dumps or rank in unseen:
                continue
            moment = moments.get(rank, _NO_MOMENTS).get(name)
            # a member whose last op finished, or holds no deadline, rules the group out: left at
            # once (the last ops of all but a hung group are done: most groups end at their first member)
            if moment is None or moment.last_done or not moment.last_created_ns or not moment.last_timeout_ms:
                break
            track = tracks_by_rank[rank].get(group)
            if track is None or track.first_seq is None:
                break
            held[rank] = moment
            lasts.add(track.last_seq)
        else:
            if len(held) < 2 or len(lasts) != 1:
                continue
            first = min(held, key=lambda r: held[r].last_created_ns)
            deadline = held[first].last_created_ns + held[first].last_timeout_ms * _NS_PER_MS + _CLOCKS_NS
            late = sorted(r for r, m in held.items() if m.last_created_ns > deadline)
            if not late or len(late) == len(held):
                continue
            seq = next(iter(lasts))
            unit = tracks_by_rank[first][group].unit(seq)
            entry = unit[-1] if unit else None
            op = entry.op if entry is not None else "op"
            gap = (min(held[r].last_created_ns for r in late) - held[first].last_created_ns) / 1e9
            detail = (f"{ranks_word(late)} issued it {gap:.1f} s after rank {first}, past its timeout of "
                      f"{held[first].last_timeout_ms / 1000:g} s: the others had given up on it by then")
            findings.append(Finding("late_arrival", group, seq, None, op, tuple(late), group.ranks, detail))
    return findings


def unlogged_notes(dumps: dict[int, Dump], table: GroupTable, moments: dict[int, dict[str, GroupMoment]]) -> list[str]:
    """A note per group where gloo's pg_status counts more collectives enqueued than the rank's
    buffer ends at: ops the recorder did not log (monitored_barrier logs none, and on its root
    pg_status counts its sends and receives). Said, never used as evidence of who is where."""
    beyond: dict[tuple[Group, int, int], list[int]] = {}  # (group, last seq, count) -> ranks
    for rank, by_name in moments.items():
        if not dumps[rank].entries.from_gloo:  # other recorders' counts may be op ids (hook-based)
            continue
        for name, moment in by_name.items():
            group = table.group_of(rank, name)
            if group is not None and moment.last_seq and moment.status_enqueued > moment.last_seq:
                beyond.setdefault((group, moment.last_seq, moment.status_enqueued), []).append(rank)
    return [f"{ranks_word(sorted(ranks))}: pg_status counts {count} collectives enqueued in {group.label}, but "
            f"{by_number(ranks, 'its', 'their')} buffer ends at #{last}: ops the recorder did not log "
            "(gloo logs no send or recv, and no monitored_barrier)"
            for (group, last, count), ranks in sorted(beyond.items(), key=lambda item: (item[0][0].name, item[0][1:]))]

