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
    assert result["culprit_files"] == [{"rank": 2, "file": "node-1/nccl_trace_rank_2", "host": "node-1", "not_read": None}]


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
    assert result["culprit_files"] == [{"rank": 2, "file": names[2], "host": host, "not_read": None}]


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


# ---------------------------------------------------------------------------- archives
import io  # noqa: E402
import tarfile  # noqa: E402
import zipfile  # noqa: E402


def _tar(path: Path, members: dict[str, bytes], mode: str = "w:gz", extra=()) -> Path:
    with tarfile.open(path, mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info in extra:
            archive.addfile(info)
    return path


def _skip_members(folder: str = "dumps") -> dict[str, bytes]:
    return {f"{folder}/node-{r // 2}/nccl_trace_rank_{r}": (SKIP / f"nccl_trace_rank_{r}").read_bytes() for r in range(4)}


@pytest.mark.parametrize("mode", ["w:gz", "w", "w:bz2", "w:xz"], ids=["tar.gz", "tar", "tar.bz2", "tar.xz"])
def test_a_tar_archive_is_read_without_extracting(tmp_path, mode):
    archive = _tar(tmp_path / "dumps.archive", _skip_members(), mode)
    before = sorted(os.listdir(tmp_path))
    result = report(tmp_path, "-d", str(archive))
    assert result["culprit_ranks"] == [2] and result["ranks_loaded"] == [0, 1, 2, 3]
    assert result["culprit_files"] == [{"rank": 2, "file": "node-1/nccl_trace_rank_2", "host": "node-1", "not_read": None}]
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "report.json"])


def test_a_zip_archive_is_read(tmp_path):
    with zipfile.ZipFile(tmp_path / "dumps.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in _skip_members().items():
            archive.writestr(name, data)
    assert report(tmp_path, "-d", str(tmp_path / "dumps.zip"))["culprit_ranks"] == [2]


def test_links_escapes_and_oversize_members_are_never_read(tmp_path):
    members = _skip_members()
    members["../../escape/nccl_trace_rank_3x"] = b"\x80\x02"  # no rank at the end: ignored, never written anywhere
    link = tarfile.TarInfo("dumps/node-0/nccl_trace_rank_5")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("dumps/node-0/nccl_trace_rank_6")
    hard.type, hard.linkname = tarfile.LNKTYPE, "dumps/node-0/nccl_trace_rank_0"
    fifo = tarfile.TarInfo("dumps/node-0/nccl_trace_rank_7")
    fifo.type = tarfile.FIFOTYPE
    archive = _tar(tmp_path / "a.tar", members, "w", extra=(link, hard, fifo))
    result = report(tmp_path, "-d", str(archive))
    assert result["ranks_loaded"] == [0, 1, 2, 3] and result["culprit_ranks"] == [2]
    reasons = {Path(s["path"]).name: s["reason"] for s in result["skipped_files"]}
    assert "a link in the archive" in reasons["nccl_trace_rank_5"] and "a link in the archive" in reasons["nccl_trace_rank_6"]
    assert "a device or FIFO" in reasons["nccl_trace_rank_7"]
    assert not (tmp_path.parent / "escape").exists() and not Path("/escape").exists()


def test_a_member_bigger_than_a_dump_is_not_read(tmp_path, monkeypatch):
    from frtrace.reading import archive as archive_module
    monkeypatch.setattr(archive_module, "MAX_DUMP_BYTES", 100_000)  # a 2 GiB member would say the same
    members = _skip_members()
    members["dumps/node-1/nccl_trace_rank_3"] = b"\x80\x02" + bytes(200_000)
    result = report(tmp_path, "-d", str(_tar(tmp_path / "a.tar.gz", members)))
    (skipped,) = result["skipped_files"]
    assert skipped["path"].endswith("nccl_trace_rank_3") and "more than the 0 MiB a Flight Recorder dump can hold" in skipped["reason"]


def test_a_truncated_archive_keeps_what_was_read(tmp_path):
    full = _tar(tmp_path / "a.tar", _skip_members(), "w").read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(full[: len(full) * 3 // 4])
    target = tmp_path / "r.json"
    assert main(["-d", str(cut), "--json", str(target)]) in (0, 1)
    result = json.loads(target.read_text())
    assert result["ranks_loaded"] and any("damaged" in s["reason"] or "cannot read" in s["reason"] for s in result["skipped_files"])


def test_the_archive_itself_is_never_an_output(tmp_path, capsys):
    archive = _tar(tmp_path / "a.tar.gz", _skip_members())
    before = archive.read_bytes()
    assert main(["-d", str(archive), "-o", str(archive)]) == 2
    assert archive.read_bytes() == before and "frtrace never writes over its input" in capsys.readouterr().err


@pytest.mark.parametrize("free, looks_expected, ranks", [(1 << 20, 1, [0, 1, 2, 3]), (12_000, 2, [0])],
                         ids=["room for all: looked at once", "room for one: the rest not read"])
def test_the_free_space_of_the_temporary_folder_is_looked_at_as_the_copies_need(tmp_path, monkeypatch, free,
                                                                                 looks_expected, ranks):
    from collections import namedtuple

    from frtrace.reading import archive as archive_module
    usage = namedtuple("usage", "total used free")
    looks = []

    def disk_usage(path):  # `free` bytes beyond the spare at the first look, none after
        looks.append(path)
        return usage(1 << 40, 0, archive_module._SPARE_DISK + (free if len(looks) == 1 else 0))

    monkeypatch.setattr(archive_module.shutil, "disk_usage", disk_usage)
    result = report(tmp_path, "-d", str(_tar(tmp_path / "a.tar", _skip_members(), "w")))
    assert len(looks) == looks_expected and result["ranks_loaded"] == ranks
    stopped = [s for s in result["skipped_files"] if "has no room to copy the rest of its dumps" in s["reason"]]
    assert len(stopped) == (ranks != [0, 1, 2, 3])
