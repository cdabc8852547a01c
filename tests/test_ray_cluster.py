"""tests/ray_cluster.py itself: a node that does not come up on its own account is started once more,
the head on another port (CI once failed where a head's port was taken before its GCS bound it: a
driver asking for the nodes waited two minutes on it)."""

from __future__ import annotations

import socket
import subprocess

import pytest

import ray_cluster
from ray_cluster import RayCluster, ray_available

pytestmark = [pytest.mark.process, pytest.mark.skipif(ray_available() is not None, reason=ray_available() or "")]


def test_a_head_whose_port_is_taken_is_started_on_another(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # bound, not listening: the GCS cannot bind it and nothing answers on it
        port = taken.getsockname()[1]
        ports = iter([port])
        free_port = ray_cluster._free_port
        monkeypatch.setattr(ray_cluster, "_free_port", lambda: next(ports, None) or free_port())
        with RayCluster(nodes=1) as cluster:
            assert cluster.port != port
            assert [node["name"] for node in cluster.alive_nodes()] == ["node-a"]


def test_a_node_whose_ray_start_ends_is_started_again(monkeypatch):
    started: list[str] = []
    start = RayCluster._start

    def failing_once(self, name, head):
        started.append(name)
        if name == "node-b" and started.count(name) == 1:  # as a `ray start` that found a port of its own taken
            with open(self.logs / f"{name}.log", "wb") as out:
                self.processes[name] = subprocess.Popen(["sh", "-c", "echo port taken; exit 3"], stdout=out,
                                                        start_new_session=True)
            return
        start(self, name, head)

    monkeypatch.setattr(RayCluster, "_start", failing_once)
    with RayCluster(nodes=2) as cluster:
        assert started == ["node-a", "node-b", "node-b"]
        assert sorted(node["name"] for node in cluster.alive_nodes()) == ["node-a", "node-b"]
