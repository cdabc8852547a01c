"""The Python API (frtrace.analyze_dumps): the README's example runs, and on every fixture the
API says what the command says, writes what it writes, prints nothing and raises only
FrtraceError."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import frtrace
from conftest import FIXTURES, make_dump, ops, scenario_dirs
from frtrace.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = scenario_dirs()


def test_the_readmes_example_runs(tmp_path, monkeypatch, capsys):
    (example,) = re.findall(r"<!-- api -->\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    os.symlink(FIXTURES, tmp_path / "fixtures")
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    # what the example's comment says it prints, and the report it writes
    assert printed[0] == re.search(r"# (desync .*)", example).group(1)
    report = json.loads((tmp_path / "report.json").read_text())
    assert printed[1] == report["headline"] and report["culprit_ranks"] == [1]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_the_api_says_and_writes_what_the_command_does(scenario, tmp_path, capfd):
    main(["-d", str(scenario), "--json", str(tmp_path / "cli.json"), "--html", str(tmp_path / "cli.html"),
          "-o", str(tmp_path / "cli.pkl")])
    printed = capfd.readouterr().out

    result = frtrace.analyze_dumps(scenario, jobs=1)
    result.write_json(str(tmp_path / "api.json"))
    result.write_html(str(tmp_path / "api.html"))
    result.write_database(str(tmp_path / "api.pkl"))

    assert capfd.readouterr() == ("", "")  # nothing printed, not even the skipped files
    report = json.loads((tmp_path / "cli.json").read_text())
    assert (result.verdict, list(result.culprit_ranks), result.headline) == (
        report["verdict"], report["culprit_ranks"], report["headline"])
    assert result.as_dict() == report and result.text() == printed
    for name in ("json", "html", "pkl"):
        assert (tmp_path / f"api.{name}").read_bytes() == (tmp_path / f"cli.{name}").read_bytes(), name


def test_files_that_cannot_be_used_are_kept_in_the_result_not_printed(dump_dir, capfd):
    folder = dump_dir({r: make_dump(ops(3)) for r in range(3)})
    (folder / "nccl_trace_rank_3").write_bytes(b"\x80\x02garbage")
    result = frtrace.analyze_dumps(folder)
    assert capfd.readouterr() == ("", "")
    assert [s.path for s in result.skipped] == [str(folder / "nccl_trace_rank_3")]
    assert result.verdict == "desync" and 3 in result.culprit_ranks  # the rank whose dump is unreadable


def test_errors_are_frtrace_errors_and_nothing_is_written_over_a_dump(tmp_path):
    with pytest.raises(frtrace.UsageError, match="no dump files"):
        frtrace.analyze_dumps(tmp_path)
    with pytest.raises(frtrace.FrtraceError, match="cannot read the dump directory"):
        frtrace.analyze_dumps(tmp_path / "not-there")
    scenario = FIXTURES / "skip_rank2"
    dump = scenario / "nccl_trace_rank_0"
    before = dump.read_bytes()
    result = frtrace.analyze_dumps(scenario)
    with pytest.raises(frtrace.UsageError):
        result.write_json(str(dump))
    assert dump.read_bytes() == before


def test_the_contract_is_all_there_and_importing_it_stays_cheap():
    assert all(getattr(frtrace, name) is not None for name in frtrace.__all__)
    assert issubclass(frtrace.DumpError, frtrace.FrtraceError) and issubclass(frtrace.OutputError, frtrace.FrtraceError)
    loaded = subprocess.run([sys.executable, "-c", "import sys, frtrace; print(sorted(m for m in sys.modules if m.startswith('frtrace')))"],
                            capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['frtrace']"
    with pytest.raises(AttributeError):
        frtrace.no_such_name


@pytest.mark.parametrize("argument, value, error, said", [
    ("jobs", -1, frtrace.FrtraceError, "jobs must be at least 1 (reading processes"),  # was: read in the caller's process
    ("jobs", 0, frtrace.FrtraceError, "jobs must be at least 1"),
    ("group_world_size", -3, frtrace.FrtraceError, "group_world_size must be at least 1"),  # was: silently INCONCLUSIVE
    ("jobs", "4", TypeError, "jobs must be an int or None, not str"),
    ("jobs", True, TypeError, "jobs must be an int or None, not bool"),
    ("group_world_size", 2.0, TypeError, "group_world_size must be an int or None, not float"),
    ("prefix", 7, TypeError, "prefix must be a str or None, not int"),
    ("path", None, TypeError, "path must be a str or os.PathLike, not NoneType"),
])
def test_the_api_refuses_what_the_command_refuses_naming_the_argument(argument, value, error, said):
    arguments = {"path": str(FIXTURES / "healthy"), argument: value}
    with pytest.raises(error) as raised:
        frtrace.analyze_dumps(**arguments)
    assert said in str(raised.value)


PAIRS = FIXTURES / "pairs"


@pytest.mark.parametrize("pair", ["twice_hang_rank2", "twice_healthy"])
@pytest.mark.parametrize("timing", [False, True])
def test_compare_sets_says_and_writes_what_frtrace_compare_does(pair, timing, tmp_path, capfd):
    a, b = str(PAIRS / pair / "a"), str(PAIRS / pair / "b")
    extra = ["--timing"] if timing else []
    code = main(["compare", a, b, *extra, "--json", str(tmp_path / "cli.json")])
    printed = capfd.readouterr().out

    compared = frtrace.compare_sets(a, b, timing=timing, jobs=1)
    compared.write_json(str(tmp_path / "api.json"))
    assert capfd.readouterr() == ("", "")  # nothing printed
    assert code == (0 if compared.verdict == "progressing" else 1)
    assert compared.text() == printed and compared.headline in printed
    assert (tmp_path / "api.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert json.loads((tmp_path / "api.json").read_text())["verdict"] == compared.verdict


def test_compare_sets_refuses_what_the_command_refuses_and_names_its_arguments(tmp_path):
    a = str(PAIRS / "twice_healthy" / "a")
    with pytest.raises(frtrace.UsageError, match="are the same dump set"):
        frtrace.compare_sets(a, a)
    with pytest.raises(TypeError, match="compare_sets: later must be a str or os.PathLike, not int"):
        frtrace.compare_sets(a, 3)
    with pytest.raises(frtrace.UsageError, match="compare_sets: jobs must be at least 1"):
        frtrace.compare_sets(a, str(PAIRS / "twice_healthy" / "b"), jobs=0)
    compared = frtrace.compare_sets(a, str(PAIRS / "twice_healthy" / "b"))
    with pytest.raises(frtrace.UsageError):  # never over a file of either set
        compared.write_json(str(PAIRS / "twice_healthy" / "a" / next(iter(sorted(os.listdir(a))))))


def test_plan_replay_writes_what_frtrace_replay_writes(tmp_path, capfd):
    assert main(["replay", str(SCENARIO_SKIP), "-o", str(tmp_path / "cli"), "--majority"]) == 0
    capfd.readouterr()
    replay = frtrace.plan_replay(SCENARIO_SKIP, out_dir=tmp_path / "api", mode="majority", jobs=1)
    assert capfd.readouterr() == ("", "")
    assert (tmp_path / "api" / "plan.json").read_bytes() == (tmp_path / "cli" / "plan.json").read_bytes()
    assert replay.out_dir == str(tmp_path / "api") and replay.ops == sum(map(len, replay.plan["ranks"].values())) > 0
    assert frtrace.plan_replay(SCENARIO_SKIP).plan == frtrace.plan_replay(SCENARIO_SKIP, mode="as-recorded").plan


def test_plan_replay_refuses_a_folder_in_use_before_reading(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(frtrace.UsageError, match="exists and is not an empty folder"):
        frtrace.plan_replay(SCENARIO_SKIP, out_dir=tmp_path / "full")
    with pytest.raises(frtrace.UsageError, match="inside or around the dump set"):
        frtrace.plan_replay(SCENARIO_SKIP, out_dir=SCENARIO_SKIP / "replay")
    with pytest.raises(frtrace.UsageError, match="plan_replay: mode must be one of as-recorded, majority, not bogus"):
        frtrace.plan_replay(SCENARIO_SKIP, mode="bogus")
    assert (tmp_path / "full" / "x").read_text() == "mine" and not (SCENARIO_SKIP / "replay").exists()


SCENARIO_SKIP = FIXTURES / "skip_rank2"
