"""The JSON outputs against the schemas frtrace ships (frtrace schema): every fixture's report,
frtrace compare's, and the Python API's, validated with jsonschema (a test dependency)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import FIXTURES, scenario_dirs
from frtrace import api
from frtrace.cli import main


def _schema(which: str, capsys) -> dict:
    assert main(["schema", which]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@pytest.mark.parametrize("folder", scenario_dirs(), ids=lambda p: p.name)
def test_every_fixture_s_report_fits_the_schema(folder, tmp_path, capsys):
    schema = _schema("report", capsys)
    main(["-d", str(folder), "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, schema, cls=jsonschema.Draft202012Validator)
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == sorted(report["ranks_loaded"] + report["ranks_missing"])
    assert {r for r, said in ranks.items() if said["culprit"]} == set(report["culprit_ranks"])
    assert all((said["status"] == "missing") == (r in report["ranks_missing"]) for r, said in ranks.items())
    assert set(report["culprit_stacks"]) == {str(r) for r in report["culprit_ranks"]}


@pytest.mark.parametrize("pair", sorted(p for p in (FIXTURES / "pairs").iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_frtrace_compare_s_json_fits_its_schema(pair, tmp_path, capsys):
    schema = _schema("compare", capsys)
    main(["compare", str(pair / "a"), str(pair / "b"), "--json", str(tmp_path / "c.json")])
    jsonschema.validate(json.loads((tmp_path / "c.json").read_text()), schema, cls=jsonschema.Draft202012Validator)


def test_the_schema_refuses_a_report_that_drifted(tmp_path, capsys):
    """The schema is strict: a field renamed, a cause misspelt or a rank's status unknown fails."""
    schema = _schema("report", capsys)
    report = api.analyze_dumps(str(FIXTURES / "skip_rank2")).as_dict()
    jsonschema.validate(report, schema)
    renamed = {("culprits" if key == "culprit_ranks" else key): value for key, value in report.items()}
    for broken in (renamed, {**report, "cause": "network"}, {**report, "ranks": [{**report["ranks"][0], "status": "asleep"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_a_culprit_s_stacks_are_in_the_report_as_recorded_and_as_the_stack_file_says(tmp_path, capsys):
    """Real gloo dumps and faulthandler stacks: rank 2's recorded stack of its last op, and its
    training thread now, whose innermost frame is the stack file's first line."""
    folder = FIXTURES / "stacks_data_stall_rank2"
    report = api.analyze_dumps(str(folder)).as_dict()
    stacks = report["culprit_stacks"]["2"]
    first = (folder / "nccl_trace_rank_2.stacks").read_text().split("(most recent call first):\n", 1)[1].splitlines()[0]
    assert stacks["python"][0]["file"] in first and f'line {stacks["python"][0]["line"]} in {stacks["python"][0]["function"]}' in first
    assert stacks["recorded"] and stacks["op"]["op"] == "all_reduce" and stacks["op"]["pg_desc"] == "default_pg"
    waiting = [r for r in report["ranks"] if r["status"] == "blocked"]
    assert {r["rank"] for r in waiting} == {0, 1, 3} and {r["blocked_in"]["pg_desc"] for r in waiting} == {"default_pg", "tp"}
