"""Render an Analysis: the text report for people, the JSON report for scripts, entry tables."""

from __future__ import annotations

from collections import defaultdict
from importlib import resources
from typing import Any, TextIO

from .. import __version__
from ..analysis.align import format_ranks
from ..errors import printable
from ..reading.groups import GroupTable
from ..reading.stacks import main_thread
from ..types import Analysis, Dump, Finding, SkippedFile


def plain_table(rows: list[list[str]]) -> str:
    """Rows of text cells in columns two spaces apart, as tabulate's "plain" format prints text
    (each cell stripped, no padding after the last): a clean run's summary, printed without
    importing tabulate."""
    rows = [[cell.strip() for cell in row] for row in rows]
    widths = [max(map(len, column)) for column in zip(*rows)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _where(finding: Finding) -> str:
    if finding.collective_seq_id is not None:
        return f"#{finding.collective_seq_id}"
    if finding.p2p_seq_id is not None:
        return f"p2p #{finding.p2p_seq_id}"
    return ""


def culprit_files(analysis: Analysis, sources: dict, unread: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """Per culprit, the file its dump came from (as a path under the dump folder), the host its
    folder or name shows, so a person knows which node to look at, and why that file could not be
    read where it could not (`not_read`)."""
    unread = unread or {}
    return [{"rank": rank, "file": printable(sources[rank].where) if rank in sources else None,
             "host": printable(sources[rank].host) if rank in sources and sources[rank].host else None,
             "not_read": unread.get(rank)}
            for rank in analysis.culprit_ranks]


def recorded_stack(analysis: Analysis, dumps: dict[int, Dump], rank: int) -> tuple[Any, tuple]:
    """(the op, its stack as the dump recorded it, innermost first) of the op a rank is blocked
    in, else its last op; (None, ()) where its dump holds none."""
    entry = analysis.culprit_entries.get(rank)
    if entry is None:
        entry = dumps[rank].entries[-1] if dumps.get(rank) and dumps[rank].entries else None
    return (entry, dumps[rank].stack_of(entry.stack_id)) if entry is not None else (None, ())


def cause_lines(analysis: Analysis) -> list[str]:
    """The culprits' causes in words, one per cause, ranks that share one together: "divergence:
    rank 3: issued ..."."""
    ranks_of: dict[tuple[str, str], list[int]] = {}
    for rank, said in sorted(analysis.causes.items()):
        ranks_of.setdefault(said, []).append(rank)
    return [f"{cause}: {'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}: {said}"
            for (cause, said), ranks in ranks_of.items()]


def cause_text(analysis: Analysis) -> str:
    """The culprits' causes in one paragraph, "; " between them."""
    return "; ".join(cause_lines(analysis))


def render_text(analysis: Analysis, dumps: dict[int, Dump], skipped: tuple[SkippedFile, ...], out: TextIO, *,
                mismatch_cap: int = 10, print_stack_trace: bool = False, verbose: bool = False,
                sources: dict | None = None, unread: dict[int, str] | None = None) -> None:
    """The report: verdict line first, then what decided it, findings, the culprit's stack, a
    summary, warnings."""
    print(analysis.headline, file=out)
    if analysis.causes:  # a line per cause, under each other
        print("Cause: " + "\n       ".join(cause_lines(analysis)), file=out)
    decided = [e for e in analysis.evidence if not e.startswith(UNDECIDED)]
    if decided:
        print("Evidence: " + "; ".join(decided), file=out)
    undecided = [e.removeprefix(UNDECIDED) for e in analysis.evidence if e.startswith(UNDECIDED)]
    undecided = [text for text in undecided if text not in analysis.headline]  # said once
    if undecided:
        print("Undecided: " + "; ".join(undecided), file=out)

    if analysis.findings:
        shown = analysis.findings[:mismatch_cap] if mismatch_cap > 0 else analysis.findings
        rows = [
            ["*" if f.root_cause else "", f.kind, f"{f.group.label} (pg {f.group.name})", _where(f), f.op,
             format_ranks(f.ranks) or "?", f.detail]
            for f in shown
        ]
        print("\nFindings (* = root cause)", file=out)
        from tabulate import tabulate  # here: importing it reads its version from the installed packages' metadata

        print(tabulate(rows, headers=["", "kind", "group", "seq", "op", "ranks", "detail"], tablefmt="simple",
                       maxcolwidths=[None, None, None, None, None, None, 70]), file=out)
        if len(analysis.findings) > len(shown):
            print(f"... {len(analysis.findings) - len(shown)} more finding(s); raise --mismatch-cap to see them", file=out)

    stack_ranks = set(analysis.culprit_entries)
    if print_stack_trace:
        stack_ranks |= {r for f in analysis.findings for r in f.ranks if r in dumps}
    for rank in sorted(stack_ranks):
        entry, stack = recorded_stack(analysis, dumps, rank)
        if not stack:
            continue
        print(f"\nStack of rank {rank}'s {entry.op} #{entry.collective_seq_id} ({entry.pg_desc or entry.pg_name}), innermost first:", file=out)
        for frame in stack:
            print(f"  {frame}", file=out)

    checked = len(analysis.checks)
    matched = analysis.checks.matched()
    print("\nSummary", file=out)
    summary = [
        ["ranks loaded", f"{len(analysis.ranks_loaded)} ({format_ranks(analysis.ranks_loaded) or 'none'})"],
        ["ranks missing", format_ranks(analysis.ranks_missing) or "none"],
        ["groups", str(len(analysis.groups))],
        ["collectives", f"{checked} aligned, {matched} matched on every member"],
    ]
    if analysis.culprit_ranks:
        summary.append(["culprit ranks", format_ranks(analysis.culprit_ranks)])
        shown = [f"rank {c['rank']}: {c['file'] or 'no file'}" + (f" (host {c['host']})" if c["host"] else "")
                 + (f" (not read: {c['not_read']})" if c["not_read"] else "")
                 for c in culprit_files(analysis, sources or {}, unread)[:8]]
        summary.append(["culprit files", "; ".join(shown) + ("; ..." if len(analysis.culprit_ranks) > 8 else "")])
    failing = {rank: checks for rank, dump in dumps.items()
               if dump.health and (checks := [c.failure_text() for c in dump.health if not c.passed])}
    if failing:  # the culprits' first: their device and error are what a person acts on
        ordered = sorted(failing, key=lambda r: (r not in analysis.culprit_ranks, r))
        summary.append(["failed health checks", "; ".join(f"rank {r}: {', '.join(failing[r][:4])}" for r in ordered[:8])])
    if skipped:
        summary.append(["files skipped", str(len(skipped))])
    print(plain_table(summary), file=out)

    if skipped:
        print("\nSkipped files", file=out)
        for item in skipped:
            print(f"  {item.path}: {item.reason}", file=out)
    if analysis.warnings:
        print("\nNotes", file=out)
        shown_warnings = analysis.warnings if verbose else analysis.warnings[:5]
        for warning in shown_warnings:
            print(f"  {warning}", file=out)
        if len(analysis.warnings) > len(shown_warnings):
            print(f"  ... {len(analysis.warnings) - len(shown_warnings)} more; -v shows them all", file=out)


UNDECIDED = "undecided: "  # an evidence item the dumps could not decide (analysis/verdict.py)
JSON_SCHEMA_VERSION = 9  # 2: schema_version, frtrace_version, ignored_files; 3: evidence; 4: culprit_files; 5: health;
# 6: each health check's detail and fields, each culprit file's not_read; 7: cause, causes; 8: ranks, culprit_stacks, notes;
# 9: stale_ranks, no_evidence_ranks, the finding kind late_arrival


def _frames(frames) -> list[dict[str, Any]]:
    return [{"file": printable(f.filename), "line": f.line, "function": printable(f.name)} for f in frames]


def _python_frames(thread) -> list[dict[str, Any]]:
    return [{"file": printable(file), "line": line, "function": printable(function)} for file, line, function in thread.frames]


def _op(entry, group) -> dict[str, Any]:
    """An op as the JSON report names it: its group (the matcher's, where known), kind, seq ids
    and state as its rank's dump recorded them."""
    return {"pg_name": printable(group.name if group else entry.pg_name),
            "pg_desc": printable(group.desc if group else entry.pg_desc), "op": printable(entry.op),
            "collective_seq_id": None if entry.is_p2p else entry.collective_seq_id,
            "p2p_seq_id": entry.p2p_seq_id if entry.is_p2p else None, "state": printable(entry.state)}


def _ranks(analysis: Analysis, sources: dict, dumps: dict[int, Dump]) -> list[dict[str, Any]]:
    """Each rank of the job: its file and host, and where it stands: `missing` (no dump), `blocked`
    in an op (its group, op, seq and the op's state as its dump says) or `idle` (in no op the dumps
    show as waiting)."""
    culprits = set(analysis.culprit_ranks)
    found = []
    for rank in sorted(set(analysis.ranks_loaded) | set(analysis.ranks_missing)):
        source = sources.get(rank)
        entry, blocked = analysis.blocked_entries.get(rank), analysis.blocked_in.get(rank)
        found.append({
            "rank": rank, "culprit": rank in culprits,
            "file": printable(source.where) if source else None,
            "host": printable(source.host) if source and source.host else None,
            "status": "missing" if rank not in dumps else "blocked" if entry else "idle",
            "blocked_in": _op(entry, blocked[1]) if entry and blocked else None,
        })
    return found


SCHEMAS = ("report", "compare")  # src/frtrace/schemas/<name>.schema.json, shipped in the package


def schema_text(which: str = "report") -> str:
    """The JSON Schema (draft 2020-12) of the JSON report or of frtrace compare's JSON, as text."""
    return resources.files("frtrace").joinpath("schemas", f"{which}.schema.json").read_text(encoding="utf-8")


def report_dict(analysis: Analysis, skipped: tuple[SkippedFile, ...], ignored: tuple[SkippedFile, ...] = (),
                sources: dict | None = None, dumps: dict[int, Dump] | None = None,
                unread: dict[int, str] | None = None, stacks: dict | None = None) -> dict[str, Any]:
    """The JSON report, in the documented schema (frtrace schema prints it). `stacks`: each
    rank's Python threads, from stack files beside the dumps."""
    dumps, stacks = dumps or {}, stacks or {}
    culprit_stacks = {}
    for rank in analysis.culprit_ranks:
        entry, recorded = recorded_stack(analysis, dumps, rank) if rank in dumps else (None, ())
        thread = main_thread(stacks[rank]) if rank in stacks else None
        culprit_stacks[str(rank)] = {"op": _op(entry, None) if entry is not None else None,
                                     "recorded": _frames(recorded), "python": _python_frames(thread) if thread else None}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "frtrace_version": __version__,
        "verdict": analysis.verdict,
        "culprit_ranks": list(analysis.culprit_ranks),
        "culprit_files": culprit_files(analysis, sources or {}, unread),
        "headline": analysis.headline,
        "cause": analysis.cause,
        "causes": {str(rank): {"cause": cause, "said": said} for rank, (cause, said) in sorted(analysis.causes.items())},
        "evidence": list(analysis.evidence),
        "ranks_loaded": list(analysis.ranks_loaded),
        "ranks_missing": list(analysis.ranks_missing),
        "findings": [
            {
                "kind": f.kind,
                "pg_name": f.group.name,
                "pg_desc": f.group.desc,
                "collective_seq_id": f.collective_seq_id,
                "p2p_seq_id": f.p2p_seq_id,
                "op": f.op,
                "ranks": list(f.ranks),
                "expected_ranks": list(f.expected_ranks),
                "detail": f.detail,
                "root_cause": f.root_cause,
            }
            for f in analysis.findings
        ],
        "skipped_files": [{"path": s.path, "reason": s.reason} for s in skipped],
        "ignored_files": [{"path": s.path, "reason": s.reason} for s in ignored],
        "health": {str(rank): [{"check": c.check, "passed": c.passed, "said": c.said, "detail": c.detail,
                                "fields": dict(c.fields)} for c in dump.health]
                   for rank, dump in dumps.items() if dump.health},
        "ranks": _ranks(analysis, sources or {}, dumps),
        "culprit_stacks": culprit_stacks,
        "notes": list(analysis.warnings),
        "stale_ranks": [{"rank": rank, "said": said} for rank, said in sorted(analysis.stale.items())],
        "no_evidence_ranks": list(analysis.no_evidence),
    }


def render_entries(dumps: dict[int, Dump], table: GroupTable, out: TextIO, *,
                   selected_ranks: tuple[int, ...] | None = None, pg_filters: tuple[str, ...] | None = None) -> None:
    """Entries side by side: per group, one row per sequence id and one column per rank."""
    ranks = [r for r in sorted(dumps) if selected_ranks is None or r in selected_ranks]
    for group in table.groups:
        if pg_filters and group.name not in pg_filters and group.desc not in pg_filters:
            continue
        columns = [r for r in ranks if r in group.ranks]
        if not columns:
            continue
        cells: dict[tuple[str, int], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
        for rank in columns:
            for entry in dumps[rank].entries:
                if table.group_of(rank, entry.pg_name) is not group:
                    continue
                kind, seq = ("p2p", entry.p2p_seq_id) if entry.is_p2p else ("", entry.collective_seq_id)
                sizes = ",".join("x".join(map(str, s)) for s in entry.input_sizes) or "-"
                cells[(kind, seq)][rank].append(f"{entry.op} {sizes} {entry.state}")
        if not cells:
            continue
        print(f"\n{group.label} (pg {group.name}, ranks {format_ranks(group.ranks)})", file=out)
        rows = [[f"{kind} {seq}".strip()] + ["; ".join(cells[(kind, seq)].get(r, [])) for r in columns]
                for kind, seq in sorted(cells, key=lambda k: (k[0], k[1]))]
        from tabulate import tabulate

        print(tabulate(rows, headers=["seq"] + [f"rank {r}" for r in columns], tablefmt="simple"), file=out)
