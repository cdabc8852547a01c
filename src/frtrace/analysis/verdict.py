"""The verdict: which findings are the root cause, who the culprits are, and the one-line
headline a person can act on."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from . import size_rules
from .align import by_number, count_of, ranks_word, unit_label
from ..types import Analysis, Checks, Entry, Finding, StackApart
from ..reading.stacks import (Thread, first_apart, frame_text, in_data_loader, in_torch_distributed, main_thread,
                              outline, place)
from .waitgraph import NEVER_STARTED, WaitGraph


def conclude(dumps, table, findings, checks: Checks, graph: WaitGraph, blockers, notes, unaligned=(), stacks=None,
             stale=None, silent=frozenset()) -> Analysis:
    """The verdict from everything the matcher found. `stale`: ranks whose dump is older than
    their peers' (moments.Stale, by rank); `silent`: ranks whose recorder was off. Neither is
    named for an op it lacks: what they did at the end is unknown, and said so."""
    loaded = tuple(sorted(dumps))
    missing = tuple(r for r in table.world if r not in dumps)
    group_count = len(table.groups)
    matched = checks.matched()
    stale = stale or {}
    notes = [*notes, *_moment_notes(stale, silent)]
    mains = {rank: thread for rank, found in (stacks or {}).items() if (thread := main_thread(found))}
    places = {rank: at for rank, thread in mains.items() if (at := place(thread))}  # each rank's, found once
    late = [f for f in findings if f.kind == "late_arrival"]

    mismatches = [f for f in findings if f.kind in ("type_mismatch", "size_mismatch", "dtype_mismatch") and f.decided]
    graph_culprits, undecided_cycles, evidence = graph.culprits()
    graph_culprits, unseen_said = _without_unseen(graph_culprits, graph, stale or {}, silent, table.short)
    undecided_cycles = [*undecided_cycles, *unseen_said]
    stuck = [f for f in findings if f.kind == "not_completed"]
    below = _stuck_below(graph_culprits, stuck) if not mismatches else []
    if below:  # the culprits sit in ops all their members issued and none finished: a hang below PyTorch
        graph_culprits, undecided_cycles, evidence = [], [], []
    findings = _with_ran_ahead(findings, graph)
    culprit_entries: dict[int, Entry] = {}
    root_ids: set[int] = set()
    culprits: list[int] = []
    named_by: dict[int, str] = {}  # culprit -> what named it, where its cause reads it: "mismatch", "late", "stuck" or "gpu"
    undecidable: set[int] = set()  # culprits in no recorded op where gloo hides sends and receives among several

    def blame(chosen: list[Finding]) -> None:
        """These findings are the root cause; their ranks the culprits."""
        for finding in chosen:
            root_ids.add(id(finding))
            culprits.extend(finding.ranks)

    headline = ""

    if unaligned:
        group, why = unaligned[0]
        verdict = "inconclusive"
        more = f" (+{len(unaligned) - 1} more group(s))" if len(unaligned) > 1 else ""
        headline = f"the ops of {group.label} cannot be lined up across its ranks: {why}{more}"
        evidence = [f"undecided: {group.label}'s seq ids count every op of each process and the buffers wrapped; {why}"]
    elif mismatches:
        first = min(mismatches, key=lambda f: _first_entry_index(f, checks))
        blame(mismatches)
        for rank in culprits:
            entry = _entry_at(checks, first, rank)
            if entry is not None:
                culprit_entries[rank] = entry
        headline = _mismatch_headline(first, checks) + (f" (+{len(mismatches) - 1} more group(s) with a mismatch)" if len(mismatches) > 1 else "")
        named_by.update(dict.fromkeys(culprits, "mismatch"))
        verdict = "desync"
        evidence = [_mismatch_evidence(f, checks) for f in mismatches]
    elif late:
        blame(late)
        named_by.update(dict.fromkeys(culprits, "late"))
        verdict = "desync"
        first = late[0]
        subject = ranks_word(first.ranks)  # the detail says when: "rank 2 issued it 7.0 s after rank 1, past ..."
        headline = (f"{subject} issued {first.op} #{first.collective_seq_id} of {first.group.label} "
                    f"{first.detail.removeprefix(f'{subject} issued it ')}")
        if len(late) > 1:
            headline += f" (+{len(late) - 1} more group(s) with a late arrival)"
        evidence = [f"late arrival: {f.detail}" for f in late]
        for rank in culprits:
            entry = next((e for e in reversed(dumps[rank].entries) if e.pg_name == first.group.name and not e.is_p2p
                          and e.collective_seq_id == first.collective_seq_id), None) if rank in dumps else None
            if entry is not None:
                culprit_entries[rank] = entry
    elif graph_culprits:
        by_op: dict[tuple | None, list[int]] = defaultdict(list)
        missed: dict[int, list[tuple]] = defaultdict(list)  # rank -> the collectives it never issued, made once
        for f in findings:
            if f.kind == "missing_ranks" and f.collective_seq_id is not None:
                for rank in f.ranks:
                    missed[rank].append(("coll", f.group.key, f.collective_seq_id))
        for rank, key in graph_culprits:
            first = graph.first_missed(rank, missed[rank]) if key in missed.get(rank, ()) else None
            if first is not None and first != key:  # its peers' programs show an earlier op it never joined
                evidence.append(f"program order: the first op rank {rank} never joined is {graph.blocker_of_op[first].describe()}, "
                                f"before {graph.blocker_of_op[key].describe()}")
                key = first
            by_op[key].append(rank)
            culprits.append(rank)
        root_findings = [f for f in findings if f.kind in ("missing_ranks", "p2p_unmatched", "extra_op") and set(f.ranks) & set(culprits)]
        for f in root_findings:
            if f.kind == "p2p_unmatched" or ("coll", f.group.key, f.collective_seq_id) in by_op:
                root_ids.add(id(f))
        parts = []
        for key, ranks in sorted(by_op.items(), key=lambda item: min(item[1])):
            parts.append(_missing_said(key, ranks, graph, blockers, dumps))
            for rank in ranks:
                if blockers.get(rank) is not None:
                    culprit_entries[rank] = blockers[rank].entry
        # the first line, which people paste: each culprit and what it did, where the first one is;
        # where each is in full, on the evidence line
        first, further = parts[0], defaultdict(list)  # what the further culprits did -> who did it
        for part in parts[1:]:
            further[part.did].extend(part.ranks)
        said = [f"{ranks_word(sorted(ranks))} {did}" for did, ranks in list(further.items())[:MAX_FURTHER_SAID]]
        if len(further) > MAX_FURTHER_SAID:
            said.append(f"and {len(further) - MAX_FURTHER_SAID} more, see the findings")
        headline = "; ".join([f"{first.subject} {first.did}{first.waiting}", *first.short, *said])
        evidence.extend(f"where: {clause}" for part in parts for clause in part.full if clause not in headline)
        # ranks that each missed another op: each is a desync of its own (the wait-for graph holds
        # a sink or a cycle for each)
        if len(parts) > 1 and graph.p2p_unrecorded and any(r in graph.joined_by_all for r in culprits):
            # a rank that waits for nobody the dumps show may wait in a send or recv for another culprit
            undecidable.update(r for r in culprits if r in graph.joined_by_all)
            headline += f" ({len(parts)} desyncs; which caused which cannot be told)"
            evidence.append(f"undecided: which of the {len(parts)} desyncs caused the other: gloo records no send or "
                            "recv, and a rank in no collective may wait in one for another culprit")
        elif len(parts) > 1:
            headline += f" ({len(parts)} independent desyncs)"
        # another deadlock the dumps cannot decide: said, not hidden, on a line of its own (the
        # report's "Undecided:"), never in the first line, which people paste
        for text in undecided_cycles + graph.undecided_behind:
            evidence.append(f"undecided: {text}")
        verdict = "desync"
    else:
        undecided = [f for f in findings if not f.decided]
        others = [f for f in findings if f.decided and f.kind not in ("not_completed",)]
        if below:
            others = [f for f in others if f.kind not in ("missing_ranks", "extra_op")]  # waits for the stuck ranks
            stuck = below + [f for f in stuck if f not in below]
        if undecided or undecided_cycles:
            verdict = "inconclusive"
            headline = (_few_waits(undecided_cycles[0]) if undecided_cycles else
                        f"{undecided[0].kind.replace('_', ' ')} in {undecided[0].op} #{undecided[0].collective_seq_id or undecided[0].p2p_seq_id} "
                        f"of {undecided[0].group.label}: {undecided[0].detail}")
            root_ids.update(id(f) for f in undecided)
            evidence = ["undecided: " + (undecided_cycles[0] if undecided_cycles else undecided[0].detail)]
        elif others:
            verdict = "desync"
            blame(others)
            f = others[0]
            headline = f"{f.kind.replace('_', ' ')} in {f.op} of {f.group.label}: {f.detail}"
            evidence = [f"{f.kind.replace('_', ' ')}: {f.detail}"]
        elif stuck and (unseen := _unseen_in(stuck, stale, silent)):
            verdict = "inconclusive"
            f = stuck[0]
            headline = (f"{_stuck_op(f)} never completed on {ranks_word(f.ranks)}, but "
                        f"{unseen}: whether {by_number(f.ranks, 'it waits', 'they wait')} for them cannot be told")
            root_ids.update(id(s) for s in stuck)
            evidence = [f"undecided: {headline}"]
        elif stuck:
            verdict = "stuck"
            blame(stuck)
            for finding in reversed(stuck):  # the first op that holds a rank says how it is stuck
                named_by.update(dict.fromkeys(finding.ranks, "gpu" if _gpu_never_reached(finding) else "stuck"))
            f = stuck[0]
            op = f"{_stuck_op(f)}, which {_issued_by(f)}"
            if _gpu_never_reached(f):
                headline = (f"{ranks_word(f.ranks)} never started {op} and the others started: "
                            f"{by_number(f.ranks, 'its GPU', 'their GPUs')} never reached it (a kernel before it never ended)")
            else:
                headline = f"{ranks_word(f.ranks)} never completed {op}: stuck below PyTorch (NCCL, network or a GPU)"
            if len(stuck) > 1:
                headline += f" (and {count_of(len(stuck) - 1, 'more stuck op')}, see the findings)"
            waiting = sorted({r for key, ranks in graph.waiters.items() for r in ranks
                              if set(graph.waits_on.get(key, ())) & set(f.ranks)} - set(f.ranks)) if below else []
            for rank in f.ranks:
                if blockers.get(rank) is not None:
                    culprit_entries[rank] = blockers[rank].entry
            evidence = [_stuck_evidence(s, alone=len(stuck) == 1) for s in stuck]
            if waiting:
                evidence.append(f"consequence: {ranks_word(waiting)} {by_number(waiting, 'waits', 'wait')} in other ops for "
                                "ranks stuck below PyTorch")
        elif unrecorded := _unrecorded_wait(dumps, table, mains, places):
            finding, verdict, said = unrecorded
            findings = [*findings, finding]
            if verdict == "desync":
                blame([finding])
                headline = said
            else:
                root_ids.add(id(finding))
                headline = said
            evidence = [f"stacks: {finding.detail}"]
        elif not any(d.entries for d in dumps.values()):
            verdict = "inconclusive"
            headline = "the dumps hold no entries (was the Flight Recorder buffer size set?)"
        else:
            verdict = "clean"
            headline = (f"{count_of(len(loaded), 'rank')}, {count_of(group_count, 'group')}, "
                        f"{count_of(matched, 'collective')} matched; no desync")
            if missing:
                headline += f" (no dump from {ranks_word(missing)}, and nobody waits for it)"
            evidence = ["every collective matched on every member that issued it; nobody waits for another rank"]
            if stale:
                headline += (f"; the dumps were taken at different moments ({ranks_word(sorted(stale))}'s "
                             f"{by_number(stale, 'is', 'are')} older, see the notes)")
            if silent:
                headline += f"; {ranks_word(sorted(silent))} recorded nothing (recorder off)"

    for rank in sorted(set(culprits)):
        failed = [check for check in (dumps[rank].health if rank in dumps else ()) if not check.passed]
        if len(failed) == 1:  # what it said is often the root cause itself: the device and its error
            evidence.append(f"health check: rank {rank}'s {failed[0].check} check failed"
                            + (f": {failed[0].detail}" if failed[0].detail else ""))
        elif failed:
            said = [check.failure_text() for check in failed[:4] if check.detail]
            evidence.append(f"health check: rank {rank}'s {', '.join(check.check for check in failed[:4])} checks failed"
                            + (f" ({'; '.join(said)})" if said else ""))
    causes = _causes(sorted(set(culprits)), named_by, undecidable, dumps, graph, set(mains))
    seen_in_stacks = []  # what the stacks showed: evidence of the cause, never of who the culprit is
    apart = _stacks_apart(sorted(set(culprits)), table.groups, mains)
    odd_said, unsaid = _odd_ones_said(apart, places)
    for rank, (cause, said, why) in _with_stacks(causes, undecidable, mains, places).items():
        causes[rank] = (cause, said)
        plain = f"rank {rank}'s Python stack: {places[rank]}"
        if rank in odd_said:  # the odd one out's line says where it is, and where its peers are: said once
            own, peers = odd_said[rank]
            odd_said[rank] = (why or own, peers)
        else:
            seen_in_stacks.append(f"stacks: {why or plain}")
    seen_in_stacks.extend(f"stacks: {own}; {peers}" for own, peers in odd_said.values())
    if unsaid:
        seen_in_stacks.append(f"stacks: and {unsaid} more ranks whose stacks are not their peers'")
    decided_by = "; ".join(dict.fromkeys(e for e in evidence if not e.startswith("undecided: ")))  # said on its own
    evidence.extend(seen_in_stacks)
    final = tuple(
        Finding(f.kind, f.group, f.collective_seq_id, f.p2p_seq_id, f.op, f.ranks, f.expected_ranks,
                f"{f.detail} [decided by {decided_by}]" if id(f) in root_ids and decided_by and f.decided
                and decided_by.partition(": ")[2] != f.detail else f.detail,  # never the detail said again
                id(f) in root_ids, f.decided)
        for f in findings
    )
    final = tuple(sorted(final, key=lambda f: (not f.root_cause, f.kind == "not_completed", f.group.ranks != table.world, f.group.name, f.collective_seq_id or 0)))
    return Analysis(
        verdict=verdict,
        headline=f"{verdict.upper()}: {headline}",
        culprit_ranks=tuple(sorted(set(culprits))),
        findings=final,
        groups=table.groups,
        checks=checks,
        ranks_loaded=loaded,
        ranks_missing=missing,
        culprit_entries=culprit_entries,
        warnings=tuple(notes),
        evidence=tuple(dict.fromkeys(evidence)),
        waits=tuple((graph.blocker_of_op[key].describe(), tuple(sorted(graph.waiters[key])), tuple(graph.waits_on[key]))
                    for key in graph.waits_on if key in graph.blocker_of_op),
        blocked_in={rank: (blocker.describe(), blocker.group, None if blocker.p2p else blocker.seq)
                    for rank, blocker in ((r, graph.blocker_of_op.get(k)) for r, k in graph.op_of.items()) if blocker},
        blocked_entries={rank: blocker.entry for rank in graph.op_of if (blocker := graph.blockers.get(rank))},
        causes=causes,
        cause=_one_cause(verdict, causes),
        stacks_apart=apart,
        stale={rank: proof.said() for rank, proof in sorted(stale.items())},
        no_evidence=tuple(sorted(silent)),
    )


def _without_unseen(graph_culprits: list[tuple[int, tuple | None]], graph: WaitGraph, stale: dict, silent: frozenset[int],
                    short: frozenset[tuple] = frozenset()) -> tuple[list[tuple[int, tuple | None]], list[str]]:
    """The wait-for graph's culprits less those the dumps cannot decide: a rank whose dump is
    older than the end or whose recorder was off (named for nothing), and a rank that seems to wait
    for nobody only because the members missing from its op are such ranks, or are members of its
    group no dump shows (`short`: inferred groups smaller than their siblings or shapes say), where
    no other member went on past that op (it may wait for them). What is set aside is said, once,
    as undecided."""
    unseen = set(stale) | set(silent)
    if not unseen and not short:
        return graph_culprits, []
    kept, said = [], []
    for rank, key in graph_culprits:
        why = None
        if rank in unseen:
            why = (f"whether {_unseen_word([rank], stale, silent)} holds the job up cannot be told: "
                   f"where it was at the end is not in its dump")
        elif (blocker := graph.joined_by_all.get(rank)) is not None and blocker.p2p is not None:
            if blocker.p2p.peer in unseen:  # its send or recv's partner: where it was is not in its dump
                why = (f"whether rank {rank}, in {blocker.describe()}, waits there for "
                       f"{_unseen_word([blocker.p2p.peer], stale, silent)} cannot be told")
        elif blocker is not None:
            view = graph.views[blocker.group.key]
            lacking = sorted(r for r in view.unseen if view.unit(blocker.seq, r) is None)
            # a member whose dump shows the end went on past the op: it was left, as the others read it
            passed = any(last > blocker.seq for r, last in view.known_last.items() if r != rank)
            if lacking and not passed:
                why = (f"whether rank {rank}, in {blocker.describe()}, waits there for {_unseen_word(lacking, stale, silent)} "
                       "cannot be told")
            elif blocker.group.key in short and not passed:
                why = (f"whether rank {rank}, in {blocker.describe()}, waits there for a member no dump shows "
                       f"({blocker.group.label} has {len(blocker.group.ranks)} of the members its siblings or shapes say) "
                       "cannot be told")
        if why is None:
            kept.append((rank, key))
        elif why not in said:
            said.append(why)
    return kept, said


def _unseen_word(ranks: list[int], stale: dict, silent: frozenset[int]) -> str:
    """'rank 8 (recorder off)', 'ranks 1,3 (dumps older than the end)'."""
    off = [r for r in ranks if r in silent]
    old = [r for r in ranks if r not in silent]
    parts = [f"{ranks_word(old)} ({by_number(old, 'dump', 'dumps')} older than the end)"] if old else []
    parts += [f"{ranks_word(off)} (recorder off)"] if off else []
    return " and ".join(parts)


def _unrecorded_wait(dumps, table, mains: dict, places: dict) -> tuple[Finding, str, str] | None:
    """Where the dumps show nobody waiting, the ranks whose Python stacks wait in a
    torch.distributed call that their dumps do not end in (monitored_barrier records nothing; a
    rank's dump may end before the op it waits in): (the finding, its verdict, the headline).
    Most ranks with a stack waiting there and the others elsewhere: the others are the culprits,
    by their stacks (desync). Waiting ranks and no majority, or no rank elsewhere: inconclusive.
    None where no stack waits in an op its dump does not show."""
    waiting: dict[int, str] = {}
    for rank, thread in mains.items():
        call = in_torch_distributed(thread)
        last = dumps[rank].entries[-1].op if rank in dumps and len(dumps[rank].entries) else None
        if call is not None and call != last:
            waiting[rank] = call
    if not waiting:
        return None
    elsewhere = sorted(r for r in mains if r not in waiting)
    group = next((g for g in table.groups if g.ranks == table.world), None) or max(table.groups, key=lambda g: len(g.ranks))
    calls = sorted(set(waiting.values()))
    call = calls[0] if len(calls) == 1 else "/".join(calls)
    waiters = ranks_word(sorted(waiting))
    unlogged = (f"{waiters} {by_number(waiting, 'waits', 'wait')} in {call} (distributed_c10d.py), which "
                f"{by_number(waiting, 'its dump does', 'their dumps do')} not record")
    if elsewhere and len(waiting) > len(elsewhere):
        there = "; ".join(f"rank {r} {places[r]}" for r in elsewhere[:MAX_ODD_SAID] if r in places)
        detail = (f"{unlogged}; {ranks_word(elsewhere)} {by_number(elsewhere, 'is', 'are')} elsewhere"
                  + (f" ({there})" if there else "") + ": the op the others wait in is one the recorder does not log")
        headline = (f"{ranks_word(elsewhere)} never joined {call}, which {waiters} {by_number(waiting, 'waits', 'wait')} in "
                    "(by the Python stacks: the Flight Recorder does not record it)")
        return Finding("unrecorded_op", group, None, None, call, tuple(elsewhere), group.ranks, detail), "desync", headline
    why = ("and no rank's stack is elsewhere" if not elsewhere
           else f"and as many ranks ({ranks_word(elsewhere)}) are elsewhere: which holds the job cannot be told")
    detail = f"{unlogged}, {why}"
    return (Finding("unrecorded_op", group, None, None, call, (), group.ranks, detail, decided=False), "inconclusive",
            f"the dumps show nobody waiting, but {detail}")


_NOTED_STALE = 3  # stale ranks said one by one; past it, the first and a count


def _moment_notes(stale: dict, silent: frozenset[int]) -> list[str]:
    """What the notes say of dumps taken at other moments, and of recorders that were off."""
    notes = []
    if stale:
        proofs = [stale[rank].said() for rank in sorted(stale)]
        notes.extend(proofs[:_NOTED_STALE])
        if len(proofs) > _NOTED_STALE:
            rest = sorted(stale)[_NOTED_STALE:]
            notes.append(f"and {ranks_word(rest)}: dumps older than their peers' likewise (the JSON's stale_ranks says why)")
    if silent:
        notes.append(f"{ranks_word(sorted(silent))} recorded nothing: {by_number(silent, 'its dump holds', 'their dumps hold')} "
                     "a version and no entries, groups or status (TORCH_FR_BUFFER_SIZE=0: the recorder was off), so "
                     f"where {by_number(silent, 'it', 'they')} stood cannot be told; named for nothing")
    return notes


def _unseen_in(stuck: list[Finding], stale: dict, silent: frozenset[int]) -> str:
    """Members of the stuck ops' groups whose dumps say nothing of the end, in words ('' if none)."""
    members = {r for f in stuck for r in f.group.ranks}
    old = sorted(members & set(stale))
    off = sorted(members & silent)
    parts = ([f"{ranks_word(old)}'s {by_number(old, 'dump is', 'dumps are')} older than the end"] if old else [])
    parts += [f"{ranks_word(off)} recorded nothing (recorder off)"] if off else []
    return " and ".join(parts)


UNSEEN = "in no op the dumps show: computing, loading data, or in a send or recv, which gloo does not record"
CAUSES = ("divergence", "compute_or_data_stall", "stuck_below_pytorch", "gpu_never_reached", "process_gone",
          "hardware", "unknown")


def _causes(culprits: list[int], named_by: dict[int, str], undecidable: set[int], dumps, graph: WaitGraph,
            with_stacks: set[int] = frozenset()) -> dict[int, tuple[str, str]]:
    """Why each culprit holds the job up, from everything the dumps show: (cause, said in words).

    A failed health check is the cause whatever the pattern; a rank without a dump is gone,
    unless a Python stack of it (`with_stacks`) shows its process alive (gloo dumps only from
    inside a collective: a rank stalled elsewhere never dumps); a
    rank that issued other ops than its peers (a mismatch, or it waits in an op they never
    issued) diverged; a rank in an op every member issued and none finished, or in a send or recv
    whose partner completed, is stuck below PyTorch, or its GPU never reached it; a rank in no
    collective computes or loads data, unless gloo, which records no send or recv, leaves several
    culprits whose order cannot be told."""
    causes = {}
    for rank in culprits:
        failed = [check for check in (dumps[rank].health if rank in dumps else ()) if not check.passed]
        how = named_by.get(rank)
        if failed:
            causes[rank] = ("hardware", f"health check failed: {failed[0].failure_text()}")
        elif rank not in dumps and rank in with_stacks:  # _with_stacks says where it is
            causes[rank] = ("compute_or_data_stall", "left no dump, but its Python stack shows its process alive, in no "
                            "collective: computing or loading data (gloo dumps only from inside a collective)")
        elif rank not in dumps and rank in graph.unasked:
            causes[rank] = ("unknown", "left no debug-server address for frtrace live to ask: it never started the debug "
                            "server; whether its process is alive cannot be told")
        elif rank not in dumps:
            causes[rank] = ("process_gone", "did not answer frtrace live: its process may be gone or its host unreachable"
                            if rank in graph.unanswered else "left no dump: its process is gone or its host unreachable")
        elif how == "gpu":
            causes[rank] = ("gpu_never_reached", "its GPU never reached the op: a kernel before it never ended")
        elif how == "late":
            causes[rank] = ("compute_or_data_stall", "issued the op after its peers had given up on it: it was computing "
                            "or loading data while they waited")
        elif graph.done_partner(blocker := graph.blockers.get(rank)) is not None:
            causes[rank] = ("stuck_below_pytorch", f"in {blocker.describe()}, whose partner completed: NCCL, the network or "
                            "its GPU (a kernel before it that never ended)")
        elif how == "stuck":
            causes[rank] = ("stuck_below_pytorch", "in an op every member issued and none finished: NCCL, the network or a GPU")
        elif how == "mismatch" or rank in graph.op_of:
            causes[rank] = ("divergence", "issued other ops than its peers: its program took another path")
        elif rank in undecidable:
            causes[rank] = ("unknown", UNSEEN)
        else:
            hidden = " (or in a send or recv, which gloo does not record)" if graph.p2p_unrecorded else ""
            causes[rank] = ("compute_or_data_stall", f"in no collective: computing or loading data{hidden}")
    return causes


def _with_stacks(causes: dict[int, tuple[str, str]], undecidable: set[int], mains: dict, places: dict[int, str]
                 ) -> dict[int, tuple[str, str, str]]:
    """Each culprit's cause with what its Python stack shows: (cause, said, why) where it has one;
    why is None where the stack says only where the rank is (`places`), not the cause.

    A stack never overrules the dumps; it picks between what they leave open. A rank in no op its
    dump shows may compute or wait in a send or recv the dump does not record (gloo): a stack in
    a torch.distributed call says it waits there; one in a data loader's frames says it loads
    data. A stack in the program's own line says neither: a wait on a request (`work.wait()`) has
    no Python frame, so it reads as the line that called it, like compute does."""
    changed = {}
    for rank, (cause, said) in causes.items():
        if rank not in places:
            continue
        at, thread = places[rank], mains[rank]
        call = in_torch_distributed(thread)
        unseen = cause == "unknown" and rank in undecidable  # in no op the dumps show (UNSEEN)
        open_question = cause == "compute_or_data_stall" or unseen
        if open_question and call is not None:
            changed[rank] = ("unknown", f"waits in {call} (distributed_c10d.py), which its dump does not record: it waits "
                                        f"for a peer; its Python stack: {at}",
                             f"rank {rank}'s Python stack shows it in {call}, which its dump does not record")
        elif open_question and in_data_loader(thread):
            changed[rank] = ("compute_or_data_stall", f"in no collective: loading data (torch's DataLoader); its Python "
                                                      f"stack: {at}",
                             f"rank {rank}'s Python stack shows it in the data loader, {at}")
        elif unseen:
            changed[rank] = (cause, f"{said}; its Python stack, {at}, cannot tell: a wait on a request (work.wait()) "
                                    "shows as the line that called it, as compute does",
                             None)
        else:
            changed[rank] = (cause, f"{said}; its Python stack: {at}", None)
    return changed


MAX_ODD_SAID = 8  # odd ones out named in the evidence; the rest are counted


def _stacks_apart(culprits: list[int], groups, mains: dict) -> tuple[StackApart, ...]:
    """Each rank's training thread (`mains`) beside its group peers': every rank whose stack is
    not the one most of its peers share, in the smallest group of three or more where most of
    them share one and at most half as many share its own (the odd one out: three waiters in
    another op than four are no odd ones), culprits first; and each culprit that is no odd one out
    beside the stack most of its peers share in its smallest group with a stack, so a page can
    show where it is beside where they are. Stacks are compared as `outline`s."""
    outlines = {rank: outline(thread) for rank, thread in mains.items()}
    groups_of = defaultdict(list)
    for group in groups:
        for rank in group.ranks:
            if rank in outlines:
                groups_of[rank].append(group)
    tallies: dict = {}  # a group's key -> how many of its members are at each outline

    def peers_most(group, mine) -> tuple[tuple, int]:
        if group.key not in tallies:
            tallies[group.key] = Counter(outlines[r] for r in group.ranks if r in outlines)
        # the rank itself taken out: its peers' most common outline is one of the two most common
        top = [(found, count - (found == mine)) for found, count in tallies[group.key].most_common(2)]
        return max(top, key=lambda item: item[1])

    culprit_set = set(culprits)
    found = []
    for rank in sorted(outlines, key=lambda r: (r not in culprit_set, r)):
        mine, nearest = outlines[rank], None
        for group in sorted(groups_of[rank], key=lambda g: (len(g.ranks), g.name)):
            peers = len(group.ranks) - 1
            theirs, count = peers_most(group, mine)
            if not count:
                continue
            # odd: most of its peers share a stack, and at most half as many ranks share its own
            alike = tallies[group.key][mine]
            seen = StackApart(rank, group, mine, theirs, count, peers, first_apart(mine, theirs),
                              odd=peers >= 2 and count * 2 > peers and theirs != mine and alike * 2 <= count)
            if seen.odd:
                nearest = seen
                break
            nearest = nearest or seen
        if nearest and (nearest.odd or rank in culprit_set):
            found.append(nearest)
    return tuple(found)


def _odd_ones_said(apart: tuple[StackApart, ...], places: dict[int, str]) -> tuple[dict[int, tuple[str, str]], int]:
    """The first MAX_ODD_SAID odd ones out in words, by rank, where each is and where its peers
    are: ("rank 5 is at data.py:88 in load_batch", "3 of its 3 dp peers are at train.py:120 in
    step, in all_reduce (distributed_c10d.py)"), with the first frame where their stacks part
    where it is above the rank's own innermost line; and how many more there are."""
    odd = [seen for seen in apart if seen.odd]
    said = {}
    for seen in odd[:MAX_ODD_SAID]:
        theirs = place(Thread(None, seen.peers_frames[::-1]))
        peers = f"{seen.agreeing} of its {seen.peers} {seen.group.label} peers are {theirs or 'in no frame of their own'}"
        innermost_own = max((i for i, f in enumerate(seen.frames) if f[1]), default=len(seen.frames))
        if seen.apart < innermost_own and seen.apart < len(seen.peers_frames):
            peers += (f"; their stacks part at {frame_text(seen.frames[seen.apart])} against "
                      f"{frame_text(seen.peers_frames[seen.apart])}")
        said[seen.rank] = (f"rank {seen.rank} is {places.get(seen.rank) or 'in no frame of its own'}", peers)
    return said, max(0, len(odd) - MAX_ODD_SAID)


def _one_cause(verdict: str, causes: dict[int, tuple[str, str]]) -> str | None:
    """The verdict's cause: its culprits' where they share one, "mixed" where they differ."""
    if verdict == "clean":
        return None
    found = {cause for cause, _ in causes.values()}
    return found.pop() if len(found) == 1 else "mixed" if found else "unknown"


def _stuck_below(graph_culprits: list[tuple[int, tuple | None]], stuck: list[Finding]) -> list[Finding]:
    """The ops stuck below PyTorch that explain the wait-for graph: ops all their members issued
    and none finished (or some members' GPUs never reached), which nothing above PyTorch can
    hold up. Where the graph names culprits, the stuck ops must hold every one of them: the
    others' waits are then a consequence, not a desync. Where it names none (it cannot tell who
    ran ahead of whom: the stuck ranks look idle to it), every such op. [] where any culprit is
    not so stuck (an op its peers completed and it did not is no hang below PyTorch)."""
    # an op none of its members finished: all of them sit in it, though only the ones its detail names
    # (their GPU never reached it) are its culprits
    stuck = [f for f in stuck if _gpu_never_reached(f) or set(f.ranks) == set(f.expected_ranks)]
    if not graph_culprits or not stuck:
        return stuck
    culprits = {rank for rank, _ in graph_culprits}
    holding = [f for f in stuck if culprits & set(f.expected_ranks)]
    if not holding or not culprits <= {r for f in holding for r in f.expected_ranks}:
        return []
    return holding


def _is_pair(finding: Finding) -> bool:
    """A stuck send and recv (waitgraph's _stuck_pair), not a collective."""
    return finding.collective_seq_id is None and finding.p2p_seq_id is not None


def _stuck_op(finding: Finding) -> str:
    """The op a stuck finding names: `all_reduce #7 of tp0`, or a pair's `send 0->1 (p2p #3) of pp0`."""
    if _is_pair(finding):
        return f"{finding.op} (p2p #{finding.p2p_seq_id}) of {finding.group.label}"
    return f"{finding.op} #{finding.collective_seq_id} of {finding.group.label}"


def _issued_by(finding: Finding) -> str:
    """Who issued a stuck finding's op, in words: both ends of a pair, every member of a group."""
    return "both ends posted" if _is_pair(finding) else "every member issued"


def _gpu_never_reached(finding: Finding) -> bool:
    return NEVER_STARTED in finding.detail


def _stuck_evidence(finding: Finding, alone: bool) -> str:
    if _gpu_never_reached(finding):
        return (f"op states: {ranks_word(finding.ranks)} left {_stuck_op(finding)} scheduled where every other "
                "member started it")
    what = "it" if alone else _stuck_op(finding)
    return f"completion recorded: {_issued_by(finding)} {what}, {ranks_word(finding.ranks)} never completed it"


def _with_ran_ahead(findings: list[Finding], graph: WaitGraph) -> list[Finding]:
    """Where ranks ran ahead, their op's missing-ranks finding (which names the idle majority)
    becomes an extra-op finding naming them."""
    if not graph.ran_ahead:
        return findings
    result = []
    for f in findings:
        key = ("coll", f.group.key, f.collective_seq_id)
        issuers = graph.ran_ahead.get(key) if f.kind == "missing_ranks" else None
        if issuers is None:
            result.append(f)
            continue
        idle = graph.waits_on[key]
        last = max(graph.views[f.group.key].known_last.get(r, 0) for r in idle)
        result.append(Finding("extra_op", f.group, f.collective_seq_id, None, f.op, issuers, f.expected_ranks,
                              f"{ranks_word(issuers)} issued it alone; {ranks_word(idle)} never did and "
                              f"{by_number(idle, 'waits', 'wait')} for nobody "
                              + (f"(their last op in {f.group.label} is #{last})" if last else
                                 f"({by_number(idle, 'it', 'they')} issued no op of {f.group.label})")))
    return result


def _mismatch_evidence(finding: Finding, checks) -> str:
    if "(reference: the other" in finding.detail:
        return f"sibling groups: the other {finding.group.label} groups decide {finding.op} #{finding.collective_seq_id}"
    check = checks.at(finding.group, finding.collective_seq_id)
    issued = len(check.entries)
    if set(finding.ranks) >= set(check.entries):
        return f"own rule: every issuer of {finding.op} #{finding.collective_seq_id} breaks its size rule"
    return (f"majority: {issued - len(finding.ranks)} of {issued} issuers of {finding.op} #{finding.collective_seq_id} "
            f"in {finding.group.label} agree")


def _first_entry_index(finding: Finding, checks) -> int:
    """Where a decided mismatch sits in its first offender's buffer (an offender issued it)."""
    return _entry_at(checks, finding, finding.ranks[0]).index


def _entry_at(checks, finding: Finding, rank: int) -> Entry | None:
    check = checks.at(finding.group, finding.collective_seq_id)
    entries = check.entries.get(rank) if check is not None else None
    return entries[-1] if entries else None


def _mismatch_headline(finding: Finding, checks) -> str:
    check = checks.at(finding.group, finding.collective_seq_id)
    offenders = set(finding.ranks)
    others = [r for r in check.entries if r not in offenders]
    where = f"#{finding.collective_seq_id} of {finding.group.label}"
    if finding.kind == "type_mismatch":
        theirs = Counter(unit_label(check.entries[r]) for r in offenders).most_common(1)[0][0]
        if theirs != finding.op:  # else the groups differ in what their labels leave out (a terminator's name): the detail says
            return f"{ranks_word(offenders)} called {theirs} as {where} where {ranks_word(others)} called {finding.op}"
    elif others and offenders:
        describe = _shown_sizes if finding.kind == "size_mismatch" else _shown_dtypes
        mine = Counter(describe(check.entries[r]) for r in offenders).most_common(1)[0][0]
        theirs = Counter(describe(check.entries[r]) for r in others).most_common(1)[0][0]
        if mine != theirs:
            verb, preposition = ("passed", "to") if finding.kind == "size_mismatch" else ("used", "in")
            return (f"{ranks_word(offenders)} {verb} {mine} {preposition} {finding.op} {where} "
                    f"where {ranks_word(others)} {verb} {theirs}")
    return f"{finding.kind.replace('_', ' ')} in {finding.op} {where}: {finding.detail}"


def _shown_sizes(entries: tuple[Entry, ...]) -> str:
    def one(e: Entry) -> str:
        sizes_in, sizes_out = list(map(list, e.input_sizes)), list(map(list, e.output_sizes))
        return f"sizes {sizes_in}" if sizes_in == sizes_out else f"sizes {sizes_in} -> {sizes_out}"
    return " | ".join(one(e) for e in entries if e.op not in size_rules.COALESCED_TERMINATORS)


def _shown_dtypes(entries: tuple[Entry, ...]) -> str:
    return "dtype " + ",".join(sorted({d for e in entries for d in e.input_dtypes + e.output_dtypes}))


@dataclass(frozen=True, slots=True)
class MissingSaid:
    """What the culprits of one op did, in words ("never joined all_reduce #10 of default_pg"), how
    many wait in it (" (3 ranks wait in it)"), and where they are: short for the first line ("rank
    2 is in no collective"), in full for the evidence."""

    ranks: tuple[int, ...]
    did: str
    waiting: str = ""
    short: tuple[str, ...] = ()
    full: tuple[str, ...] = ()

    @property
    def subject(self) -> str:
        return ranks_word(self.ranks)


MAX_FURTHER_SAID = 3  # culprits after the first one the first line names, each with what it did
MAX_WAITS_SAID = 2  # waits of a cycle the first line names; of a longer one, its first


def _few_waits(cycle: str) -> str:
    """A cycle of waits ("rank 1 waits in ... for rank 3; rank 3 waits in ... for rank 1: why it
    cannot be decided") with its first waits only, for the first line; the report's Undecided
    line says it whole."""
    waits, colon, why = cycle.partition(": ")
    shown = waits.split("; ")
    if len(shown) <= MAX_WAITS_SAID:
        return cycle
    return f"{shown[0]}, and {len(shown) - 1} more waits in a cycle (see Undecided){colon}{why}"


def _missing_said(key, ranks, graph: WaitGraph, blockers, dumps) -> MissingSaid:
    if key is None:
        return MissingSaid(tuple(ranks), "blocked everyone")
    waiting = graph.waiters[key]
    blocker = graph.blocker_of_op[key]
    if key in graph.ran_ahead:
        idle = graph.waits_on[key]
        return MissingSaid(tuple(ranks), f"ran ahead: {by_number(ranks, 'it', 'they')} issued {blocker.describe()}, which "
                           f"{ranks_word(idle)} never issued, and {by_number(ranks, 'waits', 'wait')} in it; "
                           f"{ranks_word(idle)} {by_number(idle, 'waits', 'wait')} for nobody")
    if all(r not in dumps for r in ranks) and key[0] != "p2p":
        return MissingSaid(tuple(ranks), f"{graph.no_dump(ranks)} and {ranks_word(waiting)} {by_number(waiting, 'waits', 'wait')} "
                           f"for {by_number(ranks, 'it', 'them')} in {blocker.describe()}: "
                           f"{by_number(ranks, 'it is', 'they are')} the prime suspect")
    if key[0] == "p2p":
        other = "recv" if blocker.p2p and blocker.p2p.kind == "send" else "send"
        did, count = f"never posted the {other} matching rank {blocker.rank}'s {blocker.describe()}", ""
    else:
        joined = "may never have joined" if key in graph.weak else "never joined"  # weak: a buffer wrapped past the group
        did = f"{joined} {blocker.describe()}"
        count = f" ({len(waiting)} {by_number(waiting, 'rank waits', 'ranks wait')} in it)"
    # one clause per situation, so a thousand culprits in the same place read as one: (short, full)
    clauses: dict[tuple[str, str], list[int]] = {}
    for rank in ranks:
        own = blockers.get(rank)
        if rank not in dumps:
            clause = ("{who} " + graph.no_dump([rank]),) * 2
        elif own is None:
            clause = ("{who} {is} in no collective (all {its} ops completed)" if graph.tracking.get(rank) else
                      "{who} {has} an empty buffer (no op in flight, or none recorded)",) * 2
        elif rank in graph.joined_by_all:
            if graph.done_partner(own) is not None:
                clause = (f"{{who}} {{is}} blocked in {own.describe()}, whose partner completed",) * 2
            elif graph.tracking.get(rank):
                clause = (f"{{who}} {{is}} blocked in {own.describe()}, which every member joined",) * 2
            else:
                full = f"{{who}} {{is}} in no collective: {{its}} last op, {own.describe()}, was joined by every member"
                if graph.p2p_unrecorded:
                    full += " (or in a send or recv, which gloo does not record)"
                clause = ("{who} {is} in no collective", full)
        else:
            clause = (f"{{who}} {{is}} blocked in {own.describe()}",) * 2
        clauses.setdefault(clause, []).append(rank)

    def said(clause: str, who: list[int]) -> str:
        one = len(who) == 1
        return clause.format(who=ranks_word(who), its="its" if one else "their", has="has" if one else "have",
                             **{"is": "is" if one else "are"})

    shown = list(clauses.items())[:3]
    short = [said(short, who) for (short, _), who in shown]
    if len(clauses) > len(shown):
        short.append(f"(+{len(clauses) - len(shown)} more situations, see the findings)")
    return MissingSaid(tuple(ranks), did, count, tuple(short), tuple(said(full, who) for (_, full), who in list(clauses.items())[:8]))
