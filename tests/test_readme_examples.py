"""The README's examples are the real output: every block that shows a command (`$ frtrace ...`)
or is marked as a command's output (`<!-- output: frtrace ... -->` above it) is run here, in a
folder where `fixtures/` is the repository's, and each line it shows must be a line of what the
command prints, in order. A line "..." stands for any lines left out, "..." inside a line for any
text (the README cuts long lines so); nothing else is loose."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(?:<!-- output: (?P<command>[^>]+?) -->\n)?```[a-z]*\n(?P<body>.*?)```", re.S)
# commands whose examples need what a test cannot start: a running job's store
NOT_RUN = ("frtrace live",)


def examples() -> list[tuple[int, list[tuple[str, list[str]]]]]:
    """Each block with commands, by its line in the README: [(command, the lines shown after it)]."""
    text = (ROOT / "README.md").read_text()
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("body"))
        body = match["body"].splitlines()
        if match["command"]:
            found.append((line, [(match["command"], body)]))
        elif any(b.startswith("$ ") for b in body):
            steps: list[tuple[str, list[str]]] = []
            for b in body:
                if b.startswith("$ "):
                    steps.append((b[2:], []))
                elif steps:
                    steps[-1][1].append(b)
            found.append((line, steps))
    return found


def shown_in(shown: list[str], printed: list[str]) -> str | None:
    """None where every shown line is a printed line, in order ("..." lines skip any); else the
    first shown line that is not."""
    at = 0
    skipping = False
    for line in shown:
        if line.strip() == "...":
            skipping = True
            continue
        pattern = re.compile(".*".join(map(re.escape, line.rstrip().split("..."))) + r"\Z")
        while at < len(printed) and not pattern.match(printed[at].rstrip()):
            if not skipping:
                return line
            at += 1
        if at == len(printed):
            return line
        at += 1
        skipping = False
    return None


def run(command: str, cwd: Path) -> list[str]:
    argv = shlex.split(command)
    if argv[0] == "frtrace":
        argv = [sys.executable, "-m", "frtrace", *argv[1:]]
    elif argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    return done.stdout.splitlines() + done.stderr.splitlines()


EXAMPLES = examples()


def test_the_readme_has_examples():
    commands = [command for _, steps in EXAMPLES for command, _ in steps]
    assert any(c.startswith("frtrace -d") for c in commands) and any(c.startswith("frtrace compare") for c in commands)


@pytest.mark.parametrize("line, steps", EXAMPLES, ids=[f"README line {line}" for line, _ in EXAMPLES])
def test_readme_example_is_real_output(line, steps, tmp_path):
    if any(command.startswith(NOT_RUN) for command, _ in steps):
        pytest.skip(f"needs a running job ({steps[0][0]}); tests/test_live.py runs one")
    if any("frtrace.replay" in command for command, _ in steps):
        pytest.importorskip("torch", reason="the replay example runs the replay (the replay extra)")
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    for command, shown in steps:
        printed = run(command, tmp_path)
        assert shown_in(shown, printed) is None, (f"README line {line}: `{command}` does not print "
                                                 f"{shown_in(shown, printed)!r}; it prints:\n" + "\n".join(printed[:40]))


@pytest.mark.parametrize("shown, printed, fine", [
    (["a", "b"], ["a", "b", "c"], True),
    (["a", "...", "c"], ["a", "b", "x", "c"], True),
    (["a ... b"], ["a long b"], True),
    (["a", "c"], ["a", "b", "c"], False),  # a line left out without "..."
    (["a", "b"], ["a", "B"], False),
    (["a ... b"], ["a long b and more"], False),
])
def test_the_comparison_can_fail(shown, printed, fine):
    assert (shown_in(shown, printed) is None) == fine
