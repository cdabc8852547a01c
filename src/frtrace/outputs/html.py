"""The one-file HTML report: the hang at a glance, for a person whose job just stopped.

One self-contained page (inline CSS, SVG and a few lines of script; nothing fetched, so it opens
from disk anywhere): the verdict and its evidence as the text report says them; a grid of ranks
by groups coloured by where each rank stands in each group, with the culprits' rows and the root
collective's column marked, identical rows folded into one at scale; the wait-for graph drawn;
the culprit's stack beside the majority's at the divergence, and its Python stack now (a stack file
beside its dump) beside its peers', the first differing frame marked;
and the ranks that arrived last, where the dumps hold timings. Every string from a dump is
escaped here, whatever the loader did.
"""

from __future__ import annotations

import statistics
from collections import Counter
from html import escape
from typing import TextIO

from ..analysis.align import entry_label, format_ranks, tracks_completion
from ..reading.groups import GroupTable
from .report import cause_lines, recorded_stack
from ..reading.stacks import first_apart, frame_text
from .timeline import root_entries
from ..types import Analysis, Dump, Finding

# cell states, in the order they win when several apply
MISMATCHED, NEVER, IN_FLIGHT, NO_DATA, DONE, NOT_MEMBER = "mismatched", "never issued", "in flight", "no completion data", "completed", ""
_COLOURS = {MISMATCHED: "#b02090", NEVER: "#111", IN_FLIGHT: "#e53935", NO_DATA: "#9e9e9e", DONE: "#43a047", NOT_MEMBER: "#fafafa"}
_MISMATCH_KINDS = ("type_mismatch", "size_mismatch", "dtype_mismatch")
MAX_GRID_ROWS = 64  # distinct rows shown; identical rows are folded first
MAX_GRID_COLUMNS = 48
MAX_GRAPH_OPS = 10
MAX_BARS = 32
LATE_WINDOW = 64  # collectives per group that the late-arrivals plot reads

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.verdict{font:600 18px/1.35 ui-monospace,monospace;padding:12px 16px;border-radius:6px;white-space:pre-wrap}
.desync,.stuck{background:#fdecea;border-left:8px solid #e53935} .clean{background:#e8f5e9;border-left:8px solid #43a047}
.inconclusive{background:#fff8e1;border-left:8px solid #f9a825}
ul.evidence{margin:8px 0 0 0} table{border-collapse:collapse}
.grid td,.grid th{border:1px solid #fff;padding:0;font:11px ui-monospace,monospace}
.grid td.cell{min-width:44px;height:22px;padding:0 3px;text-align:center;color:#fff}
.grid th.col{writing-mode:vertical-rl;transform:rotate(180deg);padding:4px 2px;font-weight:normal;max-height:140px}
.grid th.row{text-align:right;padding:0 8px;font-weight:normal;white-space:nowrap}
.grid tr.culprit th.row{background:#e53935;color:#fff;font-weight:700}
.grid tr.culprit td.cell{outline:2px solid #e53935}
.grid th.root,.grid td.root{box-shadow:inset 0 0 0 2px #ffd600}
.legend span{display:inline-block;margin-right:14px} .legend i{display:inline-block;width:14px;height:14px;vertical-align:-2px;margin-right:4px}
.stacks td,.stacks th{border:1px solid #ddd;padding:2px 8px;font:12px ui-monospace,monospace;vertical-align:top}
.stacks tr.diff td{background:#fff3cd;font-weight:700}
.note{color:#666} svg text{font:12px ui-monospace,monospace}
"""

_SCRIPT = """
document.querySelectorAll('.grid tr[data-ranks]').forEach(function (row) {
  row.addEventListener('click', function () { row.classList.toggle('picked'); });
});
"""


def write_html(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, out: TextIO) -> None:
    root = next((f for f in analysis.findings if f.root_cause), None)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>frtrace: {escape(analysis.verdict.upper())}</title><style>{_CSS}</style></head><body>",
        "<h1>frtrace report</h1>",
        f"<div class='verdict {escape(analysis.verdict)}' id='verdict'>{escape(analysis.headline)}</div>",
        f"<p id='cause'><b>Cause:</b> {'<br>'.join(map(escape, cause_lines(analysis)))}</p>" if analysis.causes else "",
        _evidence(analysis),
        _health(analysis, dumps),
        _grid(analysis, dumps, table, root),
        _graph(analysis),
        _stacks(analysis, dumps, table, root),
        _stacks_now(analysis),
        _late_plot(dumps, table),
        _notes(analysis),
        f"<script>{_SCRIPT}</script></body></html>\n",
    ]
    out.write("\n".join(p for p in parts if p))


def _evidence(analysis: Analysis) -> str:
    items = "".join(f"<li>{escape(e)}</li>" for e in analysis.evidence)
    culprits = (f"<p><b>Culprit rank(s):</b> {escape(format_ranks(analysis.culprit_ranks))}</p>"
                if analysis.culprit_ranks else "")
    return f"{culprits}<ul class='evidence'>{items}</ul>" if items or culprits else ""


def _health(analysis: Analysis, dumps: dict[int, Dump]) -> str:
    """The culprits' failed health checks with every field they gave (device, uuid, error): often
    the root cause itself."""
    rows = [f"<tr><td style='white-space:nowrap'>rank {rank}</td><td>{escape(check.check)}</td><td>{escape(check.said)}</td>"
            f"<td>{escape(check.detail)}</td><td>{escape(', '.join(f'{k}={v}' for k, v in check.fields))}</td></tr>"
            for rank in analysis.culprit_ranks if rank in dumps for check in dumps[rank].health if not check.passed]
    if not rows:
        return ""
    return ("<h2>Failed health checks of the culprits</h2><table class='stacks' id='health'><tr><th>rank</th><th>check</th>"
            f"<th>status</th><th>what it said</th><th>every field</th></tr>{''.join(rows)}</table>")


def _cell_states(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable) -> dict[tuple[int, int], tuple[str, str]]:
    """(rank, group index) -> (state, its text): where each rank stands in each of its groups."""
    index = {g.key: i for i, g in enumerate(table.groups)}
    cells: dict[tuple[int, int], tuple[str, str]] = {}
    for rank, dump in dumps.items():
        entries = dump.entries
        tracking = tracks_completion(dump)
        for name, run in (entries.runs or {}).items():
            group = table.group_of(rank, name)
            if group is None or not len(run.positions):
                continue
            last = entries[run.positions[-1]]
            seq = last.p2p_seq_id if last.is_p2p else last.collective_seq_id
            state = DONE if last.state == "completed" else IN_FLIGHT if tracking else NO_DATA
            cells[(rank, index[group.key])] = (state, f"#{seq}")
    for rank, (_, group, seq) in analysis.blocked_in.items():  # waiting in it, though the dump cannot say (gloo)
        if group.key in index and (rank, index[group.key]) in cells:
            cells[(rank, index[group.key])] = (IN_FLIGHT, f"#{seq}" if seq is not None else "p2p")
    missing = set(analysis.ranks_missing)
    for group in table.groups:  # each group's ranks once: a million-rank world costs a million steps, not its square
        for rank in missing.intersection(group.ranks):
            cells[(rank, index[group.key])] = (NEVER, "no dump")
    for finding in analysis.findings:
        if finding.group.key not in index:
            continue
        state = MISMATCHED if finding.kind in _MISMATCH_KINDS else NEVER if finding.kind in ("missing_ranks", "extra_op") else None
        if state is None:
            continue
        for rank in finding.ranks:
            where = (rank, index[finding.group.key])
            if cells.get(where, (DONE,))[0] not in (MISMATCHED, NEVER):
                cells[where] = (state, f"#{finding.collective_seq_id}" if finding.collective_seq_id else "!")
    return cells


_PRECEDENCE = {state: i for i, state in enumerate((MISMATCHED, NEVER, IN_FLIGHT, NO_DATA, DONE, NOT_MEMBER))}


def _family(group) -> str:
    """The column a group is shown in: its desc (every tp group in one column "tp"), or its name."""
    return group.desc if group.desc and group.desc != "undefined" else f"pg {group.name}"


def _grid(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, root: Finding | None) -> str:
    """Rows ranks, columns group families (every tp group in the column "tp": a rank's cell is its
    own tp group's), so that ranks in the same state fold into one row at any scale."""
    groups = list(table.groups)
    if not groups:
        return ""
    cells = _cell_states(analysis, dumps, table)
    families: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        families.setdefault(_family(group), []).append(i)
    names = list(families)
    if root is not None:  # the root group's column first, so it is never cut off
        names.remove(_family(root.group))
        names.insert(0, _family(root.group))
    columns = names[:MAX_GRID_COLUMNS]
    root_column = _family(root.group) if root is not None else None
    shown_families = set(columns)
    groups_of: dict[int, list[int]] = {}  # rank -> the groups of the shown columns it belongs to
    for i, group in enumerate(groups):
        if _family(group) in shown_families:
            for rank in group.ranks:
                groups_of.setdefault(rank, []).append(i)

    def cell(rank: int, family: str) -> tuple[str, str, str] | None:
        """(state, text, group label) of the rank's group in this family; the worst of several."""
        found = [(cells.get((rank, i), (NEVER if rank not in dumps else NOT_MEMBER, "")), groups[i])
                 for i in groups_of.get(rank, ()) if _family(groups[i]) == family]
        if not found:
            return None
        (state, text), group = min(found, key=lambda item: _PRECEDENCE[item[0][0]])
        return state, text, f"{group.label} (pg {group.name})"

    culprits = set(analysis.culprit_ranks)
    rows: dict[tuple, list[int]] = {}
    grid: dict[int, list] = {}
    for rank in sorted(set(table.world) | set(dumps)):
        grid[rank] = [cell(rank, family) for family in columns]
        states = tuple(c[0] if c else None for c in grid[rank])
        # a rank whose dump is older than its peers', or whose recorder was off, says nothing of the end: its own row
        unseen = "dump older" if rank in analysis.stale else "recorder off" if rank in analysis.no_evidence else None
        key = ("culprit", rank) if rank in culprits else (unseen, states) if unseen else states
        rows.setdefault(key, []).append(rank)
    head = "".join(f"<th class='col{' root' if family == root_column else ''}' title='{len(families[family])} group(s)'>"
                   f"{escape(family)}{f' <span class=note>x{len(families[family])}</span>' if len(families[family]) > 1 else ''}"
                   "</th>" for family in columns)
    body = []
    shown = sorted(rows.items(), key=lambda item: (item[0][0] != "culprit", item[1][0]))
    for key, members in shown[:MAX_GRID_ROWS]:
        label = _ranks_label(members)
        tds = []
        for column, family in enumerate(columns):
            found = grid[members[0]][column]
            if found is None:
                tds.append("<td class='cell' style='background:#fafafa'></td>")
                continue
            state, text, where = found
            same = all(grid[r][column] is not None and grid[r][column][1] == text for r in members)
            root_class = " root" if family == root_column else ""
            tds.append(f"<td class='cell{root_class}' style='background:{_COLOURS[state]}' "
                       f"title='{escape(label)} in {escape(where if len(members) == 1 else family)}: "
                       f"{escape(state or 'no op in the dump')} {escape(text if same else '')}'>{escape(text if same else '')}</td>")
        culprit = " class='culprit'" if key[0] == "culprit" else ""
        said = " &laquo; culprit" if culprit else f" ({escape(key[0])})" if key[0] in ("dump older", "recorder off") else ""
        body.append(f"<tr{culprit} data-ranks='{escape(format_ranks(members))}'><th class='row'>{escape(label)}"
                    f"{said}</th>{''.join(tds)}</tr>")
    legend = "".join(f"<span><i style='background:{_COLOURS[s]}'></i>{escape(s)}</span>"
                     for s in (DONE, IN_FLIGHT, NEVER, MISMATCHED, NO_DATA))
    cut = []
    if len(shown) > MAX_GRID_ROWS:
        cut.append(f"{len(shown) - MAX_GRID_ROWS} more distinct rows not shown")
    if len(names) > len(columns):
        cut.append(f"{len(names) - len(columns)} more columns not shown")
    return (f"<h2>Ranks by group</h2><p class='note'>One column per kind of group (each rank's own tp group in the "
            f"column tp, and so on); each cell: the rank's last op in that group (#seq) and where it stands. Ranks in "
            f"the same state are folded into one row. The root collective's column is outlined in yellow."
            f"{' (' + '; '.join(cut) + ')' if cut else ''}</p>"
            f"<p class='legend'>{legend}</p><table class='grid' id='grid'><tr><th></th>{head}</tr>{''.join(body)}</table>")


def _graph(analysis: Analysis) -> str:
    """The wait-for graph: each op, the ranks that wait in it (left), and the ranks they wait
    for (right); a rank on the right that itself waits in an op has a dashed arrow back to it."""
    waits = sorted(analysis.waits, key=lambda w: -len(w[1]))[:MAX_GRAPH_OPS]
    if not waits:
        return ""
    awaited: list[int] = []
    for _, _, ranks in waits:
        awaited.extend(r for r in ranks[:8] if r not in awaited)
    row_h, op_y = 54, {}
    height = max(len(waits), len(awaited)) * row_h + 40
    culprits = set(analysis.culprit_ranks)
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='1100' height='{height}' role='img' aria-label='wait-for graph'>",
           "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' markerHeight='7' orient='auto'>"
           "<path d='M0,0 L10,5 L0,10 z' fill='#555'/></marker></defs>"]
    rank_y = {r: 30 + i * row_h for i, r in enumerate(awaited)}
    for i, (op, waiters, ranks) in enumerate(waits):
        y = 30 + i * row_h
        op_y[op] = y
        svg.append(f"<rect x='20' y='{y - 16}' width='220' height='32' rx='6' fill='#eceff1' stroke='#90a4ae'/>"
                   f"<text x='30' y='{y + 4}'>{escape(_short(_ranks_label(waiters), 28))}</text>"
                   f"<line x1='240' y1='{y}' x2='380' y2='{y}' stroke='#555' marker-end='url(#arrow)'/>"
                   f"<text x='250' y='{y - 6}' fill='#555'>wait in</text>"
                   f"<rect x='380' y='{y - 16}' width='330' height='32' rx='6' fill='#fff3e0' stroke='#fb8c00'/>"
                   f"<text x='390' y='{y + 4}'>{escape(_short(op, 44))}</text>")
        for r in ranks[:8]:
            svg.append(f"<line x1='710' y1='{y}' x2='880' y2='{rank_y[r]}' stroke='#555' marker-end='url(#arrow)'/>")
        if len(ranks) > 8:
            svg.append(f"<text x='720' y='{y + 24}' fill='#555'>+{len(ranks) - 8} more</text>")
    for r, y in rank_y.items():
        fill, stroke = ("#e53935", "#b71c1c") if r in culprits else ("#eceff1", "#90a4ae")
        colour = "#fff" if r in culprits else "#222"
        svg.append(f"<rect x='880' y='{y - 16}' width='200' height='32' rx='6' fill='{fill}' stroke='{stroke}'/>"
                   f"<text x='890' y='{y + 4}' fill='{colour}'>rank {r}{' (culprit)' if r in culprits else ''}</text>")
        blocked = analysis.blocked_in.get(r, ("",))[0]
        if blocked in op_y:  # it waits too: back to the op it is blocked in
            svg.append(f"<path d='M 980 {y + 16} C 980 {y + 60}, 545 {op_y[blocked] + 60}, 545 {op_y[blocked] + 16}' "
                       "fill='none' stroke='#e53935' stroke-dasharray='5,4' marker-end='url(#arrow)'/>")
    svg.append("</svg>")
    legend = ("<p class='note'>Left: the ranks that wait; middle: the op they wait in; right: the ranks they wait for "
              "(red: culprit). A dashed arrow: that rank itself waits in that op (a cycle).</p>")
    return f"<h2>Who waits for whom</h2>{legend}<div id='graph'>{''.join(svg)}</div>"


def _ranks_label(ranks) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)} ({len(ranks)})"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _side_by_side(mine: list[str], theirs: list[str], apart: int) -> str:
    """Two stacks' frames as table rows, outermost first, the row where they part marked."""
    rows = []
    for i in range(max(len(mine), len(theirs))):
        a = mine[i] if i < len(mine) else ""
        b = theirs[i] if i < len(theirs) else ""
        rows.append(f"<tr{' class=diff' if i == apart else ''}><td>{'&rarr; ' if i == apart else ''}{escape(a)}</td>"
                    f"<td>{escape(b)}</td></tr>")
    return "".join(rows)


def _stacks(analysis: Analysis, dumps: dict[int, Dump], table: GroupTable, root: Finding | None) -> str:
    """The culprit's stack where it stopped, beside the stack most issuers of the root
    collective had there; frames compared from the outermost, the first difference marked."""
    if root is None or not analysis.culprit_ranks or root.collective_seq_id is None:  # no recorded op to hold stacks
        return ""
    culprit = analysis.culprit_ranks[0]
    shown, mine = recorded_stack(analysis, dumps, culprit)  # nothing in flight: its last op, where it went on from
    issued = root_entries(root, dumps, table)
    stacks = Counter(dumps[r].stack_of(e.stack_id) for r, e in issued.items() if r != culprit)
    if not mine and not stacks:
        return ""
    theirs, count = stacks.most_common(1)[0] if stacks else ((), 0)
    outer_mine, outer_theirs = [str(f) for f in reversed(mine)], [str(f) for f in reversed(theirs)]
    differ = first_apart(outer_mine, outer_theirs)
    blocked = culprit in analysis.culprit_entries
    where = f"{'' if blocked else 'its last op, '}{entry_label(shown, table)}" if shown else "no op in its dump"
    same = "" if differ < max(len(mine), len(theirs)) else " The two stacks are the same."
    return (f"<h2>Stacks at the divergence</h2><p class='note'>Outermost frame first; the first frame that differs is "
            f"marked.{same}</p><table class='stacks' id='stacks'><tr><th>rank {culprit} (culprit) in {escape(where)}</th>"
            f"<th>{count} rank(s) in {escape(root.op)} #{root.collective_seq_id} of {escape(root.group.label)}</th></tr>"
            f"{_side_by_side(outer_mine, outer_theirs, differ)}</table>")


MAX_STACKS_NOW = 4  # culprits whose stacks now are drawn


def _stacks_now(analysis: Analysis) -> str:
    """Each culprit's Python stack now (a stack file beside its dump) beside the one most of its
    group peers share, outermost frame first, the first frame where they part marked."""
    tables = []
    for seen in [seen for seen in analysis.stacks_apart if seen.rank in analysis.culprit_ranks][:MAX_STACKS_NOW]:
        rows = _side_by_side([frame_text(f) for f in seen.frames], [frame_text(f) for f in seen.peers_frames], seen.apart)
        same = "" if seen.apart < max(len(seen.frames), len(seen.peers_frames)) else "<p class='note'>The two stacks are the same.</p>"
        tables.append(f"<table class='stacks' id='now-{seen.rank}'><tr><th>rank {seen.rank} (culprit)</th>"
                      f"<th>{seen.agreeing} of its {seen.peers} {escape(seen.group.label)} peers</th></tr>{rows}</table>"
                      f"{same}")
    if not tables:
        return ""
    return ("<h2>Where the programs are now</h2><p class='note'>The ranks' Python stacks, from the stack files beside "
            "the dumps: outermost frame first, down to the program's own innermost line and the library call it is "
            "in; the first frame that differs is marked.</p>" + "".join(tables))


def _late_arrivals(dumps: dict[int, Dump], table: GroupTable) -> list[tuple[int, int, int, float]]:
    """(rank, times it started a collective last, collectives it took part in, median ms behind
    the median member when last), over each group's last LATE_WINDOW collectives that every
    member's dump holds; most often last first. Read from the columns, not the analysis."""
    starts: dict[tuple, list[tuple[int, int]]] = {}
    for rank, dump in dumps.items():
        entries = dump.entries
        times = (entries.time_started_ns, entries.time_created_ns)
        for name, run in (entries.runs or {}).items():
            group = table.group_of(rank, name)
            if group is None or len(group.ranks) < 2:
                continue
            for p in run.positions[-LATE_WINDOW:]:
                when = times[0][p] or times[1][p]
                if when and not entries.kinds[entries.kind[p]].is_p2p:
                    starts.setdefault((group, entries.collective_seq_id[p]), []).append((when, rank))
    last: dict[int, list[float]] = {}
    part: Counter = Counter()
    for (group, _), arrivals in starts.items():
        if len(arrivals) != len(group.ranks):  # a member's dump lacks it: who came last is unknown
            continue
        arrivals.sort()
        part.update(rank for _, rank in arrivals)
        median = arrivals[len(arrivals) // 2][0]
        when, rank = arrivals[-1]
        last.setdefault(rank, []).append((when - median) / 1e6)
    ranked = sorted(last.items(), key=lambda item: (-len(item[1]), item[0]))
    return [(rank, len(lates), part[rank], statistics.median(lates)) for rank, lates in ranked]


def _late_plot(dumps: dict[int, Dump], table: GroupTable) -> str:
    rows = _late_arrivals(dumps, table)[:MAX_BARS]
    if not rows:
        return ""
    top = max(times for _, times, _, _ in rows) or 1
    bar_h = 20
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='900' height='{len(rows) * bar_h + 20}' role='img' "
           "aria-label='late arrivals'>"]
    for i, (rank, times, part, late) in enumerate(rows):
        y = 10 + i * bar_h
        width = 520 * times / top
        svg.append(f"<text x='0' y='{y + 14}'>rank {rank}</text>"
                   f"<rect x='90' y='{y + 2}' width='{width:.1f}' height='{bar_h - 6}' fill='#fb8c00'/>"
                   f"<text x='{96 + width:.1f}' y='{y + 14}'>last in {times} of {part}; median {late:.3f} ms late</text>")
    svg.append("</svg>")
    return (f"<h2>Late arrivals</h2><p class='note'>How often each rank was the last to start a collective, and how "
            f"late, over each group's last {LATE_WINDOW} collectives (from the dumps' start times; clocks of different "
            f"hosts may differ).</p><div id='late'>{''.join(svg)}</div>")


def _notes(analysis: Analysis) -> str:
    if not analysis.warnings:
        return ""
    items = "".join(f"<li>{escape(w)}</li>" for w in analysis.warnings[:50])
    more = f"<li>... {len(analysis.warnings) - 50} more</li>" if len(analysis.warnings) > 50 else ""
    return f"<h2>Notes</h2><ul class='note'>{items}{more}</ul>"
