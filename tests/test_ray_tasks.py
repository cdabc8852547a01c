"""How --ray cuts a set into tasks (reading.cluster.task_size, Cluster._tasks): no Ray needed.

A task costs the caller a few ms of CPU whatever it reads (benchmarks/ray_tasks.py), so a large
cluster must not be given many tiny tasks; the tasks the cluster's read on the caller's side
stay in job order and each node's files stay on it."""

from __future__ import annotations

import os

import pytest

from frtrace.reading import cluster
from frtrace.reading.cluster import Cluster, Node, task_size


def _cut(files: int, nodes: dict[str, int], node_of: dict[str, str] | None = None) -> tuple[list, list]:
    """Cluster._tasks of `files` jobs over nodes (name -> CPUs), without connecting to Ray."""
    reader = Cluster.__new__(Cluster)
    reader.node_of = {path: (node, path) for path, node in (node_of or {}).items()}
    return reader._tasks([(f"f{index}", index) for index in range(files)],
                         {name: Node(name, name, cpus) for name, cpus in nodes.items()})


@pytest.mark.parametrize("files, cpus", [(100_000, 3_200), (10_000, 3_200), (4_096, 32), (300, 2)])
def test_a_large_cluster_is_given_tasks_of_many_files_not_one_task_a_file(files, cpus):
    size = task_size(files, cpus)
    assert size <= cluster._TASK_FILES  # a task's answers are held whole until it ends
    tasks, gone = _cut(files, {f"n{i}": cpus // 2 for i in range(2)})
    assert not gone and len(tasks) == -(-files // size)
    assert len(tasks) <= files / 100  # at a few ms of the caller's CPU a task: hundredths of a ms a dump


@pytest.mark.parametrize("files, cpus, size", [(16_384, 2, 512), (3_072, 2, 384), (1_536, 2, 256), (1_024, 2, 256),
                                               (5, 64, 256)])
def test_four_tasks_a_cpu_where_the_floor_and_the_cap_allow(files, cpus, size):
    assert task_size(files, cpus) == size
    assert task_size(files, 0) == task_size(files, 1)  # a cluster said to have no CPU: as one


def test_every_file_is_in_one_task_in_job_order_and_a_nodes_files_stay_on_it():
    node_of = {f"f{index}": ("a" if index % 3 else "b") for index in range(600)}  # f600.. are anywhere (shared)
    tasks, gone = _cut(700, {"a": 1, "b": 1}, node_of)
    read = [index for _, indices in tasks for index in indices]
    assert sorted(read) == list(range(700)) and not gone
    assert [indices[0] for _, indices in tasks] == sorted(indices[0] for _, indices in tasks)
    for node, indices in tasks:
        assert indices == sorted(indices) and len(indices) <= task_size(700, 2)
        assert {node_of.get(f"f{i}") for i in indices} == {node.id if node is not None else None}


def test_the_files_of_a_node_gone_are_not_given_to_another():
    tasks, gone = _cut(10, {"a": 1}, {f"f{index}": ("a" if index < 5 else "b") for index in range(10)})
    assert gone == [5, 6, 7, 8, 9] and [indices for _, indices in tasks] == [[0, 1, 2, 3, 4]]


def test_a_nodes_listing_is_named_on_the_node_and_kept_whole_by_the_caller(tmp_path):
    """_walk_here names a node's files node:path under node/ (cluster._labelled); the caller's
    _merge keeps them and learns each one's node and its path there, a stack file's too, and no
    device and inode numbers of the node's, which name nothing on the caller's machine."""
    import os
    import pickle

    from conftest import make_dump, ops, write_dumps
    from frtrace.reading.discover import Found, finish

    write_dumps(tmp_path, {rank: make_dump(ops(2)) for rank in range(2)})
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"")  # empty beside the dumps: a rank killed before it dumped
    (tmp_path / "nccl_trace_rank_3").write_bytes(b"core dumped")  # not a dump's first bytes: unreadable
    os.mkfifo(tmp_path / "nccl_trace_rank_4")
    (tmp_path / "README").write_text("notes")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "rank_1.txt").write_text("Thread 1\n")
    _, listed = cluster._walk_here(str(tmp_path), None, "node-b")
    listed = pickle.loads(pickle.dumps(listed))  # as Ray brings it
    reader, merged = Cluster.__new__(Cluster), Found()
    reader.node_of = {}
    reader._merge(merged, listed, Node("id-b", "node-b", 1))

    def on_b(name: str) -> str:
        return f"node-b:{tmp_path / name}"

    assert [f.path for f in merged.candidates] == [on_b("nccl_trace_rank_0"), on_b("nccl_trace_rank_1")]
    assert [f.path for f in merged.empty] == [on_b("nccl_trace_rank_2")]
    assert [f.path for f, _ in merged.unreadable] == [on_b("nccl_trace_rank_3")]
    assert [f.path for f, _ in merged.not_files] == [on_b("nccl_trace_rank_4")]
    assert [s.path for s in merged.ignored] == [on_b("README")]
    assert merged.stacks == [(1, on_b("stacks/rank_1.txt"))] and merged.marked == {f.path for f in merged.candidates}
    first = merged.candidates[0]
    assert (first.where, first.stem, first.host, first.source) == (
        "node-b/nccl_trace_rank_0", "node-b/nccl_trace_rank_0", "node-b", str(tmp_path / "nccl_trace_rank_0"))
    named = [*merged.candidates, *merged.empty, *(f for f, _ in merged.unreadable), *(f for f, _ in merged.not_files)]
    assert reader.node_of == {**{f.path: ("id-b", f.source) for f in named},
                              on_b("stacks/rank_1.txt"): ("id-b", str(tmp_path / "stacks" / "rank_1.txt"))}
    assert not listed.identities and not merged.identities
    assert [f.rank for f in finish(merged).files] == [0, 1, 2]


def test_a_shared_folder_is_listed_by_a_task_only_where_it_sees_the_folder_as_the_caller_does(tmp_path):
    """_find_here lists the folder as the caller would (device and inode numbers included: they
    guard the inputs from being written over) where its view_of the folder is the caller's; where
    anything of it differs (another folder, another user), or the folder cannot be listed, it
    gives None, and the caller lists it itself and says why."""
    import pickle
    import shutil

    from conftest import FIXTURES
    from frtrace.reading.discover import find_dump_files

    folder, other = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIXTURES / "skip_rank2", folder)
    other.mkdir()
    view = cluster.view_of(str(folder))
    _, listed = cluster._find_here(str(folder), None, view)
    listed = pickle.loads(pickle.dumps(listed))  # as Ray brings it
    assert listed == find_dump_files(str(folder)) and len(listed.files) == 4 and len(listed.identities) == 4
    assert cluster.view_of(str(other)) != view and cluster.view_of(str(folder)) == view
    boot, places, user, group, groups = view
    for elsewhere in (cluster.view_of(str(other)), (boot, places, user + 1, group, groups),
                      (boot, places, user, group, [*groups, -1]), (b"another boot", places, user, group, groups)):
        assert cluster._find_here(str(folder), None, elsewhere)[1] is None
    assert cluster._find_here(str(tmp_path / "gone"), None, view)[1] is None
    (tmp_path / "file").write_text("")
    assert cluster._find_here(str(tmp_path / "file"), None, cluster.view_of(str(tmp_path / "file")))[1] is None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="a process of other groups needs root")
def test_a_process_reading_as_other_groups_does_not_list_the_callers_folder(tmp_path):
    """A task whose worker reads as other groups may be refused files the caller may read: its
    view_of the folder differs, so it lists nothing (a process of this machine made to hold
    another group, as a Ray node started by another user would)."""
    import pickle
    import subprocess
    import sys

    view = cluster.view_of(str(tmp_path))
    code = ("import os, pickle, sys; os.setgroups([*os.getgroups(), 54321]); from frtrace.reading import cluster; "
            "print(cluster._find_here(sys.argv[1], None, pickle.loads(bytes.fromhex(sys.argv[2])))[1])")
    said = subprocess.run([sys.executable, "-c", code, str(tmp_path), pickle.dumps(view).hex()], capture_output=True,
                          text=True, timeout=60, check=True)
    assert said.stdout.strip() == "None"
    code = code.replace("[*os.getgroups(), 54321]", "os.getgroups()")  # the same groups: listed
    said = subprocess.run([sys.executable, "-c", code, str(tmp_path), pickle.dumps(view).hex()], capture_output=True,
                          text=True, timeout=60, check=True)
    assert said.stdout.startswith("Discovery(")


class _Driver:
    """A stand-in for the ray module as discover_shared asks it: this driver's node, the cluster's
    nodes; it runs no task (a task asked of it fails the test)."""

    def __init__(self, node_id: str | None, nodes: list[dict]) -> None:
        self.node_id, self.listed = node_id, nodes

    def get_runtime_context(self):
        if self.node_id is None:
            raise RuntimeError("this driver has no node of its own")
        return self

    def get_node_id(self) -> str:
        return self.node_id

    def nodes(self) -> list[dict]:
        return self.listed


@pytest.mark.parametrize("node_id, nodes", [
    (None, [{"NodeID": "head", "Alive": True, "Resources": {"CPU": 4}}]),  # a Ray Client's driver, refused its node
    ("head", [{"NodeID": "head", "Alive": False, "Resources": {"CPU": 4}}]),  # its node dead meanwhile
    ("head", [{"NodeID": "worker", "Alive": True, "Resources": {"CPU": 4}}]),  # ... and gone from the list
])
def test_a_driver_whose_own_node_cannot_list_leaves_the_listing_to_the_caller(tmp_path, node_id, nodes):
    reader = Cluster.__new__(Cluster)
    reader.ray, reader._remote = _Driver(node_id, nodes), {}
    assert reader.discover_shared(str(tmp_path), None) is None


def test_a_process_confined_to_roots_lists_a_shared_folder_itself(tmp_path, monkeypatch):
    """frtrace mcp's roots bind the caller's process only: a task on its node would list unconfined."""
    from frtrace.reading import limits

    monkeypatch.setattr(limits, "_confined", (str(tmp_path),))
    reader = Cluster.__new__(Cluster)
    reader.ray, reader._remote = _Driver("head", [{"NodeID": "head", "Alive": True, "Resources": {"CPU": 4}}]), {}
    assert reader.discover_shared(str(tmp_path), None) is None


def _leaves(value, found: dict) -> dict:
    """Each str and bytes value in nested tuples -> the ids of the objects holding it."""
    if type(value) is tuple:
        for item in value:
            _leaves(item, found)
    elif type(value) in (str, bytes):
        found.setdefault(value, set()).add(id(value))
    return found


def test_a_tasks_answers_are_its_workers_value_for_value_each_short_one_held_alike_once():
    """_read_here sends its answers as one pickle of their list: the worker's answers value for
    value, each short string or bytes value (digests, names) one object in it, and nothing else
    merged: 1 and True are equal, yet a flag stays a flag."""
    import pickle

    from frtrace.loader import read_pickled
    from frtrace.reading.discover import find_dump_files

    jobs = [(f.path, f.rank) for f in find_dump_files(os.path.join(os.path.dirname(__file__), "..", "fixtures",
                                                                   "healthy")).files]
    assert len(jobs) >= 4
    version, sent = cluster._read_here(pickle.dumps(jobs), False, False)
    answers = pickle.loads(sent)
    assert version == cluster.__version__
    assert answers == [pickle.loads(answer) for answer in read_pickled(jobs, 1, False)]
    held = _leaves(tuple(answers), {})
    assert any(len(value) == 16 for value in held if type(value) is bytes)  # the digests that name shared values
    assert all(len(ids) == 1 for value, ids in held.items() if len(value) <= cluster._INTERNED_LENGTH)
    name, digest = (lambda: "".join(["p", "g"])), (lambda: bytes([100]) * 16)  # a new object each call
    merged = pickle.loads(cluster._batched([(1, name(), digest(), 0), (True, name(), digest(), False)]))
    assert merged == [(1, "pg", b"d" * 16, 0), (True, "pg", b"d" * 16, False)]
    assert [type(value) for answer in merged for value in answer] == [int, str, bytes, int, bool, str, bytes, bool]
    assert merged[0][1] is merged[1][1] and merged[0][2] is merged[1][2]


def test_answers_come_in_job_order_and_a_job_no_batch_answered_is_said_not_read():
    """in_job_order: batches in any order give the answers in job order; indices None stand for
    every job not answered yet (the driver process gone), and a job no batch answered is a
    DumpError too, never left out."""
    import pickle

    from frtrace.errors import DumpError

    jobs = [(f"/d/nccl_trace_rank_{rank}", rank) for rank in range(6)]
    batches = [([2, 3], pickle.dumps(["c", "d"]), None), ([0, 1], pickle.dumps(["a", "b"]), None),
               ([4], None, "its Ray node is gone")]
    answers = list(cluster.in_job_order(jobs, batches))
    assert answers[:4] == ["a", "b", "c", "d"] and len(answers) == 6
    assert isinstance(answers[4], DumpError) and answers[4].reason == "not read: its Ray node is gone; the file itself may be fine"
    assert isinstance(answers[5], DumpError) and "no Ray task answered for it" in answers[5].reason
    gone = list(cluster.in_job_order(jobs, [([1], pickle.dumps(["b"]), None), (None, None, "the driver ended")]))
    assert gone[1] == "b" and [a.reason for i, a in enumerate(gone) if i != 1] == [
        "not read: the driver ended; the file itself may be fine"] * 5
