"""frtrace mcp (issue 32): every tool called over stdio with the MCP SDK's own client, as an agent
would, and its results checked against the fixtures' truth and the schemas."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP SDK: pip install 'frtrace[mcp]' (the test extra installs it)")
import anyio  # noqa: E402  (the SDK's own dependency)
import jsonschema  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from conftest import FIXTURES  # noqa: E402
from test_live import _pair, _url, _worker  # noqa: E402  (simulated debug-server workers)
from frtrace.outputs.report import schema_text  # noqa: E402

pytestmark = pytest.mark.process


def _session(roots: list[str], calls: list[tuple[str, dict]]) -> tuple[list, list]:
    """Start `frtrace mcp --root ...` and make each call in turn: (the tools listed, each result)."""
    async def run():
        argv = ["-m", "frtrace", "mcp"] + [part for root in roots for part in ("--root", root)]
        async with stdio_client(StdioServerParameters(command=sys.executable, args=argv)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = (await session.list_tools()).tools
                return listed, [await session.call_tool(name, arguments) for name, arguments in calls]
    return anyio.run(run)


def _json(result) -> dict:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def test_every_tool_answers_over_stdio_with_the_schema_s_objects(tmp_path):
    shutil.copytree(FIXTURES / "skip_goes_on", tmp_path / "set")
    shutil.copytree(FIXTURES / "pairs" / "twice_hang_rank2", tmp_path / "pair")
    workers = [_url(_worker(traces)).removeprefix("http://") for traces in _pair("twice_hang_rank2")]  # a hung job's ranks
    listed, results = _session([str(tmp_path)], [
        ("analyze_dumps", {"path": str(tmp_path / "set")}),
        ("rank_entries", {"path": str(tmp_path / "set"), "rank": 1, "group": "default_pg", "seq": 6, "window": 1}),
        ("explain_finding", {"path": str(tmp_path / "set"), "index": 0}),
        ("compare_sets", {"earlier": str(tmp_path / "pair" / "a"), "later": str(tmp_path / "pair" / "b")}),
        ("live_snapshot", {"out_dir": str(tmp_path / "snap"), "workers": workers, "interval": 0.2}),
        ("live_snapshot", {"out_dir": str(tmp_path / "snap2"), "workers": ["127.0.0.1:9"], "interval": 0.2}),
    ])
    assert {tool.name for tool in listed} == {"analyze_dumps", "rank_entries", "explain_finding", "compare_sets", "live_snapshot"}
    report, entries, finding, comparison = (_json(r) for r in results[:4])
    expected = json.loads((FIXTURES / "skip_goes_on" / "expected.json").read_text())
    jsonschema.validate(report, json.loads(schema_text("report")))
    assert report["verdict"] == expected["verdict"] and report["culprit_ranks"] == expected["culprit_ranks"]
    assert [e["collective_seq_id"] for e in entries["entries"]] == [5, 6] and entries["group"]["pg_desc"] == "default_pg"
    assert finding["finding"] == report["findings"][0] and finding["finding"]["root_cause"]
    never = [m["rank"] for m in finding["members"] if not m["issued"]]
    assert never == expected["culprit_ranks"] and finding["evidence"] == report["evidence"]
    jsonschema.validate(comparison, json.loads(schema_text("compare")))
    assert comparison["verdict"] == "stuck" and comparison["culprits"] == [2]
    live = _json(results[4])
    jsonschema.validate(live, json.loads(schema_text("report")))
    assert live["culprit_ranks"] == [2] and live["live"]["comparison"]["verdict"] == "stuck"
    assert sorted(p.name for p in (tmp_path / "snap").iterdir()) == ["a", "b"]
    silent = results[5]  # nobody listens on port 9: the one line frtrace live would print, as the tool's error
    assert silent.is_error and "no rank answered" in silent.content[0].text and "Traceback" not in silent.content[0].text


def test_a_path_outside_the_roots_is_refused_and_reads_nothing(tmp_path):
    (tmp_path / "root").mkdir()
    outside = str(FIXTURES / "skip_rank2")
    (tmp_path / "root" / "link").symlink_to(FIXTURES / "skip_rank2")  # a link out of the root is outside too
    _, results = _session([str(tmp_path / "root")], [
        ("analyze_dumps", {"path": outside}),
        ("analyze_dumps", {"path": str(tmp_path / "root" / "link")}),
        ("rank_entries", {"path": str(tmp_path / "root" / "missing"), "rank": 0, "group": "tp"}),
    ])
    for result in results[:2]:
        assert result.is_error and "is outside the folders this server may read" in result.content[0].text
    assert results[2].is_error and "missing" in results[2].content[0].text


def test_links_inside_a_dump_folder_are_never_followed_and_the_rest_is_read(tmp_path):
    # a dump and a stack file that are links out of the root, and a host folder that is one:
    # none is read; the other ranks are
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "stacks_skip_goes_on", root / "set")
    secret = tmp_path / "outside"
    shutil.copytree(FIXTURES / "skip_rank2", secret)
    (root / "set" / "nccl_trace_rank_3").unlink()
    (root / "set" / "nccl_trace_rank_3").symlink_to(secret / "nccl_trace_rank_3")
    (root / "set" / "nccl_trace_rank_1.stacks").unlink()
    (root / "set" / "nccl_trace_rank_1.stacks").symlink_to(FIXTURES / "stacks_data_stall_rank2" / "nccl_trace_rank_2.stacks")
    _, results = _session([str(root)], [("analyze_dumps", {"path": str(root / "set")})])
    report = _json(results[0])
    assert 3 not in report["ranks_loaded"] and report["ranks_loaded"] == [0, 1, 2]
    (skipped,) = report["skipped_files"]
    assert skipped["path"].endswith("nccl_trace_rank_3") and "a link, which frtrace does not follow here" in skipped["reason"]
    assert any("nccl_trace_rank_1.stacks" in note and "a link" in note for note in report["notes"])
    assert report["culprit_stacks"].get("1", {}).get("python") is None


def test_huge_or_mistyped_arguments_are_refused_in_one_line_without_their_value(tmp_path):
    shutil.copytree(FIXTURES / "skip_rank2", tmp_path / "set")
    huge = "x" * 10_000_000
    deep = "a/" * 5_000_000
    started = __import__("time").monotonic()
    _, results = _session([str(tmp_path)], [
        ("analyze_dumps", {"path": huge}),
        ("analyze_dumps", {"path": str(tmp_path) + "/" + deep}),
        ("rank_entries", {"path": str(tmp_path / "set"), "rank": "two", "group": "tp"}),
        ("live_snapshot", {"out_dir": str(tmp_path / "snap"), "workers": ["127.0.0.1:9"] * 5000}),
    ])
    assert __import__("time").monotonic() - started < 60
    said = [r.content[0].text for r in results]
    assert all(r.is_error for r in results) and all("\n" not in text and len(text) < 300 for text in said), said
    assert "path: 10,000,000 characters; at most 4,096" in said[0]
    assert re.search(r"path: 10,000,\d{3} characters; at most 4,096", said[1])
    assert "rank: " in said[2] and "two" not in said[2]
    assert "workers: 5,000 items; at most 4,096" in said[3]


def test_a_live_snapshot_with_interval_0_is_one_snapshot_as_the_command_documents(tmp_path):
    workers = [_url(_worker(traces[1])).removeprefix("http://") for traces in _pair("twice_hang_rank2")]
    _, results = _session([str(tmp_path)], [("live_snapshot", {"out_dir": str(tmp_path / "snap"), "workers": workers,
                                                               "interval": 0})])
    live = _json(results[0])  # was: refused, "0.1 to 60"
    assert live["culprit_ranks"] == [2] and sorted(p.name for p in (tmp_path / "snap").iterdir()) != ["a", "b"]


def test_a_store_s_url_may_be_a_root_and_only_what_lies_under_it_is_read(tmp_path):
    pytest.importorskip("s3fs", reason="reading S3 needs s3fs (the test extra installs it)")
    import os

    import remote_servers

    server = remote_servers.start_s3_server()
    try:
        server.upload(FIXTURES / "skip_goes_on", "dumps", "team/set")
        server.upload(FIXTURES / "skip_rank2", "dumps", "other/set")
        local = tmp_path / "set"
        shutil.copytree(FIXTURES / "skip_rank2", local)

        async def run():
            argv = ["-m", "frtrace", "mcp", "--root", "s3://dumps/team"]
            parameters = StdioServerParameters(command=sys.executable, args=argv, env={**os.environ, **server.env})
            async with stdio_client(parameters) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return [await session.call_tool("analyze_dumps", {"path": path}) for path in
                            ("s3://dumps/team/set", "s3://dumps/other/set", "s3://dumps/team/../other/set", str(local))]
        inside, other, climbing, here = anyio.run(run)
    finally:
        server.stop()
    report = _json(inside)
    assert (report["verdict"], report["culprit_ranks"]) == ("desync", [1])
    for refused in (other, climbing, here):
        assert refused.is_error and "outside the" in refused.content[0].text, refused.content
