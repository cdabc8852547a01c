"""tests/ray_cluster.py itself: a head whose port is taken before its GCS binds it is started again on
another port, where before a driver asking for the nodes waited two minutes on it (a CI failure)."""

from __future__ import annotations

import socket

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
