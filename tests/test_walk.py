"""What the folder walk says of each kind of entry (reading/discover.walked), now that the listing's
own file types spare a stat: a regular file is opened at once, anything else is stat'ed first."""

from __future__ import annotations

import os

from conftest import make_dump, ops, write_dumps
from frtrace.reading.discover import walked


def _said(found) -> dict[str, str]:
    """File name -> what the walk made of it."""
    said = {os.path.basename(f.path): "read" for f in found.candidates}
    said.update((os.path.basename(f.path), "empty") for f in found.empty)
    said.update((os.path.basename(f.path), why) for f, why in found.unreadable + found.not_files)
    return said


def test_regular_files_links_fifos_and_folders_are_each_told_apart(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(2))})
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    write_dumps(elsewhere, {1: make_dump(ops(2))})
    (tmp_path / "nccl_trace_rank_1").symlink_to(elsewhere / "nccl_trace_rank_1")
    (tmp_path / "nccl_trace_rank_2").symlink_to(tmp_path / "no-such-file")
    os.mkfifo(tmp_path / "nccl_trace_rank_3")
    os.mkfifo(elsewhere / "fifo")
    (tmp_path / "nccl_trace_rank_4").symlink_to(elsewhere / "fifo")
    (tmp_path / "nccl_trace_rank_5").write_bytes(b"")
    (tmp_path / "nccl_trace_rank_6").symlink_to(elsewhere, target_is_directory=True)
    found = walked(str(tmp_path))
    said = _said(found)
    assert said["nccl_trace_rank_0"] == "read" and said["nccl_trace_rank_1"] == "read"  # a link to a dump is the dump
    assert said["nccl_trace_rank_2"].startswith("cannot stat it")
    assert said["nccl_trace_rank_3"].startswith("a FIFO") and said["nccl_trace_rank_4"].startswith("a FIFO")
    assert said["nccl_trace_rank_5"] == "empty" and said["nccl_trace_rank_6"] == "a directory; not read"
    assert not any("elsewhere" in f.path for f in found.candidates)  # a linked folder is never walked into
    assert len(found.identities) == 6  # 0, 1 (its target), 3, 4 (its FIFO), 5, 6 (its folder): what was stat'ed or opened


def test_a_folder_below_is_walked_and_hidden_ones_are_not(tmp_path):
    write_dumps(tmp_path / "node-a", {0: make_dump(ops(2))})
    write_dumps(tmp_path / ".partial", {1: make_dump(ops(2))})
    found = walked(str(tmp_path))
    assert [os.path.relpath(f.path, tmp_path) for f in found.candidates] == [os.path.join("node-a", "nccl_trace_rank_0")]


def test_a_listed_file_crosses_a_pickle_whole():
    """DumpFile pickles as its fields (a node's listing reaches the caller so, --node-local): every
    field comes back, none left at its default."""
    import pickle
    from dataclasses import fields

    from frtrace.reading.discover import DumpFile

    listed = DumpFile("node-a:/d/trace_3.json", 3, "trace_", "json", "node-a/trace_3", "node-a/trace_3.json", "node-a",
                      "/d/trace_3.json", (512, 1024))
    back = pickle.loads(pickle.dumps(listed, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(back) is DumpFile and back == listed
    assert all(getattr(back, f.name) != f.default for f in fields(DumpFile))
