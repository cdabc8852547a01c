"""How --ray cuts a set into tasks (reading.cluster.task_size, Cluster._tasks): no Ray needed.

A task costs the caller a few ms of CPU whatever it reads (benchmarks/ray_tasks.py), so a large
cluster must not be given many tiny tasks; the tasks the cluster's read on the caller's side
stay in job order and each node's files stay on it."""

from __future__ import annotations

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
