"""The Markdown summary (`--markdown PATH|-`): one screen to paste into a ticket or a chat.

The verdict, the cause, the culprits with their files, hosts and where each is, the evidence, the
first culprit's stack (as its dump recorded it, and its Python stack now where a stack file is
beside the dumps), what to look at next, and the command that produced it. Every string from a
dump is made printable and escaped for Markdown (and the HTML a Markdown page may hold), and code
blocks are fenced longer than any run of backticks they hold.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

from .. import __version__
from ..errors import printable
from ..types import Analysis
from .report import cause_text

MAX_CULPRITS = 8
MAX_EVIDENCE = 6
MAX_FRAMES = 12

# what Markdown reads as markup mid-line; an underscore only at a word's edge (all_reduce stays as it is)
_SPECIAL = re.compile(r"([\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")

NEXT = {  # what to look at next, by cause
    "divergence": "Compare the culprit's code path with its peers' at that op (the stacks above, its log around "
                  "it): a branch that depends on the data or on the rank (an early exit, a skipped step) is the "
                  "usual cause.",
    "compute_or_data_stall": "The culprit is in no collective: take its Python stack now (`py-spy dump --pid PID` on "
                             "its host, or faulthandler: see the README) to tell compute, data loading and a send or "
                             "recv apart.",
    "stuck_below_pytorch": "Every member entered the op and none finished: NCCL (`NCCL_DEBUG=INFO` logs), the network "
                           "between the hosts, or a GPU (`nvidia-smi`, `dmesg` for Xid errors).",
    "gpu_never_reached": "The culprit's GPU never reached the op: a kernel queued before it does not end. Check that "
                         "GPU (`nvidia-smi`, `dmesg` for Xid errors) and the kernels before the op.",
    "process_gone": "The culprit's process is gone or its host unreachable: its log, the host's kernel log (OOM "
                    "killer, segfaults) and the launcher's exit codes.",
    "hardware": "A health check failed on the culprit's device: drain that node and check the device it names.",
    "unknown": "The dumps cannot tell why: take each culprit's Python stack while the job hangs (`py-spy dump`, "
               "faulthandler) and run frtrace again with the stacks beside the dumps.",
    "mixed": "The culprits differ: follow each one's cause above.",
}
CLEAN_NEXT = ("Nothing is held up in these dumps. If the job still hangs, dump again later and compare the two "
              "(`frtrace compare A B`).")


def text(value: Any) -> str:
    """A string from a dump or an analysis, for a Markdown line: printable, one line, with Markdown's
    and HTML's special characters escaped."""
    said = printable(str(value)).replace("\n", " ").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", said)


def code_block(lines: list[str]) -> str:
    """Lines as a fenced code block, fenced longer than any run of backticks in them."""
    body = "\n".join(printable(line) for line in lines)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def write_markdown(analysis: Analysis, report: dict, out: TextIO, command: str) -> None:
    """The summary of an analysis (`report`: its JSON report, which holds each rank's file, host
    and op), for a person reading a ticket."""
    lines = [f"### frtrace: {analysis.verdict.upper()}", "", f"**{text(analysis.headline)}**", ""]
    if analysis.causes:
        lines += [f"**Cause:** {text(cause_text(analysis))}", ""]
    ranks = {r["rank"]: r for r in report["ranks"]}
    if analysis.culprit_ranks:
        lines += ["| culprit | file | host | where it is |", "|---|---|---|---|"]
        for rank in analysis.culprit_ranks[:MAX_CULPRITS]:
            known = ranks.get(rank, {})
            lines.append(f"| {rank} | {text(known.get('file') or 'no file')} | {text(known.get('host') or '-')} | "
                         f"{_where(known)} |")
        if len(analysis.culprit_ranks) > MAX_CULPRITS:
            lines.append(f"| ... | {len(analysis.culprit_ranks) - MAX_CULPRITS} more | | |")
        lines.append("")
    if analysis.evidence:
        lines += ["**Evidence**", ""] + [f"- {text(e)}" for e in analysis.evidence[:MAX_EVIDENCE]]
        if len(analysis.evidence) > MAX_EVIDENCE:
            lines.append(f"- and {len(analysis.evidence) - MAX_EVIDENCE} more (the text report has them all)")
        lines.append("")
    lines += _stacks(analysis, report)
    lines += ["**Look next:** " + (NEXT.get(report["cause"] or "", NEXT["unknown"]) if analysis.verdict != "clean"
                                   else CLEAN_NEXT), ""]
    lines += [f"Produced by frtrace {text(__version__)}:", "", code_block([command])]
    out.write("\n".join(lines) + "\n")


def _where(rank: dict) -> str:
    if rank.get("status") == "missing" or not rank:
        return "no dump"
    op = rank.get("blocked_in")
    if not op:
        return "in no collective the dumps show it waiting in"
    return f"waits in {_op(op)} ({text(op['state'])})"


def _op(op: dict | None) -> str:
    if not op:
        return "its op"
    seq = f"#{op['collective_seq_id']}" if op["collective_seq_id"] is not None else f"p2p #{op['p2p_seq_id']}"
    return f"{text(op['op'])} {seq} of {text(op['pg_desc'] or op['pg_name'])}"


def _stacks(analysis: Analysis, report: dict) -> list[str]:
    """The first culprit's stacks: its op's as its dump recorded it, and its Python stack now."""
    if not analysis.culprit_ranks:
        return []
    rank = analysis.culprit_ranks[0]
    stacks = report["culprit_stacks"].get(str(rank)) or {}
    lines = []
    for key, title in (("python", f"Rank {rank}'s Python stack now (its stack file), innermost first"),
                       ("recorded", f"Rank {rank}'s stack where it issued {_op(stacks.get('op'))}, as its dump recorded it, "
                                    "innermost first")):
        frames = stacks.get(key) or []
        if not frames:
            continue
        shown = [f"{f['function']} at {f['file']}:{f['line']}" for f in frames[:MAX_FRAMES]]
        if len(frames) > MAX_FRAMES:
            shown.append(f"... {len(frames) - MAX_FRAMES} more frames")
        lines += [f"**{title}:**", "", code_block(shown), ""]
    return lines
