"""Where users keep dumps (issue 11): a folder per host, host names inside file names, -p anywhere."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from frtrace.cli import main

SKIP = FIXTURES / "skip_rank2"  # rank 2 is the culprit


def report(tmp_path: Path, *argv: str) -> dict:
    target = tmp_path / "report.json"
    assert main([*argv, "--json", str(target)]) == 1
    return json.loads(target.read_text())


def test_a_folder_per_host_is_read_and_the_culprits_host_named(tmp_path):
    dumps = tmp_path / "gathered"
    for rank in range(4):
        host = dumps / f"node-{rank // 2}"
        host.mkdir(parents=True, exist_ok=True)
        shutil.copy(SKIP / f"nccl_trace_rank_{rank}", host)
    result = report(tmp_path, "-d", str(dumps))
    assert result["culprit_ranks"] == [2] and result["ranks_loaded"] == [0, 1, 2, 3]
    assert result["culprit_files"] == [{"rank": 2, "file": "node-1/nccl_trace_rank_2", "host": "node-1"}]


@pytest.mark.parametrize("names,prefix,host", [
    (["trace_host-node00_0", "trace_host-node00_1", "trace_host-node01_2", "trace_host-node01_3"], None, "host-node01"),
    (["nccl_trace_rank_container-node01_0", "nccl_trace_rank_container-node01_1",
      "nccl_trace_rank_container-node02_2", "nccl_trace_rank_container-node02_3"], "nccl_trace_rank_", "container-node02"),
], ids=["host-in-name", "prefix-before-host"])
def test_host_names_inside_file_names(tmp_path, names, prefix, host):
    dumps = tmp_path / "d"
    dumps.mkdir()
    for rank, name in enumerate(names):
        shutil.copy(SKIP / f"nccl_trace_rank_{rank}", dumps / name)
    result = report(tmp_path, "-d", str(dumps), *(["-p", prefix] if prefix else []))
    assert result["culprit_files"] == [{"rank": 2, "file": names[2], "host": host}]


def test_the_prefix_matches_anywhere_before_the_rank(tmp_path):
    dumps = tmp_path / "d"
    dumps.mkdir()
    for rank in range(4):
        shutil.copy(SKIP / f"nccl_trace_rank_{rank}", dumps / f"job7-nccl_trace_rank_{rank}")
    shutil.copy(SKIP / "nccl_trace_rank_0", dumps / "other_5")  # no prefix in it: not read
    result = report(tmp_path, "-d", str(dumps), "-p", "/tmp/nccl_trace_rank_")
    assert result["ranks_loaded"] == [0, 1, 2, 3]
    assert any(i["path"].endswith("other_5") and "--prefix" in i["reason"] for i in result["ignored_files"])


def test_one_rank_in_two_host_folders_is_an_input_error(tmp_path, capsys):
    for host in ("node-a", "node-b"):
        (tmp_path / host).mkdir()
        shutil.copy(SKIP / "nccl_trace_rank_1", tmp_path / host)
    shutil.copy(SKIP / "nccl_trace_rank_0", tmp_path / "node-a")
    assert main(["-d", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "two dump files claim rank 1" in err and "node-a/nccl_trace_rank_1" in err and "node-b/nccl_trace_rank_1" in err


def test_linked_and_hidden_folders_are_not_walked(tmp_path):
    dumps = tmp_path / "d"
    shutil.copytree(SKIP, dumps)
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(SKIP / "nccl_trace_rank_0", tmp_path / "elsewhere" / "nccl_trace_rank_7")
    os.symlink(tmp_path / "elsewhere", dumps / "linked")
    os.symlink(dumps, dumps / "loop")  # a link back to itself: never followed
    (dumps / ".cache").mkdir()
    shutil.copy(SKIP / "nccl_trace_rank_0", dumps / ".cache" / "nccl_trace_rank_9")
    result = report(tmp_path, "-d", str(dumps))
    assert result["ranks_loaded"] == [0, 1, 2, 3] and result["culprit_ranks"] == [2]


def test_a_new_output_named_like_a_dump_in_a_host_folder_is_refused(tmp_path, capsys):
    dumps = tmp_path / "d"
    (dumps / "node-a").mkdir(parents=True)
    for rank in range(4):
        shutil.copy(SKIP / f"nccl_trace_rank_{rank}", dumps / "node-a")
    assert main(["-d", str(dumps), "-o", str(dumps / "node-a" / "nccl_trace_rank_4")]) == 2
    assert "would be read as one next time" in capsys.readouterr().err
