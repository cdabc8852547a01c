"""Every fixture scenario, real (gloo) and synthetic, gives its expected verdict, culprits and root."""

from __future__ import annotations

import json
import pickle

import pytest

from conftest import scenario_dirs
from frtrace.cli import main
from frtrace.reading.discover import find_dump_files
from frtrace.loader import load_dumps
from frtrace.analysis.verdict import CAUSES
from frtrace.types import FINDING_KINDS

SCENARIOS = scenario_dirs()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_verdict_culprits_and_root(scenario, tmp_path, capsys):
    expected = json.loads((scenario / "expected.json").read_text())
    report_path = tmp_path / "report.json"

    code = main(["-d", str(scenario), "--json", str(report_path)])

    report = json.loads(report_path.read_text())
    assert report["verdict"] == expected["verdict"], report["headline"]
    assert report["culprit_ranks"] == expected["culprit_ranks"], report["headline"]
    assert code == (0 if expected["verdict"] == "clean" else 1)
    assert {f["kind"] for f in report["findings"]} <= set(FINDING_KINDS)
    roots = [f for f in report["findings"] if f["root_cause"]]
    if expected["root"] is None:
        assert roots == []
    for root in [expected["root"]] * (expected["root"] is not None) + expected.get("roots", []):  # several: each one marked
        assert any(
            f["kind"] == root["kind"]
            and f["pg_desc"] == root["pg_desc"]
            and f["collective_seq_id"] == root.get("collective_seq_id")
            and f["p2p_seq_id"] == root.get("p2p_seq_id", f["p2p_seq_id"])
            for f in roots
        ), (root, roots)
    assert report["cause"] == expected["cause"], report["causes"]  # the truth its program wrote
    by_rank = expected.get("causes") or {str(r): expected["cause"] for r in expected["culprit_ranks"]}
    assert {rank: c["cause"] for rank, c in report["causes"].items()} == by_rank
    assert {c["cause"] for c in report["causes"].values()} <= set(CAUSES)
    if "stale_ranks" in expected:  # dumps older than their peers' (the program took them earlier)
        assert [s["rank"] for s in report["stale_ranks"]] == expected["stale_ranks"], report["notes"]
    if "no_evidence_ranks" in expected:  # recorders that were off
        assert report["no_evidence_ranks"] == expected["no_evidence_ranks"]
    lines = capsys.readouterr().out.splitlines()
    first_line = lines[0]
    assert first_line.startswith(expected.get("headline_starts", expected["verdict"].upper() + ":")), first_line
    assert first_line == report["headline"]
    assert lines[1].startswith("Cause: ") == bool(report["causes"]), lines[1]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_database_loads_with_plain_pickle(scenario, tmp_path):
    db_path = tmp_path / "db.pkl"
    main(["-d", str(scenario), "-o", str(db_path)])

    with open(db_path, "rb") as handle:
        types, db = pickle.load(handle)

    assert [t.name for t in types][:6] == ["Database", "NCCLCall", "Collective", "Traceback", "Membership", "Group"]
    assert [f for f, _ in types[2].fields][:3] == ["id", "group_id", "pass_check"]
    assert set(db._fields) == {"groups", "memberships", "tracebacks", "collectives", "ncclcalls", "findings"}
    expected = json.loads((scenario / "expected.json").read_text())
    assert {r for f in db.findings if f.root_cause for r in f.ranks} >= set(expected["culprit_ranks"]) or expected["verdict"] == "stuck"
    # one call per entry; each collective call points at a collective of its own group, p2p calls at None
    by_id = {c.id: c for c in db.collectives}
    calls = list(db.ncclcalls)
    loaded = load_dumps(find_dump_files(str(scenario)))
    assert len(calls) == sum(len(d.entries) for d in loaded.dumps.values())
    assert all(by_id[c.collective_id].group_id == c.group_id for c in calls if c.collective_id is not None)
    assert all(c.collective_type.partition(":")[2].startswith(("send", "recv")) or c.collective_type.endswith(":coalesced")
               for c in calls if c.collective_id is None)
    assert {m.group_id for m in db.memberships} == {g.id for g in db.groups}


def test_desync_names_the_rank_listed_first_when_it_is_the_culprit():
    """Greedy matching from the first rank would blame ranks 1-3; the majority rule blames rank 0."""
    scenario = next(p for p in SCENARIOS if p.name == "wrong_op_rank0")
    assert json.loads((scenario / "expected.json").read_text())["culprit_ranks"] == [0]


def test_pickle_and_json_dumps_of_one_run_agree(tmp_path):
    by_format = {}
    source = next(p for p in SCENARIOS if p.name == "skip_goes_on")
    for fmt in ("pickle", "json"):
        target = tmp_path / fmt
        target.mkdir()
        for f in source.iterdir():
            if f.name.startswith("trace_host") and f.name.endswith(".json") == (fmt == "json"):
                (target / f.name).write_bytes(f.read_bytes())
        out = tmp_path / f"{fmt}.json"
        main(["-d", str(target), "--json", str(out)])
        report = json.loads(out.read_text())
        by_format[fmt] = (report["verdict"], report["culprit_ranks"], report["headline"])
    assert by_format["pickle"] == by_format["json"]
    assert by_format["json"][1] == [1]
