"""The Markdown summary (--markdown PATH|-): one screen for a ticket, with what a person needs
first, every string from a dump escaped, and the command that produced it."""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES, entry, make_dump, ops
from frtrace.cli import main
from frtrace.outputs.markdown import NEXT


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


@pytest.mark.parametrize("fixture", ["skip_rank2", "stacks_data_stall_rank2", "missing_culprit_dump", "healthy"])
def test_the_summary_says_verdict_cause_culprits_and_what_to_look_at_next(fixture, tmp_path, capsys):
    folder = str(FIXTURES / fixture)
    code = main(["-d", folder, "--markdown", str(tmp_path / "s.md"), "--json", str(tmp_path / "r.json")])
    said = capsys.readouterr()
    summary = (tmp_path / "s.md").read_text()
    report = json.loads((tmp_path / "r.json").read_text())
    lines = summary.splitlines()
    assert lines[0] == f"### frtrace: {report['verdict'].upper()}" and lines[2] == f"**{report['headline']}**"
    assert said.out.startswith(report["headline"])  # the text report still printed: the summary went to a file
    assert f"frtrace: wrote {tmp_path / 's.md'} (" in said.err
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| culprit")]
    assert [int(row.split(" | ")[0][2:]) for row in rows] == report["culprit_ranks"]
    for row, culprit in zip(rows, report["culprit_files"]):
        assert _unescaped_pipes(row) == 5 and (culprit["file"] or "no file") in row
    look = next(line for line in lines if line.startswith("**Look next:** "))
    assert (NEXT[report["cause"]] if report["cause"] else "Nothing is held up") in look
    assert summary.rstrip().endswith(f"```text\nfrtrace -d {folder} --markdown {tmp_path / 's.md'} --json {tmp_path / 'r.json'}\n```")
    assert code == (0 if report["verdict"] == "clean" else 1)


def test_a_culprit_s_stacks_are_in_the_summary(tmp_path, capsys):
    """Real gloo dumps and faulthandler stacks: rank 2's stack now and as its dump recorded it."""
    assert main(["-d", str(FIXTURES / "stacks_data_stall_rank2"), "--markdown", "-"]) == 1
    summary = capsys.readouterr().out
    assert summary.startswith("### frtrace: DESYNC")  # the summary alone on standard output
    now = summary.split("**Rank 2's Python stack now (its stack file), innermost first:**\n\n```text\n", 1)[1]
    assert now.startswith("__getitem__ at fixtures/generate_gloo.py:362\n")
    assert "**Rank 2's stack where it issued all_reduce #9 of default_pg, as its dump recorded it" in summary


def test_the_summary_and_the_json_cannot_both_be_standard_output(capsys):
    assert main(["-d", str(FIXTURES / "skip_rank2"), "--markdown", "-", "--json", "-"]) == 2
    assert "would both go to standard output" in capsys.readouterr().err


def test_strings_from_a_dump_reach_the_summary_escaped(dump_dir, tmp_path, capsys):
    """A group desc and a frame written to break out: HTML, a table cell's pipe, emphasis, a code
    fence. They stay text."""
    desc = "tp<img src=x onerror=alert(1)>|*bold*"
    frames = [{"name": "f````x", "filename": "/job/<b>.py", "line": 3}]
    dumps = {r: make_dump(ops(2, desc=desc, pg="0", frames=frames) + ([] if r == 1 else [entry(seq=3, desc=desc, frames=frames)]))
             for r in range(3)}
    assert main(["-d", str(dump_dir(dumps)), "--markdown", str(tmp_path / "s.md")]) == 1
    summary = (tmp_path / "s.md").read_text()
    prose = re.sub(r"(`{3,})text\n.*?\n\1", "", summary, flags=re.S)  # outside the code blocks
    assert "<img" not in prose and "&lt;img src=x onerror=alert(1)&gt;\\|\\*bold\\*" in prose
    assert all(_unescaped_pipes(line) in (0, 5) for line in prose.splitlines())
    assert "`````text\nf````x at /job/<b>.py:3\n" in summary  # fenced longer than the name's backticks
