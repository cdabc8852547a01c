"""A real Ray cluster of several nodes on this machine, for the --ray tests and benchmarks.

Each node is a `ray start --block` process (a real raylet with its own node id, named with
--node-name). Where `views` is given, each node runs in a mount namespace of its own (unshare -m,
as root) in which `path` is a bind mount of that node's own folder: tasks pinned to the node see
its files and no other's, as on hosts with local disks, while the caller, outside, sees what its
own `path` holds (nothing). Everything is ended by pid: the `ray start` processes and every
process descended from them (raylets, GCS, workers), found before any is signalled; never
`ray stop`, which ends every Ray process on the machine.

    with RayCluster(nodes=3, views={"node-a": dir_a, ...}, path="/frtrace-node-local") as cluster:
        frtrace -d /frtrace-node-local --node-local --ray cluster.address
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ray_available() -> str | None:
    """Why a Ray cluster cannot be started here, or None where it can."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (pip install 'frtrace[ray]')"
    if shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        return "the ray command is not beside this Python"
    return None


def namespaces_available() -> str | None:
    """Why nodes cannot each have their own view of one path here, or None where they can."""
    if os.geteuid() != 0:
        return "node-local views need root (unshare -m and a bind mount)"
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else f"unshare -m fails here: {probe.stderr.decode(errors='replace').strip()}"


def _free_port() -> int:
    """A port that binds now, at random below the range the system gives the own ends of outgoing
    connections, which Ray's processes open by the hundred (the port bind() gives for port 0 is from that
    range, where CI saw a head whose GCS never listened, as where its port is taken before it binds it),
    and above Ray's workers' ports (10002-19999), holding none of Ray's fixed ports (6379, 8265, 10001,
    52365). Ray 2.60 finds no port of its own this way on Linux: its Node._get_unused_port, for Windows
    only, picks far above the port bind() gives, for this same race (ray-project/ray#8254)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = random.randint(20000, max(20001, low - 1))
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    children, found, todo = _children(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _sigkill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class NotUp(RuntimeError):
    """A node that did not come up on its own account: its `ray start` ended, or (the head) its GCS port
    took no connection in the time given."""

    def __init__(self, node: str, said: str) -> None:
        super().__init__(said)
        self.node = node


class RayCluster:
    """A head node and `nodes - 1` more, each with `cpus` CPUs; `views`: node name -> the folder
    its `path` shows (nodes named there are the cluster's nodes, the head first)."""

    def __init__(self, nodes: int = 2, cpus: int = 1, views: dict[str, str] | None = None, path: str | None = None,
                 head_cpus: int | None = None) -> None:
        self.names = list(views) if views else [f"node-{chr(ord('a') + i)}" for i in range(nodes)]
        self.cpus, self.views, self.path = cpus, views, path
        self.head_cpus = cpus if head_cpus is None else head_cpus
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self.ray = str(Path(sys.executable).parent / "ray")
        self.logs = Path(tempfile.mkdtemp(prefix="frtrace-ray-logs-"))  # what each `ray start` said

    def _start(self, name: str, head: bool) -> None:
        args = [self.ray, "start", "--block", "--disable-usage-stats", f"--node-name={name}",
                f"--num-cpus={self.head_cpus if head else self.cpus}"]
        args += ([f"--head", f"--port={self.port}", "--include-dashboard=false", "--node-ip-address=127.0.0.1"] if head
                 else [f"--address={self.address}", "--node-ip-address=127.0.0.1"])
        if self.views is not None:
            view = self.views[name]
            script = f'mkdir -p "{self.path}" && mount --bind "{view}" "{self.path}" && exec "$@"'
            args = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *args]
        # no token asked of its drivers: a `ray start` finding ~/.ray/auth_token (which a bare ray.init() leaves)
        # would ask one, which drivers given an address never send (Ray 2.60)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            self.processes[name] = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                    start_new_session=True)

    def start(self, timeout: float = 90) -> RayCluster:
        for count, name in enumerate(self.names, start=1):  # one at a time: raylets starting together take one port
            self._start_node(name, count, timeout)
        return self

    def _start_node(self, name: str, count: int, timeout: float) -> None:
        """`name` started as the cluster's `count`th node (the first its head), once more (the head on another
        port) where it did not come up on its own account: a port found free, by this class or by Ray, may be
        taken before it is bound (a head's `ray start` then ends after some 40 s; CI saw a driver wait two
        minutes on such a head)."""
        for last in (False, True):
            self._start(name, head=count == 1)
            try:
                self._wait_for(count, timeout)
                return
            except NotUp as failed:
                if last or failed.node != name:
                    raise
                self.kill(name)
                if count == 1:
                    self.port = _free_port()
                    self.address = f"127.0.0.1:{self.port}"

    def _listening(self) -> bool:
        """Whether the head's GCS port takes connections: a driver given an address where nothing listens
        retries for minutes (Ray 2.60), so none is started before."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def alive_nodes(self, timeout: float = 60) -> list[dict]:
        """ray.nodes() of the alive nodes, asked in a process of its own (the caller stays no driver);
        none where it does not answer within `timeout` seconds."""
        code = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                "print(json.dumps([{'id': n['NodeID'], 'name': n.get('NodeName'), 'cpus': n['Resources'].get('CPU', 0)} "
                "for n in ray.nodes() if n['Alive']]))" % self.address)
        try:
            said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:  # the child is killed by run()
            return []
        if said.returncode != 0:
            return []
        import json

        return json.loads(said.stdout.strip().splitlines()[-1])

    def _said(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]

    def _wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise NotUp(name, f"ray start of {name} ended with status {process.returncode}: {self._said(name)}")
            if not self._listening():
                time.sleep(1)
                continue
            if len(self.alive_nodes(timeout=max(5.0, deadline - time.monotonic()))) >= count:
                return
            time.sleep(1)
        head = self.names[0]
        if not self._listening():
            raise NotUp(head, f"the head's GCS did not listen on port {self.port} within {timeout} s: {self._said(head)}")
        raise RuntimeError(f"{count} Ray nodes were not up within {timeout} s")

    def kill(self, name: str) -> None:
        """The node `name` killed outright (SIGKILL to it and everything below it), as a host that dies."""
        process = self.processes.pop(name)
        # an ended one's pid may be another process's by now (and a `ray start --block` that ends ends what it started)
        if process.poll() is None:
            _sigkill([process.pid, *descendants(process.pid)])
        process.wait(timeout=30)

    def stop(self) -> None:
        everything = {name: [p.pid, *descendants(p.pid)] for name, p in self.processes.items()}
        for name in reversed(list(self.processes)):  # the head last
            process = self.processes[name]
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name, (pid, *below) in everything.items():  # a `ray start` reaped by now: its pid may be another's
            _sigkill(below if self.processes[name].returncode is not None else [pid, *below])
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.processes.clear()
        shutil.rmtree(self.logs, ignore_errors=True)  # what the nodes said: read only where one failed to start

    def __enter__(self) -> RayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *_) -> None:
        self.stop()
