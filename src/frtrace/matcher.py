"""Match every process group's collectives across its ranks and find who caused the desync.

A pure function of its input: `analyze(dumps, table)` reads the typed dumps and returns an
Analysis; it never mutates what it was given and never reads the environment. The steps, each a
module: align (units per rank and group, indexed by sequence id), compare (each aligned
collective across its ranks), waitgraph (who is blocked waiting for whom), verdict (root cause,
culprits and the headline).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from .reading.anchor import Anchoring
from .analysis.align import Codes, GroupView, Track, build_tracks, format_ranks, tracks_completion, unit_label, unknown_names
from .analysis.collective_check import Checker
from .analysis.moments import late_arrivals, moments_by_name, stale_ranks, unlogged_notes
from .errors import display_path
from .reading.groups import GroupTable
from .types import AgreedRun, Analysis, Checks, CollectiveCheck, Dump, Finding, Group
from .analysis.p2p import match_p2p
from .analysis.verdict import conclude
from .analysis.waitgraph import WaitGraph, blocker_of

__all__ = ["analyze", "format_ranks"]


def analyze(dumps: dict[int, Dump], table: GroupTable, notes: Iterable[str] = (), anchoring: Anchoring | None = None,
            unanswered: frozenset[int] = frozenset(), stacks: dict | None = None,
            unasked: frozenset[int] = frozenset()) -> Analysis:
    """Match the collectives of every group across its ranks and name the culprit of a desync.

    `notes` are earlier layers' remarks, carried into Analysis.warnings. `anchoring` says how
    the seq ids of process-wide counters were lined up (anchor.py): groups numbered from the
    oldest op held are never compared with their siblings by number, and where a group could
    not be lined up the verdict is inconclusive, whatever the (unreliable) matching finds.
    `unanswered`: ranks without a dump because they did not answer frtrace live (said so);
    `unasked`: because frtrace live had no address to ask them at (nothing known of their process).
    `stacks`: ranks' Python threads (reading.stacks), read beside the dumps: they name a cause.
    """
    anchoring = anchoring or Anchoring()
    notes = [*notes, *anchoring.notes, *table.warnings]
    tracks_by_rank: dict[int, dict[Group, Track]] = {}
    codes = Codes(dumps)
    cut: dict = {}  # coalesced runs cut into units, shared by the ranks alike
    for rank, dump in dumps.items():
        tracks_by_rank[rank], rank_notes = build_tracks(dump, table, codes, cut)
        notes.extend(rank_notes)
        if dump.notes:
            notes.extend(f"{display_path(dump.path)}: {n}" for n in dump.notes)
    tracking = {rank: tracks_completion(dump) for rank, dump in dumps.items()}
    notes.extend(unknown_names(dumps))
    moments = moments_by_name(dumps)
    notes.extend(unlogged_notes(dumps, table, moments))
    stale = stale_ranks(dumps, tracks_by_rank, table, moments, anchoring.renumbered,
                        frozenset(group for group, _ in anchoring.unaligned), codes)
    silent = frozenset(rank for rank, dump in dumps.items() if dump.recorder_off)
    unseen = frozenset(stale) | silent

    views: dict[Group, GroupView] = {}
    for group in table.groups:
        members = {r: tracks_by_rank[r][group] for r in group.ranks if r in tracks_by_rank and group in tracks_by_rank[r]}
        views[group] = GroupView(group, members, dumps, codes, own_numbers=group not in anchoring.renumbered, unseen=unseen)
    siblings: dict[tuple, list[GroupView]] = defaultdict(list)
    for view in views.values():
        desc = view.group.desc
        if desc and desc not in ("undefined", "default_pg") and view.own_numbers:
            siblings[(desc, view.size)].append(view)

    findings: list[Finding] = []
    checks: list[CollectiveCheck | AgreedRun] = []
    frontier: dict[Group, int] = {}
    for key, view in views.items():
        group = view.group
        checker = Checker(view, siblings.get((group.desc, view.size), []))
        first_mismatch = None
        seqs = view.seqs()
        i = 0
        while i < len(seqs):
            seq = seqs[i]
            through = view.agreed_through(seq)
            if through >= seq:  # a run of agreed seq ids nobody lacks: one part, no check made per seq id
                checks.append(AgreedRun(group, seq, through, view))
                i += through - seq + 1  # seqs holds each seq id of the reference's range, in order
                continue
            i += 1
            missing = view.not_issued(seq)
            if missing and key not in frontier:
                frontier[key] = seq
            if view.agreed(seq):  # every issuer holds the same kind: nothing to compare
                checks.append(CollectiveCheck(group, seq, missing, None, view, agreed=True))
                continue
            if view.alike(seq):  # a coalesced group every issuer holds alike: likewise
                checks.append(CollectiveCheck(group, seq, missing, None, view))
                continue
            units = view.issuers(seq)
            verdict = checker.check(seq, units)
            checks.append(CollectiveCheck(group, seq, missing, verdict.kind if verdict else None, view))
            if verdict and first_mismatch is None:
                first_mismatch = verdict
                op = Counter(map(unit_label, units.values())).most_common(1)[0][0]
                findings.append(Finding(verdict.kind, group, seq, None, op, verdict.offenders,
                                        group.ranks, verdict.detail, decided=verdict.decided))

    findings.extend(late_arrivals(dumps, table, moments, unseen, tracks_by_rank))
    p2p_findings, unmatched, p2p_notes, partner_done = match_p2p(views, dumps, tracking, unseen)
    findings.extend(p2p_findings)
    notes.extend(p2p_notes)

    undone: dict = {}  # the positions not completed of each state column ranks share
    blockers = {rank: blocker_of(dumps[rank], tracks_by_rank[rank], views, table, tracking[rank], undone) for rank in dumps}
    graph = WaitGraph(views, blockers, unmatched, dumps, tracking, unanswered, unasked, partner_done)
    findings.extend(graph.missing_findings(frontier))
    findings.extend(graph.stuck_findings())

    return conclude(dumps, table, findings, Checks(checks), graph, blockers, notes, anchoring.unaligned, stacks or {},
                    stale, silent)
