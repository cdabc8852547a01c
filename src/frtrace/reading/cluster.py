"""The reading spread over a Ray cluster (--ray ADDRESS): the per-file work of reading.workers
run as Ray tasks where the files are, the analysis and the outputs left to the caller.

Two ways:
- A shared path (a shared filesystem, or a URL): the set is listed as ever (discover, remote),
  a folder by a task on the caller's own Ray node where that node sees it as the caller does
  (view_of: then the files' device and inode numbers, which guard them from being written over,
  are the caller's too), else by the caller; the files are read by tasks of 256 to 512 files
  (task_size), spread over the cluster's CPUs.
- --node-local: the path is each node's own disk (a local TORCH_FR_DUMP_TEMP_FILE). A task per
  alive node, pinned to it, walks its view of the path (discover.walked) and names what it found
  as the node's (node-a/nccl_trace_rank_3: a node's files are known as `node-a:/its/path`); the
  caller chooses the job's files from every node's listing as from one folder whose subfolders
  are the nodes, then each node's files, and the stack files beside them, are read by tasks
  pinned to it. The caller never opens a dump; two nodes holding one rank is the two-files
  error, naming each node and path.

A task reads its files as the local loader does, in a worker process of its own
(reading.workers: a file that crashes or exhausts it costs that file, never the task), and sends
its answers back as one pickle, each value its answers hold alike in it once (_batched); the
caller unpacks them in job order with its one wire.Unpacker, so the outputs are a local run's on
the same files. Tasks are never retried (max_retries=0): a node that dies, or does not answer
within the deadline (no task done for --timeout seconds), costs its files, each said as not read
with why; a cluster that cannot be reached is one line. Ray's own logs never reach standard output.

The caller never imports Ray itself (connect): a child process of its own is Ray's driver
(DriverProcess), and forwards each task's answers as the task sent them.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace

from .. import __version__
from ..errors import DumpError, InternalError, UsageError, display_path, printable
from ..types import SkippedFile
from .discover import Discovery, DumpFile, Found, find_dump_files, finish, walked
from .limits import confined
from .remote import reason
from .workers import start_process

_TASK_FILES = 512  # files one task reads at most: a task's answers are held whole until it ends (0.3 kB a dump
# where ranks share their columns, 107 kB where none does and times are asked: 55 MB a task at worst, twice while
# _batched pickles them)
_TASK_FILES_LEAST = 256  # files one task reads at least where there are so many: each task costs the caller 3-5 ms
# of its CPU here (Ray's submission, wait and get; benchmarks/ray_tasks.py), 0.01-0.02 ms a dump at 256 files,
# against its 0.1 ms a dump in all
_TASKS_PER_CPU = 4  # tasks a CPU of the cluster is given over a run, where the floor allows: the slow ones are not all one node's
_IN_FLIGHT_PER_CPU = 2  # tasks submitted ahead per CPU: answers waiting in the object store stay bounded
TIMEOUT = 60.0  # seconds without a task done before the rest is given up (--timeout)
_LABEL_UNSAFE = re.compile(r"[/\\\s]")  # what a node's name may not hold as the folder its files are shown in


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray, which is not installed here: pip install 'frtrace[ray]' (and frtrace on every "
                         "node of the cluster)") from None
    return ray


class Node:
    """An alive node of the cluster: its id, the name frtrace gives it, its CPUs."""

    def __init__(self, node_id: str, label: str, cpus: int) -> None:
        self.id, self.label, self.cpus = node_id, label, cpus


class Cluster:
    """A connection to a Ray cluster, as a driver, and what is read through it; close() ends it
    (where this connected; a process already a driver keeps its connection)."""

    def __init__(self, address: str, timeout: float = TIMEOUT) -> None:
        self.ray = _ray()
        self.address, self.timeout = address, timeout
        self.node_of: dict[str, tuple[str, str]] = {}  # a node-local file's name (node:path) -> (its node, its path there)
        self.owned = not self.ray.is_initialized()
        if self.owned:
            self._connect()
        self._remote = {}

    def _connect(self) -> None:
        """ray.init under a deadline: an address where nothing answers is one line, never a wait."""
        said: list = []

        def connect() -> None:
            try:
                self.ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False,
                              configure_logging=True, namespace="frtrace")
                said.append(None)
            except Exception as exc:  # noqa: BLE001 - whatever Ray raises for an address it cannot use
                said.append(exc)

        thread = threading.Thread(target=connect, name="frtrace-ray-connect", daemon=True)
        thread.start()
        thread.join(self.timeout)
        shown = printable(self.address)
        if not said:
            raise UsageError(f"--ray {shown}: the Ray cluster did not answer within {self.timeout:g} s; check the address "
                             "(HOST:PORT of its head, ray://HOST:PORT, or auto on one of its nodes) and --timeout")
        if said[0] is not None:
            raise UsageError(f"--ray {shown}: cannot reach the Ray cluster ({reason(said[0])}); start it (ray start "
                             "--head) or check the address") from None

    def close(self) -> None:
        if self.owned and self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def nodes(self) -> list[Node]:
        """The alive nodes that have CPUs, by name; names shared by several nodes (one host's
        nodes under its address) are told apart by their ids."""
        alive = [n for n in self.ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        names = [_LABEL_UNSAFE.sub("_", printable(str(n.get("NodeName") or n.get("NodeManagerAddress") or n["NodeID"])))
                 for n in alive]
        count = Counter(names)
        found = [Node(n["NodeID"], name if count[name] == 1 else f"{name}-{n['NodeID'][:8]}",
                      max(1, int(n["Resources"]["CPU"]))) for n, name in zip(alive, names)]
        return sorted(found, key=lambda node: node.label)

    def _task(self, function, node: Node | None = None, cpus: int = 1):
        """`function` as a Ray task of `cpus` CPUs, pinned to `node` where given, never retried."""
        remote = self._remote.get(function)
        if remote is None:
            remote = self._remote[function] = self.ray.remote(num_cpus=cpus, max_retries=0)(function)
        if node is None:
            return remote
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False))

    def _outcomes(self, refs: dict) -> Iterator[tuple[object, object, str | None]]:
        """(key, value, None) for each task of `refs` (ref -> key) as it ends, or (key, None, why it
        gave nothing): its node died or could not be reached, Ray failed it, or no task ended
        within the deadline (the rest then cancelled)."""
        pending = dict(refs)
        deadline = time.monotonic() + self.timeout
        while pending:
            for ref, key, value, why in self._step(pending, deadline):
                del pending[ref]
                yield key, value, why
            deadline = time.monotonic() + self.timeout

    def _step(self, pending: dict, deadline: float) -> list[tuple]:
        """(ref, key, value, why) of the tasks of `pending` that ended, waiting for one until
        `deadline`; past it, every one of them, cancelled, with the deadline as why."""
        done, _ = self.ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            for ref in pending:
                self.ray.cancel(ref, force=True)
            return [(ref, key, None, self._late()) for ref, key in pending.items()]
        ended = []
        for ref in done:
            try:
                version, value = self.ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a node lost, a worker killed, frtrace missing there
                ended.append((ref, pending[ref], None, _failure(exc)))
                continue
            if version != __version__:  # what a task sends is this version's: another's may read otherwise
                ended.append((ref, pending[ref], None, f"its Ray node runs frtrace {printable(str(version))}, this machine "
                                                       f"{__version__}: install one version on every node"))
            else:
                ended.append((ref, pending[ref], value, None))
        return ended

    def _late(self) -> str:
        return f"its Ray node did not answer within {self.timeout:g} s (--timeout)"

    # ------------------------------------------------------------------------------ a shared path
    def discover_shared(self, path: str, prefix: str | None) -> Discovery | None:
        """The listing of the shared folder `path` (find_dump_files), made by a task on this
        process's own Ray node where that node sees the folder as this process does (view_of);
        None where it cannot be, or the task gave none: the caller then lists it itself, and
        says what is wrong with it. The caller's share of a listing is then to keep it."""
        if confined():  # frtrace mcp's roots bind this process only
            return None
        try:
            here = view_of(path)
        except OSError:
            return None
        try:
            own = self.ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - a driver without a node of its own (Ray Client) may be refused it
            return None
        if not any(node.get("Alive") and node.get("NodeID") == own for node in self.ray.nodes()):
            return None
        # no CPU asked: a listing is a short wait on the disk, run though the node's CPUs are all held
        # (a hung job's workers) or it has none (a head started with --num-cpus 0)
        task = self._task(_find_here, Node(own, own, 0), cpus=0)
        ((_, found, why),) = self._outcomes({task.remote(path, prefix, here): None})
        return found if why is None else None

    # ------------------------------------------------------------------------------ node-local
    def discover_on_nodes(self, path: str, prefix: str | None) -> Discovery:
        """The dump set whose files lie on the nodes' own disks at `path`: one listing task per
        alive node; a node that cannot be listed is said, its ranks then missing."""
        nodes = self.nodes()
        if not nodes:
            raise UsageError(f"--ray {printable(self.address)}: the cluster has no alive node with a CPU to read on")
        bare = os.path.basename(prefix) if prefix is not None else None
        refs = {self._task(_walk_here, node).remote(path, bare, node.label): node for node in nodes}
        merged = Found()
        listed: dict[str, Found] = {}
        for node, found, why in self._outcomes(refs):
            if why is not None:
                merged.skipped.append(SkippedFile(f"{node.label}:{display_path(path)}",
                                                  f"the node could not be listed ({why}); its dumps, if any, were not read"))
            elif isinstance(found, str):
                merged.ignored.append(SkippedFile(f"{node.label}:{display_path(path)}", found))
            else:
                listed[node.label] = found
        for node in nodes:
            if node.label in listed:
                self._merge(merged, listed[node.label], node)
        return finish(merged, prefix is not None)

    def _merge(self, merged: Found, found: Found, node: Node) -> None:
        """A node's listing, its files already named node:path under the folder node/ (_labelled),
        into the cluster's; each file's node and its path there kept for reading it."""
        files = (*found.candidates, *found.empty, *(f for f, _ in found.unreadable), *(f for f, _ in found.not_files))
        self.node_of.update((f.path, (node.id, f.source)) for f in files)
        cut = len(node.label) + 1
        self.node_of.update((path, (node.id, path[cut:])) for _, path in found.stacks)
        merged.candidates += found.candidates
        merged.empty += found.empty
        merged.unreadable += found.unreadable
        merged.not_files += found.not_files
        merged.ignored += found.ignored
        merged.skipped += found.skipped
        merged.marked |= found.marked
        merged.stacks += found.stacks

    def read_stacks(self, paths: list[str]) -> dict[str, tuple]:
        """The node-local stack files named, read and parsed on their nodes: path -> (threads,
        why), as stacks.read_stacks gives for a file at hand."""
        by_node: dict[str, list[str]] = {}
        for path in paths:
            by_node.setdefault(self.node_of[path][0], []).append(path)
        nodes = {node.id: node for node in self.nodes()}
        refs = {}
        read: dict[str, tuple] = {}
        for node_id, named in by_node.items():
            if node_id not in nodes:
                read.update((path, (None, "its Ray node is gone")) for path in named)
                continue
            refs[self._task(_stacks_here, nodes[node_id]).remote([self.node_of[path][1] for path in named])] = named
        for named, answers, why in self._outcomes(refs):
            for path, answer in zip(named, answers or [(None, why)] * len(named)):
                read[path] = answer
        return read

    # ------------------------------------------------------------------------------ reading
    def read(self, jobs: list[tuple], times: bool) -> Iterator[object]:
        """The answers to `jobs` (loader jobs), in order, read by the cluster's tasks: a node's
        own files on it (node-local), others anywhere. A file whose task gave nothing is a
        DumpError saying why."""
        return in_job_order(jobs, self.batches(jobs, times))

    def batches(self, jobs: list[tuple], times: bool) -> Iterator[tuple[list[int], bytes | None, str | None]]:
        """(the indices of `jobs` a task read, its answers as one pickle of their list, None) as
        each task ends, or (indices, None, why they were not read): their node gone, their task
        failed, or the cluster stopped answering."""
        nodes = {node.id: node for node in self.nodes()}
        queue, gone = self._tasks(jobs, nodes)
        if gone:
            yield gone, None, "its Ray node is gone"
        queue.reverse()  # popped from the end: in job order
        in_flight = max(1, sum(node.cpus for node in nodes.values()) * _IN_FLIGHT_PER_CPU)
        shared = not self.node_of
        pending: dict = {}  # ref -> the indices of the jobs it reads
        deadline = time.monotonic() + self.timeout
        while queue or pending:
            while queue and len(pending) < in_flight:
                node, indices = queue.pop()
                asked = pickle.dumps([jobs[i] for i in indices], protocol=pickle.HIGHEST_PROTOCOL)  # one object for Ray
                pending[self._task(_read_here, node).remote(asked, times, shared)] = indices
            for ref, indices, pickled, why in self._step(pending, deadline):
                del pending[ref]
                yield indices, pickled, why  # the task's answers, one pickle of their list (_batched)
                if why == self._late():  # the cluster stopped answering: nothing more is asked of it
                    yield ([i for _, waiting in queue for i in waiting], None,
                           f"the Ray cluster did not answer within {self.timeout:g} s (--timeout), so it was not asked for")
                    queue.clear()
            deadline = time.monotonic() + self.timeout

    def _tasks(self, jobs: list[tuple], nodes: dict[str, Node]) -> tuple[list[tuple[Node | None, list[int]]], list[int]]:
        """The jobs in tasks of task_size files at most, a node-local file's pinned to its node; and
        the jobs whose node is gone (never read elsewhere: another node's file of that path is
        another file)."""
        size = task_size(len(jobs), sum(node.cpus for node in nodes.values()))
        by_node: dict[str | None, list[int]] = {}
        for index, job in enumerate(jobs):
            by_node.setdefault(self.node_of[job[0]][0] if job[0] in self.node_of else None, []).append(index)
        tasks, gone = [], []
        for node_id, indices in by_node.items():
            if node_id is not None and node_id not in nodes:
                gone += indices
                continue
            node = nodes[node_id] if node_id is not None else None
            tasks += [(node, indices[start:start + size]) for start in range(0, len(indices), size)]
        tasks.sort(key=lambda task: task[1][0])
        return tasks, gone


def connect(address: str, timeout: float = TIMEOUT) -> Cluster | DriverProcess:
    """The Ray cluster at `address`, for --ray: asked through a process of its own (DriverProcess),
    unless this process is a Ray driver already (a Ray Train job calling the API), which asks it
    itself."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return Cluster(address, timeout)
    return DriverProcess(address, timeout)


class DriverProcess:
    """A Cluster in a child process of this one, which alone imports Ray and is its driver; this
    process asks it what it would ask a Cluster (the same methods, the same answers) over a pipe.

    Ray's driver costs its process CPU whatever that process does: importing Ray (0.3-0.45 s),
    its threads polling while the tasks read (2-8 ms a second here: at 16,384 ranks, 0.06-0.17 ms
    a dump of Ray's alone, benchmarks/ray.py's floor), and each task's submission and answer (3-27
    ms); and beside them the caller's own steps ran 15-55% slower (docs/benchmarks.md). Here all
    that runs beside the analysis, as the local loader's workers do, and the caller takes each
    task's answers as the pickle the task sent. A child that dies costs what it had not answered,
    each file said as not read; Ray's own output never reaches this process's."""

    def __init__(self, address: str, timeout: float = TIMEOUT) -> None:
        self.address = address
        self.node_of: dict[str, tuple[str, str]] = {}  # the child's Cluster.node_of, as its listing left it
        self._streaming = False  # a read's answers are on their way: the child hears nothing else until they end
        for stream in (sys.stdout, sys.stderr):  # nothing this process holds unwritten is written twice
            stream.flush()
        self.connection, self.process = start_process(_drive, address, timeout, name="frtrace-ray-driver")
        try:
            self._answer()  # connected, or why not (a UsageError)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """The child told to leave the cluster and end (within 30 s, else ended); ended at once
        where it is still sending the answers of a read left unfinished."""
        if self.process.is_alive() and not self._streaming:
            try:
                self.connection.send(None)
            except OSError:
                pass
            self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.connection.close()

    def __enter__(self) -> DriverProcess:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def _ask(self, method: str, *args):
        if self._streaming:  # a read left unfinished: the rest of its answers come first
            while self._next()[0] == "item":
                pass
            self._streaming = False
        try:
            self.connection.send((method, args))
        except OSError:
            pass  # the child is gone: _answer says so
        return self._answer()

    def _answer(self):
        said, value = self._next()
        if said == "raised":
            raise value
        if said is None:
            raise UsageError(f"--ray {printable(self.address)}: {value}; run again")
        return value

    def _next(self) -> tuple[str | None, object]:
        """The child's next message; (None, what became of it) where it ended."""
        try:
            return self.connection.recv()
        except (EOFError, OSError):
            self.process.join(5)
            code = self.process.exitcode
            ended = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            return None, f"frtrace's Ray driver process ended ({ended})"

    def discover_shared(self, path: str, prefix: str | None) -> Discovery | None:
        return self._ask("discover_shared", path, prefix)

    def discover_on_nodes(self, path: str, prefix: str | None) -> Discovery:
        found, self.node_of = self._ask("discover_on_nodes", path, prefix)
        return found

    def read_stacks(self, paths: list[str]) -> dict[str, tuple]:
        return self._ask("read_stacks", paths)

    def read(self, jobs: list[tuple], times: bool) -> Iterator[object]:
        return in_job_order(jobs, self._batches(jobs, times))

    def _batches(self, jobs: list[tuple], times: bool) -> Iterator[tuple]:
        """Cluster.batches' items as the child sends them; where it ends before its last, one
        item standing for every job not answered, saying so. Each item is yielded once the
        message after it is taken, so that the child's last word is in before its last item:
        its reader stops asking there."""
        try:
            self.connection.send(("batches", (jobs, times)))
        except OSError:
            pass  # the child is gone: _next says so
        self._streaming = True
        said, value = self._next()
        while said == "item":
            item, (said, value) = value, self._next()
            self._streaming = said == "item"
            yield item
        self._streaming = False
        if said == "raised":
            raise value
        if said is None:
            yield None, None, value


def _drive(connection, address: str, timeout: float) -> None:
    """DriverProcess's child: a Cluster at `address`, asked by the parent until it sends None or
    goes away; each answer ("done", value), an item of batches ("item", item), or ("raised", the
    exception, or an InternalError saying it where it cannot be sent)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends this process
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # Ray's own output never reaches frtrace's
    os.close(devnull)
    try:
        try:
            cluster = Cluster(address, timeout)
        except BaseException as exc:  # noqa: BLE001 - said to the parent, which raises it
            _send(connection, ("raised", exc))
            return
        with cluster:
            _send(connection, ("done", None))
            while (asked := connection.recv()) is not None:
                method, args = asked
                try:
                    if method == "batches":
                        for item in cluster.batches(*args):
                            _send(connection, ("item", item))
                        said = None
                    elif method == "discover_on_nodes":
                        said = (cluster.discover_on_nodes(*args), cluster.node_of)
                    else:
                        said = getattr(cluster, method)(*args)
                except Exception as exc:  # noqa: BLE001 - said to the parent, which raises it
                    _send(connection, ("raised", exc))
                else:
                    _send(connection, ("done", said))
    except (EOFError, OSError):  # the parent stopped listening
        pass
    finally:
        connection.close()


def _send(connection, message: tuple) -> None:
    try:
        connection.send(message)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:  # an exception of Ray's that cannot cross
        if message[0] != "raised":
            raise
        cause = message[1]
        connection.send(("raised", InternalError("frtrace's Ray driver process", f"{type(cause).__name__}: {cause}",
                                                  f"(not sent: {exc})")))


def in_job_order(jobs: list[tuple], batches: Iterable[tuple[list[int] | None, bytes | None, str | None]]) -> Iterator[object]:
    """The answers to `jobs`, in order, from Cluster.batches' (indices, pickled answers, why not
    read): a file whose batch gave nothing is a DumpError saying why; indices None stand for
    every job not answered yet (the driver process gone, DriverProcess), and a job the batches
    never answered is one too."""
    answers: dict[int, object] = {}
    next_index = 0
    for indices, pickled, why in batches:
        if indices is None:
            indices = [i for i in range(next_index, len(jobs)) if i not in answers]
        if why is None:
            answers.update(zip(indices, pickle.loads(pickled)))
        else:
            answers.update((index, DumpError(jobs[index][0], _not_read(why))) for index in indices)
        while next_index in answers:
            yield answers.pop(next_index)
            next_index += 1
    for index in range(next_index, len(jobs)):
        yield answers.pop(index, None) or DumpError(jobs[index][0], _not_read("no Ray task answered for it"))


def task_size(files: int, cpus: int) -> int:
    """Files a task reads: _TASKS_PER_CPU tasks a CPU of the cluster, in tasks of _TASK_FILES_LEAST
    to _TASK_FILES files. The floor is the caller's: a task costs it a few ms of CPU whatever it
    reads, so a large cluster given 4 tasks a CPU (100,000 files over 3,200 CPUs: 12,500 tasks of 8)
    would cost it more than the analysis of their dumps; it leaves CPUs idle where files are few,
    each task then reading for a few seconds (256 full dumps: about 3 s of one CPU)."""
    return min(_TASK_FILES, max(_TASK_FILES_LEAST, -(-files // (max(1, cpus) * _TASKS_PER_CPU))))


def _not_read(why: str) -> str:
    return f"not read: {why}; the file itself may be fine"


def _failure(exc: BaseException) -> str:
    """Why a task gave nothing, in a line: what Ray says, the task's own error where it raised one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, ImportError):
        return f"frtrace cannot run on its Ray node ({reason(cause)}): install frtrace[ray] on every node"
    name = type(exc).__name__
    if "NodeDied" in name or "Unschedulable" in name or "ObjectLost" in name or "OwnerDied" in name:
        return f"its Ray node died or left the cluster ({name})"
    if "WorkerCrashed" in name:
        return f"the Ray worker reading it died ({name}: killed, or out of memory)"
    return f"its Ray task failed ({reason(cause if isinstance(cause, BaseException) else exc)})"


# ---------------------------------------------------------------------------------- the tasks
# Run on the cluster's nodes (Ray imports this module there): each returns plain data.

def view_of(path: str) -> tuple:
    """What a process's view of the folder `path` hangs on: the kernel (its boot), the mount
    namespace, the root folder, the folder itself (device and inode numbers), the user and groups
    it reads as. Two processes of one view list one folder alike, file by file."""
    with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
        boot = handle.read()
    places = [(found.st_dev, found.st_ino) for found in map(os.stat, ("/proc/self/ns/mnt", "/", path))]
    return boot, places, os.geteuid(), os.getegid(), sorted(os.getgroups())


def _find_here(path: str, prefix: str | None, view: tuple) -> tuple[str, Discovery | None]:
    """The listing of `path` where this node sees it as the caller does (`view`), else None; None
    too where it cannot be made, which the caller's own listing then says."""
    try:
        return __version__, find_dump_files(path, prefix) if view_of(path) == view else None
    except (OSError, UsageError):
        return __version__, None


def _walk_here(path: str, prefix: str | None, label: str) -> tuple[str, Found | str]:
    """This node's listing of `path`, its files named as the node `label`'s (_labelled), or why
    there is none (each task's answer comes with the version of frtrace that made it)."""
    import stat as stat_module

    try:
        if not stat_module.S_ISDIR(os.stat(path).st_mode):
            return __version__, "not a folder on this node"
    except OSError as exc:
        return __version__, f"not on this node ({exc.strerror})"
    return __version__, _labelled(walked(path, prefix), label)


def _labelled(found: Found, label: str) -> Found:
    """A node's listing with its files named `label:path` under the folder `label/`, their host
    the node and their source the path on it: made on the node, so that the caller's share of a
    listing is to keep it (a copy of each file made there cost it 6 us a file)."""

    def moved(dump_file: DumpFile) -> DumpFile:
        return replace(dump_file, path=f"{label}:{dump_file.path}", where=f"{label}/{dump_file.where}",
                       stem=f"{label}/{dump_file.stem}", host=label, source=dump_file.path)

    return Found(
        candidates=list(map(moved, found.candidates)),
        empty=list(map(moved, found.empty)),
        unreadable=[(moved(f), why) for f, why in found.unreadable],
        not_files=[(moved(f), why) for f, why in found.not_files],
        ignored=[replace(s, path=f"{label}:{s.path}") for s in found.ignored],
        skipped=[replace(s, path=f"{label}:{s.path}") for s in found.skipped],
        marked={f"{label}:{path}" for path in found.marked},
        stacks=[(rank, f"{label}:{path}") for rank, path in found.stacks],
    )  # its files' identities left out: a node's device and inode numbers name nothing on the caller's machine


def _read_here(asked: bytes, times: bool, shared: bool) -> tuple[str, bytes]:
    """The answers to the loader jobs `asked` (pickled whole by the caller: Ray sends a tuple as a
    pickle of its own, 1 us of the caller's CPU a file against 0.06 for the list's one pickle), read
    on this node by one worker process, sent as one pickle of their list (_batched). `shared`: the
    caller found the files itself, so one missing here says the path is not shared."""
    import gc
    import socket

    from ..loader import read_pickled

    jobs = pickle.loads(asked)  # the caller's own, as the answers it takes back are the task's
    collecting = gc.isenabled()
    gc.disable()  # in the worker process too, forked from here: millions of acyclic tuples (2x its CPU with it on)
    try:
        answers = list(map(pickle.loads, read_pickled(jobs, 1, times)))  # a worker's answers: frtrace's own pickles
        for index, job in enumerate(jobs):
            if shared and "://" not in job[0] and not os.path.exists(job[2] if len(job) > 2 else job[0]):
                answers[index] = DumpError(job[0], f"not found on the Ray node {printable(socket.gethostname())}, though "
                                                   "this machine sees it: is the folder shared by every node? (dumps on "
                                                   "each node's own disk: --node-local)")
        return __version__, _batched(answers)
    finally:
        if collecting:
            gc.enable()


_INTERNED_LENGTH = 256  # strings and bytes up to this long made one object per value in a task's answer (digests,
# names, formats): longer ones (columns, a first config) are each sent once a worker anyway, and hashing them costs


def _batched(answers: list) -> bytes:
    """A task's answers as one pickle of their list, each short string or bytes object (digests,
    groups' names, formats) one object however many answers hold it: the caller then unpickles one
    object a task, each value held alike once, where each answer's own pickle held its own copy
    (at 2,048 ranks: 2.1 us of the caller's CPU a dump against 3.3 to unpickle, 311 bytes a dump
    against 506 to receive). Only str and bytes are merged: equal values of other types may differ
    (1 == True), of these never."""
    seen: dict = {}

    def interned(value):
        kind = type(value)
        if kind is tuple:
            return tuple(map(interned, value))
        if (kind is str or kind is bytes) and len(value) <= _INTERNED_LENGTH:
            return seen.setdefault(value, value)
        return value

    return pickle.dumps([interned(answer) for answer in answers], protocol=pickle.HIGHEST_PROTOCOL)


def _stacks_here(paths: list[str]) -> tuple[str, list[tuple]]:
    """The stack files `paths` on this node, read and parsed: (threads, why) each."""
    from .stacks import read_stacks

    return __version__, [read_stacks(path) for path in paths]
