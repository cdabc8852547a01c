"""The first line, which people paste into a chat: one line, the verdict, then each culprit with
the one thing it did; about 160 characters for one culprit, a short clause for each further one.
What is undecided has a line of its own. Checked on every fixture and on generated jobs of every
fault kind (tests/jobgen.py), whose shapes no fixture has."""

from __future__ import annotations

import json
import re

import pytest

import accuracy
import jobgen
from conftest import scenario_dirs
from frtrace.cli import main

SCENARIOS = scenario_dirs()

ONE_CULPRIT = 180  # characters of the first line where one rank (or ranks in one op) is named
MORE_CULPRITS = 300  # where several are, each after the first in a short clause, at most 3 of them
NO_CULPRIT = 250  # CLEAN, or INCONCLUSIVE with what it could not decide
VERDICT = re.compile(r"(CLEAN|DESYNC|STUCK|INCONCLUSIVE): ")


def shape_problems(headline: str, culprits: list[int], undecided: list[str]) -> list[str]:
    """What is wrong with a first line, in words; [] where nothing is."""
    problems = []
    if "\n" in headline or not VERDICT.match(headline):
        problems.append("not one line starting with the verdict")
    body = headline.split(": ", 1)[-1]
    if culprits and not re.match(rf"ranks? {culprits[0]}\b", body):
        problems.append(f"does not start with the first culprit (rank {culprits[0]})")
    bound = NO_CULPRIT if not culprits else ONE_CULPRIT if len(culprits) == 1 else MORE_CULPRITS
    if len(headline) > bound:
        problems.append(f"{len(headline)} characters, over {bound}")
    problems += [f"says what is undecided ({text[:60]}...)" for text in undecided if text and text in headline
                 and headline.startswith(("DESYNC", "STUCK"))]
    return problems


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_every_fixture_first_line(scenario, tmp_path, capsys):
    main(["-d", str(scenario), "--json", str(tmp_path / "report.json")])
    report = json.loads((tmp_path / "report.json").read_text())
    first = capsys.readouterr().out.splitlines()[0]
    undecided = [e.removeprefix("undecided: ") for e in report["evidence"] if e.startswith("undecided: ")]
    assert shape_problems(first, report["culprit_ranks"], undecided) == [], first
    expected = json.loads((scenario / "expected.json").read_text())
    assert first.endswith(expected.get("headline_ends", "")), first


def test_generated_jobs_first_lines():
    """Jobs of every fault kind, in every layout the generator writes (gloo, NCCL, torchcomms)."""
    bad = []
    for i in range(60 * len(jobgen.FAULTS)):
        fault = jobgen.FAULTS[i % len(jobgen.FAULTS)]
        _, job, analysis = accuracy.run_job(424_242 + i, fault)
        undecided = [e.removeprefix("undecided: ") for e in analysis.evidence if e.startswith("undecided: ")]
        problems = shape_problems(analysis.headline, list(analysis.culprit_ranks), undecided)
        if problems:
            bad.append(f"{fault} seed {424_242 + i}: {problems}: {analysis.headline}")
    assert bad == [], "\n".join(bad[:5])


@pytest.mark.parametrize("headline, culprits, problem", [
    ("DESYNC: rank 2 never joined all_reduce #4 of tp\nrank 3 too", [2], "not one line"),
    ("DESYNC: 2 desyncs (which caused which cannot be told): rank 2 never joined all_reduce #4 of tp", [2], "first culprit"),
    ("STUCK: all_reduce #5 of tp was issued by all 2 members but never completed on ranks 2-3", [2, 3], "first culprit"),
    ("DESYNC: rank 2 never joined all_reduce #4 of tp" + "; and so on" * 20, [2], "over 180"),
])
def test_the_shape_check_can_fail(headline, culprits, problem):
    assert any(problem in said for said in shape_problems(headline, culprits, [])), shape_problems(headline, culprits, [])


def test_a_thousand_scattered_ranks_are_counted_not_listed():
    from frtrace.analysis.align import ranks_word

    said = ranks_word(range(0, 4096, 8))
    assert said == "ranks 0,8,16,24,32,40,48,56,... (512 ranks)"
    assert ranks_word([0, 1, 2, 5]) == "ranks 0-2,5" and ranks_word([7]) == "rank 7"
