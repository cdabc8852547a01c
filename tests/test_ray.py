"""--ray and --node-local on a real Ray cluster of several nodes on this machine (tests/ray_cluster.py).

Node-local views are faithful: each node runs in a mount namespace of its own in which one path
shows that node's folder only, and the test (the caller) sees nothing there; so a right answer
proves the nodes read their own files and the caller none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, make_dump, ops, write_dumps
from ray_cluster import RayCluster, namespaces_available, ray_available

pytestmark = [pytest.mark.process, pytest.mark.skipif(ray_available() is not None, reason=ray_available() or "")]
needs_namespaces = pytest.mark.skipif(namespaces_available() is not None, reason=namespaces_available() or "")

NODE_PATH = "/frtrace-node-local-test"  # the path each node sees as its own disk (empty for the caller)
SKIP = FIXTURES / "skip_rank2"  # rank 2 is the culprit
NODES = {"node-a": (0, 1), "node-b": (2,), "node-c": (3,)}  # the ranks each node holds


def frtrace(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frtrace", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _outputs(folder: Path) -> list[str]:
    return ["--json", str(folder / "r.json"), "-o", str(folder / "db.pkl"), "--html", str(folder / "r.html")]


@pytest.fixture(scope="module")
def shared_cluster():
    with RayCluster(nodes=2, cpus=1) as cluster:
        yield cluster


def _split(root: Path, source: Path = SKIP, nodes: dict = NODES) -> tuple[Path, dict[str, str]]:
    """The fixture's dumps split over node folders, and the same gathered (gathered/node-a/...)."""
    gathered = root / "gathered"
    for node, ranks in nodes.items():
        (gathered / node).mkdir(parents=True)
        for rank in ranks:
            shutil.copy(source / f"nccl_trace_rank_{rank}", gathered / node)
    return gathered, {node: str(gathered / node) for node in nodes}


@pytest.fixture(scope="module")
def node_local_cluster(tmp_path_factory):
    if namespaces_available() is not None:
        pytest.skip(namespaces_available())
    gathered, views = _split(tmp_path_factory.mktemp("nodes"))
    with RayCluster(views=views, path=NODE_PATH) as cluster:
        yield cluster, gathered


# ---------------------------------------------------------------------------------- a shared path
@pytest.mark.parametrize("fixture", ["skip_rank2", "pipeline_skip_ranks0_3", "stacks_skip_goes_on"])
def test_a_shared_folder_read_by_the_cluster_gives_the_local_runs_outputs_byte_for_byte(shared_cluster, tmp_path, fixture):
    local, remote = tmp_path / "local", tmp_path / "ray"
    local.mkdir(), remote.mkdir()
    here = frtrace("-d", str(FIXTURES / fixture), *_outputs(local))
    there = frtrace("-d", str(FIXTURES / fixture), "--ray", shared_cluster.address, *_outputs(remote))
    assert there.returncode == here.returncode and there.stdout == here.stdout  # Ray's logs never on standard output
    for name in ("r.json", "db.pkl", "r.html"):
        assert (remote / name).read_bytes() == (local / name).read_bytes(), name


def test_a_shared_folder_is_listed_on_the_callers_own_node_and_its_files_guarded_as_the_callers(shared_cluster, tmp_path):
    """The caller's own listing made to fail: the run still gives the local run's answer (the
    listing was the task's), and a hard link to a dump outside the folder is refused as an output
    (the task's device and inode numbers are the caller's), the dump left as it was."""
    folder = tmp_path / "d"
    shutil.copytree(SKIP, folder)
    link = tmp_path / "link.pkl"
    os.link(folder / "nccl_trace_rank_1", link)
    before = link.read_bytes()
    code = ("import sys; from frtrace import api, cli; api.find_dump_files = lambda *_: sys.exit('listed by the caller'); "
            "sys.exit(cli.main(sys.argv[1:]))")

    def through_the_cluster(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, "-d", str(folder), "--ray", shared_cluster.address, *args],
                              capture_output=True, text=True, timeout=180, check=False)

    listed = through_the_cluster("--json", str(tmp_path / "r.json"))
    assert listed.returncode == 1 and listed.stdout == frtrace("-d", str(folder)).stdout, listed.stderr
    refused = through_the_cluster("-o", str(link))
    assert refused.returncode == 2 and "that is a file of the dump folder" in refused.stderr, refused.stderr
    assert link.read_bytes() == before


def test_a_shared_folder_is_listed_on_the_callers_node_though_its_every_cpu_is_held(tmp_path):
    """A hung job's workers may hold every CPU of the caller's node: the listing task asks for
    none, so it runs at once (asking for one, it would wait out the deadline, then leave the
    listing to the caller, whose own listing is made to fail here)."""
    code = ("import sys, time, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
            "nap = lambda seconds: time.sleep(seconds); held = ray.remote(num_cpus=1)(nap).remote(600); "
            "ray.wait([ray.remote(num_cpus=0)(nap).remote(0)]); time.sleep(1); "
            "from frtrace import api; from frtrace.reading.cluster import Cluster; "
            "api.find_dump_files = lambda *_: sys.exit('listed by the caller'); "
            "listed = Cluster(sys.argv[1], timeout=15).discover_shared(sys.argv[2], None); "
            "print(ray.available_resources().get('CPU', 0), [f.rank for f in listed.files])")
    with RayCluster(nodes=1, cpus=1) as cluster:
        said = subprocess.run([sys.executable, "-c", code, cluster.address, str(SKIP)], capture_output=True, text=True,
                              timeout=180, check=False)
    assert said.returncode == 0, said.stderr[-2000:]
    assert said.stdout.split()[-5:] == ["0", "[0,", "1,", "2,", "3]"]  # no CPU free, every rank listed


def test_a_set_of_many_files_is_spread_over_tasks_and_read_in_order(shared_cluster, tmp_path):
    raw = {rank: make_dump(ops(6 if rank != 37 else 5, sizes=((rank % 7 + 1,),))) for rank in range(300)}  # 3 tasks
    folder = write_dumps(tmp_path / "d", raw)
    here = frtrace("-d", str(folder), "--json", str(tmp_path / "here.json"), "-o", str(tmp_path / "here.pkl"))
    there = frtrace("-d", str(folder), "--ray", shared_cluster.address, "--json", str(tmp_path / "there.json"),
                    "-o", str(tmp_path / "there.pkl"))
    assert there.returncode == here.returncode == 1 and there.stdout == here.stdout
    assert json.loads((tmp_path / "there.json").read_text())["culprit_ranks"] == [37]
    assert (tmp_path / "there.pkl").read_bytes() == (tmp_path / "here.pkl").read_bytes()


def test_a_file_that_crashes_its_reader_costs_that_file_only(shared_cluster, tmp_path):
    from test_hostile import NESTED, _with_raw_value

    raw = {rank: make_dump(ops(3)) for rank in range(40)}
    folder = write_dumps(tmp_path / "d", raw)
    bad = make_dump(ops(3))
    bad["DEEP"] = 1
    (folder / "nccl_trace_rank_9").write_bytes(_with_raw_value(bad, "DEEP", NESTED))  # crashes the unpickler in C
    said = frtrace("-d", str(folder), "--ray", shared_cluster.address, "--json", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert "Traceback" not in said.stderr and said.returncode in (0, 1)
    assert report["ranks_loaded"] == [r for r in range(40) if r != 9]
    (skipped,) = report["skipped_files"]
    assert skipped["path"].endswith("nccl_trace_rank_9") and "crashed or ran out of memory" in skipped["reason"]


def test_the_api_reads_through_the_cluster_as_the_command_does(shared_cluster, tmp_path):
    code = ("import json, sys, frtrace; r = frtrace.analyze_dumps(sys.argv[1], ray=sys.argv[2]); "
            "print(json.dumps([r.verdict, list(r.culprit_ranks), r.headline]))")
    said = subprocess.run([sys.executable, "-c", code, str(SKIP), shared_cluster.address], capture_output=True, text=True,
                          timeout=180, check=False)
    assert said.returncode == 0, said.stderr
    verdict, culprits, headline = json.loads(said.stdout.splitlines()[-1])
    assert (verdict, culprits) == ("desync", [2]) and headline == frtrace("-d", str(SKIP)).stdout.splitlines()[0]


def test_the_caller_never_imports_ray_its_driver_is_a_process_of_its_own(shared_cluster, tmp_path):
    """Ray's driver (its import, its threads, each task's submission and answer) runs in a child
    process (reading.cluster.DriverProcess): the caller imports no Ray, and its outputs are a local
    run's."""
    code = ("import json, sys; from frtrace.cli import main; "
            "code = main(['-d', sys.argv[1], '--ray', sys.argv[2], '-o', sys.argv[3]]); "
            "print(json.dumps([code, 'ray' in sys.modules]))")
    said = subprocess.run([sys.executable, "-c", code, str(SKIP), shared_cluster.address, str(tmp_path / "there.pkl")],
                          capture_output=True, text=True, timeout=180, check=False)
    here = frtrace("-d", str(SKIP), "-o", str(tmp_path / "here.pkl"))
    *shown, last = said.stdout.splitlines()
    assert json.loads(last) == [here.returncode, False], said.stderr
    assert shown == here.stdout.splitlines()
    assert (tmp_path / "there.pkl").read_bytes() == (tmp_path / "here.pkl").read_bytes()


def test_a_ray_driver_process_that_dies_costs_the_files_it_had_not_answered_each_said(shared_cluster, tmp_path):
    """The driver process killed as it starts reading: each file is said as not read, with why,
    and the command ends, one line a file, no traceback, no wait."""
    code = ("import os, signal, sys; from frtrace.reading import cluster as c\n"
            "def batches(self, jobs, times):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)  # in the driver process, forked from this one\n"
            "    yield from ()\n"
            "c.Cluster.batches = batches\n"
            "from frtrace.cli import main; sys.exit(main(['-d', sys.argv[1], '--ray', sys.argv[2]]))\n")
    started = time.monotonic()
    said = subprocess.run([sys.executable, "-c", code, str(SKIP), shared_cluster.address], capture_output=True, text=True,
                          timeout=180, check=False)
    assert said.returncode == 2 and "Traceback" not in said.stderr and time.monotonic() - started < 60, said.stderr
    assert "none of the 4 dump file(s) could be read" in said.stderr
    assert said.stderr.count("not read: frtrace's Ray driver process ended (killed by signal 9); the file itself may "
                             "be fine") == 4, said.stderr


def test_a_folder_the_nodes_do_not_share_is_said_so_per_file(tmp_path):
    if namespaces_available() is not None:
        pytest.skip(namespaces_available())
    empty = tmp_path / "empty"
    empty.mkdir()
    here = tmp_path / "here"
    shutil.copytree(SKIP, here)  # the caller's folder; the node sees its own (empty) folder at that path
    with RayCluster(views={"node-a": str(empty)}, path=str(here)) as cluster:
        said = frtrace("-d", str(here), "--ray", cluster.address)
    assert said.returncode == 2 and "none of the 4 dump file(s) could be read" in said.stderr
    assert said.stderr.count("is the folder shared by every node? (dumps on each node's own disk: --node-local)") == 4


def test_a_node_running_another_frtrace_is_not_trusted_with_the_files(shared_cluster, tmp_path):
    code = ("import sys; from frtrace.reading import cluster; cluster.__version__ = '0.0.0-other'; "
            "from frtrace.cli import main; sys.exit(main(['-d', sys.argv[1], '--ray', sys.argv[2]]))")
    said = subprocess.run([sys.executable, "-c", code, str(SKIP), shared_cluster.address], capture_output=True, text=True,
                          timeout=180, check=False)
    assert said.returncode == 2 and "none of the 4 dump file(s) could be read" in said.stderr
    import frtrace

    assert said.stderr.count(f"its Ray node runs frtrace {frtrace.__version__}, this machine 0.0.0-other: install one "
                             "version on every node") == 4


# ---------------------------------------------------------------------------------- node-local
@needs_namespaces
def test_node_local_dumps_give_the_gathered_sets_verdict_and_report(node_local_cluster, tmp_path):
    cluster, gathered = node_local_cluster
    assert not os.path.exists(NODE_PATH) or not os.listdir(NODE_PATH)  # the caller sees none of the files
    there = frtrace("-d", NODE_PATH, "--ray", cluster.address, "--node-local", "--json", str(tmp_path / "there.json"))
    here = frtrace("-d", str(gathered), "--json", str(tmp_path / "here.json"))
    assert there.returncode == here.returncode == 1 and there.stdout == here.stdout
    report, local = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("there", "here"))
    assert report == local  # hosts, files, culprit files: each node a folder of the gathered set
    assert report["culprit_files"] == [{"rank": 2, "file": "node-b/nccl_trace_rank_2", "host": "node-b", "not_read": None}]


@needs_namespaces
def test_the_api_takes_node_local(node_local_cluster):
    cluster, _ = node_local_cluster
    code = ("import json, sys, frtrace; r = frtrace.analyze_dumps(sys.argv[1], ray=sys.argv[2], node_local=True); "
            "print(json.dumps([r.verdict, list(r.culprit_ranks), sorted(r.loaded.dumps)]))")
    said = subprocess.run([sys.executable, "-c", code, NODE_PATH, cluster.address], capture_output=True, text=True,
                          timeout=180, check=False)
    assert said.returncode == 0, said.stderr
    assert json.loads(said.stdout.splitlines()[-1]) == ["desync", [2], [0, 1, 2, 3]]


@needs_namespaces
def test_stack_files_beside_node_local_dumps_are_read_on_their_node(tmp_path):
    source = FIXTURES / "stacks_skip_goes_on"
    stacks = sorted(p.name for p in source.iterdir() if ".stacks" in p.name or p.name == "stacks")
    assert stacks, "the fixture holds stack files"
    nodes = {"node-a": [], "node-b": []}
    for index, path in enumerate(sorted(p for p in source.iterdir() if p.name != "expected.json")):
        nodes["node-a" if index % 2 == 0 else "node-b"].append(path)
    gathered = tmp_path / "gathered"
    for node, paths in nodes.items():
        (gathered / node).mkdir(parents=True)
        for path in paths:
            (shutil.copytree if path.is_dir() else shutil.copy)(path, gathered / node / path.name)
    with RayCluster(views={node: str(gathered / node) for node in nodes}, path=NODE_PATH) as cluster:
        there = frtrace("-d", NODE_PATH, "--ray", cluster.address, "--node-local", "--json", str(tmp_path / "there.json"))
    here = frtrace("-d", str(gathered), "--json", str(tmp_path / "here.json"))
    assert there.stdout == here.stdout and "stack" in here.stdout.lower()
    assert json.loads((tmp_path / "there.json").read_text()) == json.loads((tmp_path / "here.json").read_text())


@needs_namespaces
def test_a_rank_on_two_nodes_is_refused_naming_each_node_and_path(tmp_path):
    gathered, views = _split(tmp_path, nodes={"node-a": (0, 1, 2), "node-b": (2, 3)})
    with RayCluster(views=views, path=NODE_PATH) as cluster:
        said = frtrace("-d", NODE_PATH, "--ray", cluster.address, "--node-local")
    assert said.returncode == 2 and said.stdout == ""
    assert (f"two dump files claim rank 2: node-a:{NODE_PATH}/nccl_trace_rank_2 and node-b:{NODE_PATH}/nccl_trace_rank_2"
            in said.stderr)


@needs_namespaces
def test_a_node_that_dies_mid_run_costs_its_ranks_with_a_line_each(tmp_path):
    """node-c is killed after every node was listed and before the files are read: Ray still
    counts it alive, its task is pinned to it, and its ranks are said as not read, in bounded time."""
    gathered, views = _split(tmp_path)
    script = tmp_path / "run.py"
    script.write_text(
        "import json, os, signal, sys\n"
        "from frtrace.reading import cluster as c\n"
        "real = c.Cluster.batches  # in the Ray driver process, forked from this one\n"
        "def batches(self, jobs, times):\n"
        "    for pid in json.loads(sys.argv[3]):\n"
        "        try: os.kill(pid, signal.SIGKILL)\n"
        "        except ProcessLookupError: pass\n"
        "    return real(self, jobs, times)\n"
        "c.Cluster.batches = batches\n"
        "from frtrace.cli import main\n"
        "sys.exit(main(['-d', sys.argv[1], '--ray', sys.argv[2], '--node-local', '--timeout', '30', '--json', sys.argv[4]]))\n")
    with RayCluster(views=views, path=NODE_PATH) as cluster:
        from ray_cluster import descendants

        node_c = cluster.processes["node-c"].pid
        pids = [node_c, *descendants(node_c)]
        started = time.monotonic()
        said = subprocess.run([sys.executable, str(script), NODE_PATH, cluster.address, json.dumps(pids),
                               str(tmp_path / "r.json")], capture_output=True, text=True, timeout=180, check=False)
        took = time.monotonic() - started
    assert "Traceback" not in said.stderr and took < 90, (took, said.stderr)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ranks_loaded"] == [0, 1, 2]
    (skipped,) = report["skipped_files"]
    assert skipped["path"] == f"node-c:{NODE_PATH}/nccl_trace_rank_3" and skipped["reason"].startswith("not read: ")
    assert "node" in skipped["reason"] and "the file itself may be fine" in skipped["reason"]


# ---------------------------------------------------------------------------------- no cluster
def test_an_address_where_no_cluster_answers_is_one_line_within_the_timeout():
    started = time.monotonic()
    said = frtrace("-d", str(SKIP), "--ray", "127.0.0.1:9", "--timeout", "5")
    assert said.returncode == 2 and said.stdout == "" and time.monotonic() - started < 60
    lines = [line for line in said.stderr.splitlines() if line.startswith("frtrace:")]
    assert lines == ["frtrace: --ray 127.0.0.1:9: the Ray cluster did not answer within 5 s; check the address (HOST:PORT "
                     "of its head, ray://HOST:PORT, or auto on one of its nodes) and --timeout"]


def test_node_local_without_a_cluster_is_refused():
    said = frtrace("-d", str(SKIP), "--node-local")
    assert said.returncode == 2 and "give the cluster with --ray ADDRESS" in said.stderr


def test_without_ray_installed_the_command_says_what_to_install():
    code = ("import sys; sys.modules['ray'] = None; from frtrace.cli import main; "
            "sys.exit(main(['-d', sys.argv[1], '--ray', 'auto']))")
    said = subprocess.run([sys.executable, "-c", code, str(SKIP)], capture_output=True, text=True, timeout=60, check=False)
    assert said.returncode == 2 and said.stderr.strip() == (
        "frtrace: --ray needs Ray, which is not installed here: pip install 'frtrace[ray]' (and frtrace on every node "
        "of the cluster)")
