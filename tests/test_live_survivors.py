"""frtrace live on the inputs the mutation run's survivors named (tests/mutation.py --part live)
and no in-process test built: the JSON report's silent ranks and recorders, where the Now and
Between lines sit in the text, what is said on the log, the JSON report written beside the
snapshot, the manifest's fields, the library call's defaults and refusals, the folder written
before it is kept, a workers file with bytes that are not UTF-8, another job's world named by
its ranks, the scratch folder of a fetch without one, a snapshot file that cannot be written, and
the store: its address, its connection, its keys (torch's TCPStore, in this process). Workers
are tests/test_live.py's small HTTP servers on loopback."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_live import EMPTY_RECORDER, STACK, _as_json, _closed_port, _url, _worker

import frtrace
from frtrace.cli import main
from frtrace.errors import UsageError
from frtrace.live import fetch

DESYNC_RANK2 = FIXTURES / "skip_rank2"  # rank 2 in no collective, ranks 0-1,3 wait for it


def _rank2_silent() -> list[str]:
    """skip_rank2's workers, rank 2's address one where nothing listens."""
    served = {r: _worker(_as_json(DESYNC_RANK2 / f"nccl_trace_rank_{r}")) for r in (0, 1, 3)}
    return [_url(served[0]), _url(served[1]), f"http://127.0.0.1:{_closed_port()}", _url(served[3])]


REFUSED = "[Errno 111] Connection refused"  # Linux's words for a port where nothing listens


def test_a_silent_rank_is_listed_with_its_url_and_error_in_the_json_and_has_no_recorder(tmp_path):
    urls = _rank2_silent()
    snap = frtrace.live_snapshot(workers=urls, out_dir=str(tmp_path / "snap"), interval=0, jobs=1)
    snap.write_json(str(tmp_path / "report.json"))

    live = json.loads((tmp_path / "report.json").read_text())["live"]
    assert live["silent"] == [{"rank": 2, "url": urls[2], "error": REFUSED}]
    assert live["recorders"] == {"0": "fr_trace_json", "1": "fr_trace_json", "3": "fr_trace_json"}  # JSON keys: text


def test_where_the_culprit_is_now_comes_after_the_cause_and_before_what_moved(tmp_path):
    """Two snapshots of skip_rank2 with rank 2 silent: its report has a Cause line, the culprit
    did not answer, and nobody moved."""
    snap = frtrace.live_snapshot(workers=_rank2_silent(), out_dir=str(tmp_path / "snap"), interval=0.1, jobs=1)

    assert snap.later == str(tmp_path / "snap" / "b")  # the set analysed
    report = snap.result.text().split("\n")
    assert report[0].startswith("DESYNC: rank 2 did not answer") and report[1].startswith("Cause: process_gone: rank 2")
    assert snap.moved.headline.startswith("STUCK: no rank moved between A and B")
    assert snap.text().split("\n") == [*report[:2], "Now (the ranks' Python stacks): rank 2 did not answer",
                                       f"Between the two snapshots: {snap.moved.headline}", *report[2:]]


def test_a_clean_job_that_did_not_move_has_what_moved_right_under_its_verdict_and_no_now_line(tmp_path):
    """The same healthy recorders served twice: the later set is clean (no Cause line, no
    culprit, so nowhere to say), and nothing moved between the snapshots."""
    folder = FIXTURES / "healthy_json"
    servers = [_worker((folder / f"comm_lib_trace_rank_{r}.json").read_bytes()) for r in range(4)]
    snap = frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(tmp_path / "snap"), interval=0.1, jobs=1)

    report = snap.result.text().split("\n")
    assert snap.result.verdict == "clean" and not snap.result.analysis.causes and snap.places == {}
    assert snap.verdict == "stuck" and snap.moved.headline.startswith("STUCK: no rank moved between A and B")
    assert snap.text().split("\n") == [report[0], f"Between the two snapshots: {snap.moved.headline}", *report[1:]]


def test_where_two_culprits_are_now_is_said_of_each_in_one_line(tmp_path):
    """two_faults_ranks2_7: ranks 2 and 7 are the culprits, each in its own Python frame."""
    folder = FIXTURES / "two_faults_ranks2_7"
    stacks = {2: b'Thread 0x1 (most recent call first):\n  File "/job/train.py", line 88 in load_batch\n',
              7: b'Thread 0x1 (most recent call first):\n  File "/job/data.py", line 12 in fetch_shard\n'}
    servers = [_worker(_as_json(folder / f"nccl_trace_rank_{r}"), stacks.get(r, stacks[2])) for r in range(8)]
    snap = frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(tmp_path / "snap"), interval=0, jobs=1)

    assert snap.result.culprit_ranks == (2, 7)
    assert snap.text().split("\n")[2] == ("Now (the ranks' Python stacks): rank 2 at train.py:88 in load_batch; "
                                          "rank 7 at data.py:12 in fetch_shard")


def test_a_culprit_whose_stacks_were_not_kept_is_not_said_to_be_anywhere(tmp_path):
    """skip_rank2 with every rank answering, but rank 2's worker answers no stacks (HTTP 404)."""
    servers = [_worker(_as_json(DESYNC_RANK2 / f"nccl_trace_rank_{r}"), stacks=None if r == 2 else STACK) for r in range(4)]
    snap = frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(tmp_path / "snap"), interval=0, jobs=1)

    assert snap.result.culprit_ranks == (2,) and snap.answers[2].stacks_error == "HTTP 404"
    assert snap.places == {} and snap.as_dict()["live"]["now"] == []
    assert snap.text() == snap.result.text()


def test_the_log_counts_the_ranks_kept_and_names_both_snapshots_to_compare(tmp_path):
    out = tmp_path / "snap"
    log = io.StringIO()
    urls = _rank2_silent()
    frtrace.live_snapshot(workers=urls, out_dir=str(out), interval=0.1, jobs=1, log=log)

    assert log.getvalue().splitlines() == [
        f"frtrace: rank 2 ({urls[2]}) did not answer: {REFUSED}",
        (f"frtrace: two snapshots 0.1 s apart kept in {out} (3 of 4 ranks; frtrace -d {out / 'b'} reads the later, "
         f"frtrace compare {out / 'a'} {out / 'b'} compares them)")]


def test_a_rank_that_answers_too_late_is_said_to_have_not_answered_within_the_timeout(tmp_path):
    folder = FIXTURES / "healthy_json"
    servers = [_worker((folder / f"comm_lib_trace_rank_{r}.json").read_bytes(), delay=3 if r == 3 else 0) for r in range(4)]
    log = io.StringIO()
    frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(tmp_path / "snap"), interval=0, timeout=0.5,
                          jobs=1, log=log)

    assert log.getvalue().splitlines()[0] == (f"frtrace: rank 3 ({_url(servers[3])}) did not answer within 0.5 s; its "
                                              "process may be gone or its host unreachable")


@pytest.mark.parametrize("both,said", [((0,), "rank 0"), ((0, 1), "ranks 0-1")], ids=["one", "two"])
def test_the_ranks_whose_gloo_recorder_held_entries_too_are_named_with_the_folder_it_is_kept_in(both, said, tmp_path):
    """A GPU job's 8 ranks, of which only rank 0 (or ranks 0 and 1) also ran a gloo group: only
    their backend-neutral recorders hold entries (tests/test_live.py's GPU test has ranks 0-3)."""
    gpu, cpu = FIXTURES / "synthetic_gpu_never_reached_rank3", FIXTURES / "healthy_json"
    servers = [_worker((cpu / f"comm_lib_trace_rank_{r}.json").read_bytes() if r in both else EMPTY_RECORDER,
                       nccl=_as_json(gpu / f"nccl_trace_rank_{r}")) for r in range(8)]
    out = tmp_path / "snap"
    log = io.StringIO()
    frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(out), interval=0, jobs=1, log=log)

    assert log.getvalue().splitlines()[-1] == (
        f"frtrace: {said}: the dumps are the NCCL recorders; the backend-neutral ones (gloo's ops) held entries too, "
        f"kept in {out / 'fr_trace_json'} (frtrace -d reads it)")
    assert sorted(os.listdir(out / "fr_trace_json")) == [f"trace_rank_{r}.json" for r in both]
    ranks = json.loads((out / "manifest.json").read_text())["ranks"]
    assert [(r["rank"], r["other_recorder"]) for r in ranks if "other_recorder" in r] == [
        (r, f"fr_trace_json/trace_rank_{r}.json") for r in both]


def test_the_json_report_written_is_said_on_the_log(tmp_path):
    urls = _rank2_silent()
    snap = frtrace.live_snapshot(workers=urls, out_dir=str(tmp_path / "snap"), interval=0, jobs=1)
    report, log = tmp_path / "report.json", io.StringIO()

    snap.write_json(str(report), log)

    size = report.stat().st_size
    assert 1000 <= size < 100_000  # said in kB
    assert log.getvalue() == f"frtrace: wrote {report} ({size / 1000:.1f} kB, the JSON report)\n"


def test_the_json_report_is_never_written_over_a_snapshot_file_by_another_name(tmp_path):
    """A hard link outside the snapshot to rank 0's dump: the same file, which the analysis read."""
    snap = frtrace.live_snapshot(workers=_rank2_silent(), out_dir=str(tmp_path / "snap"), interval=0, jobs=1)
    dump = tmp_path / "snap" / "trace_rank_0.json"
    kept = dump.read_bytes()
    os.link(dump, tmp_path / "elsewhere.json")

    with pytest.raises(UsageError, match="that is a file of the dump folder"):
        snap.write_json(str(tmp_path / "elsewhere.json"))
    assert dump.read_bytes() == kept


def test_the_manifest_says_when_the_ranks_were_asked_how_long_each_took_and_why_its_stacks_are_missing(tmp_path):
    """Rank 0 answers, but not for its stacks (HTTP 404); rank 1 has no address (the store held
    none), its answer made up as live_snapshot makes it, with a time to the microsecond."""
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    url = _url(_worker(trace, stacks=None))
    absent = fetch.Answer(1, "", None, None, "no worker address in the store", 1.23456)
    out = tmp_path / "snap"
    with fetch.SnapshotFolder(str(out)) as snapshot:
        before = time.time()
        answers = snapshot.take("", {0: url}, 5, [absent])
        after = time.time()
        snapshot.keep()

    written = (out / "manifest.json").read_text()
    manifest = json.loads(written)
    assert written == json.dumps(manifest, indent=2)  # for a person to read
    assert before <= manifest["taken_at"] <= after
    assert manifest["ranks"] == [
        {"rank": 0, "url": url, "seconds": round(answers[0].seconds, 3), "answered": True, "recorder": "fr_trace_json",
         "stacks_error": "HTTP 404"},
        {"rank": 1, "url": "", "seconds": 1.235, "answered": False, "error": "no worker address in the store"}]


def test_a_workers_file_with_bytes_that_are_not_utf8_in_a_comment_gives_its_addresses(tmp_path):
    listed = tmp_path / "workers.txt"
    listed.write_bytes(b"# n\xf6ud 3 (latin-1)\nnode3:29501\n127.0.0.1:29502  # \xe9t\xe9\n")
    assert fetch.read_workers_file(str(listed)) == ["node3:29501", "127.0.0.1:29502"]


def test_a_worker_address_may_end_with_a_slash():
    assert fetch.worker_url("http://node7:29500/") == "http://node7:29500"


def _recorder(ranks_text: str, desc: str = "default_pg") -> bytes:
    """A recorder's JSON with no entries whose default group lists `ranks_text`: what whose it is
    is read from."""
    return json.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": desc, "ranks": ranks_text}},
                       "entries": []}).encode()


@pytest.mark.parametrize("theirs,named", [
    ("[4, 5, 6, 7]", "4 ranks (4-7)"),
    ("[4, 5]", "2 ranks (4-5)"),
    ("[5]", "rank 5 alone"),
    ("[0, 2, 4, 6]", "4 ranks"),
], ids=["four-from-4", "two", "one", "not-consecutive"])
def test_another_job_s_world_is_named_by_its_ranks(theirs, named):
    """Ranks 0-2 answer recorders of the world [0-3]; rank 3's worker answers another job's."""
    servers = [_worker(_recorder(theirs if r == 3 else "[0, 1, 2, 3]")) for r in range(4)]
    answers = fetch.fetch_all({r: _url(s) for r, s in enumerate(servers)}, timeout=5)

    assert [a.refused for a in answers] == [False, False, False, True]
    assert answers[3].error == (f"the worker at {_url(servers[3])} answered a recorder whose job is {named}, where the "
                                "other ranks' is 4 ranks (0-3): another job's worker, or the wrong address")


def test_a_default_group_that_lists_no_ranks_refuses_no_rank():
    """Most ranks' default group lists none ("[]"): no world is known to hold the others to."""
    servers = [_worker(_recorder("[0, 1, 2]" if r == 2 else "[]")) for r in range(3)]
    answers = fetch.fetch_all({r: _url(s) for r, s in enumerate(servers)}, timeout=5)
    assert [(a.refused, a.error) for a in answers] == [(False, None)] * 3


def test_answers_fetched_without_a_folder_stay_in_this_process_s_own_folder_across_fetches():
    """fetch_all without a folder: each call's answers in a new folder inside one folder of this
    process (removed when it ends), an earlier call's files kept while later ones fetch."""
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    url = _url(_worker(trace))
    (first,) = fetch.fetch_all({0: url}, timeout=5)
    (second,) = fetch.fetch_all({0: url}, timeout=5)

    assert first.trace == trace and second.trace == trace  # the first's file is still there
    folders = [Path(a.trace_file).parent for a in (first, second)]
    assert folders[0] != folders[1] and folders[0].parent == folders[1].parent
    assert folders[0].name.startswith("answers-") and folders[0].parent.name.startswith("frtrace-live-")
    assert folders[0].parent.parent == Path(tempfile.gettempdir())


def test_a_snapshot_file_that_is_there_already_is_an_oserror_naming_the_file(tmp_path):
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    taken = tmp_path / "trace_rank_0.json"
    taken.write_text("mine")

    with pytest.raises(OSError) as raised:
        fetch.fetch_all({0: _url(_worker(trace))}, timeout=5, folder=str(tmp_path))
    assert (raised.value.errno, raised.value.filename, raised.value.strerror) == (17, str(taken), "File exists")
    assert taken.read_text() == "mine"


class _OsWhoseWritesFail:
    """The os module, as fetch sees it, where a write fails with an error that has no strerror of
    its own (as some file systems' drivers raise)."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def write(fd, data):
        raise OSError("the file system went read-only")


def test_a_write_error_without_a_strerror_is_said_in_its_own_words(tmp_path, capsys, monkeypatch):
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    monkeypatch.setattr(fetch, "os", _OsWhoseWritesFail())
    assert main(["live", "--workers", _url(_worker(trace)), "-O", str(tmp_path / "snap"), "--interval", "0"]) == 2
    assert (f"{tmp_path / 'snap'}: cannot write the snapshot (the file system went read-only); nothing was written"
            in capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_neither_a_store_nor_workers_or_both_is_refused_saying_to_give_one(tmp_path):
    for given in ({}, {"store": "127.0.0.1:29500", "workers": ["127.0.0.1:29501"]}):
        with pytest.raises(UsageError) as raised:
            frtrace.live_snapshot(**given, out_dir=str(tmp_path / "snap"))
        assert str(raised.value) == ("live_snapshot: give the job's store (HOST:PORT) or its workers' addresses, one of "
                                     "the two")
    assert list(tmp_path.iterdir()) == []


def test_when_no_rank_answers_the_first_three_reasons_in_order_are_said(tmp_path):
    """Four ranks, each failing its own way."""
    urls = [f"http://127.0.0.1:{_closed_port()}", _url(_worker(b"{}", status=500)),
            _url(_worker(b"<!doctype html><html>login</html>")), _url(_worker(b"{}", status=302, location="http://x:1/"))]
    with pytest.raises(UsageError) as raised:
        frtrace.live_snapshot(workers=urls, out_dir=str(tmp_path / "snap"), interval=0, timeout=5)
    assert str(raised.value) == (
        f"no rank answered (HTTP 500; {REFUSED}; answered with something that is not a recorder's JSON (a web page?): not "
        "its debug server): check the worker addresses and that the job runs with the debug server on; nothing was "
        "written")
    assert list(tmp_path.iterdir()) == []


def test_two_snapshots_are_taken_3_s_apart_unless_told(tmp_path, monkeypatch):
    """The wait between them is recorded, not waited: it comes once the first snapshot is taken
    (each worker asked its 3 handlers), before the second."""
    folder = FIXTURES / "healthy_json"
    servers = [_worker((folder / f"comm_lib_trace_rank_{r}.json").read_bytes()) for r in range(4)]
    waits, sleep = [], time.sleep

    def recorded(seconds):
        if threading.current_thread() is threading.main_thread():
            waits.append((seconds, len(servers[0].asked)))
        else:
            sleep(seconds)

    monkeypatch.setattr(time, "sleep", recorded)
    out, log = tmp_path / "snap", io.StringIO()
    frtrace.live_snapshot(workers=[_url(s) for s in servers], out_dir=str(out), jobs=1, log=log)

    assert waits == [(3.0, 3)] and len(servers[0].asked) == 6
    assert log.getvalue().startswith(f"frtrace: two snapshots 3 s apart kept in {out} (4 of 4 ranks;")


def test_without_a_folder_named_the_snapshot_is_kept_in_one_named_by_when_it_was_taken(tmp_path, monkeypatch):
    folder = FIXTURES / "healthy_json"
    servers = [_worker((folder / f"comm_lib_trace_rank_{r}.json").read_bytes()) for r in range(4)]
    monkeypatch.chdir(tmp_path)
    before = int(time.time())
    snap = frtrace.live_snapshot(workers=[_url(s) for s in servers], interval=0, jobs=1)
    after = time.time()

    assert os.listdir(tmp_path) == [snap.out_dir]
    named = time.mktime(time.strptime(snap.out_dir, "frtrace-live-%Y%m%d-%H%M%S"))  # local time, to the second
    assert before <= named <= after
    assert sorted(os.listdir(snap.out_dir)) == ["manifest.json", "stacks", *(f"trace_rank_{r}.json" for r in range(4))]


def test_the_snapshot_is_written_in_a_hidden_folder_beside_its_final_name_until_it_is_kept(tmp_path):
    """Beside it: the same file system, so that keeping it is a rename."""
    trace = (FIXTURES / "healthy_json" / "comm_lib_trace_rank_0.json").read_bytes()
    out = tmp_path / "snap"
    with fetch.SnapshotFolder(str(out)) as snapshot:
        (writing,) = os.listdir(tmp_path)
        assert writing.startswith(".frtrace-live-") and snapshot.temp == str(tmp_path / writing)
        snapshot.take("", {0: _url(_worker(trace))}, 5)
        assert (tmp_path / writing / "trace_rank_0.json").read_bytes() == trace
        snapshot.keep()
    assert os.listdir(tmp_path) == ["snap"] and (out / "trace_rank_0.json").read_bytes() == trace


def test_a_snapshot_folder_whose_temporary_folder_went_meanwhile_lets_the_stop_that_ended_it_through(tmp_path):
    """Ctrl-C after something else removed the folder being written (a cleaner of /tmp, say):
    the stop is what comes out, not the folder's absence."""
    with pytest.raises(KeyboardInterrupt), fetch.SnapshotFolder(str(tmp_path / "snap")) as snapshot:
        shutil.rmtree(snapshot.temp)
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def _store_error(address: str, timeout: float = 5) -> str:
    with pytest.raises(UsageError) as raised:
        fetch.store_workers(address, None, timeout)
    return str(raised.value)


@pytest.mark.parametrize("address", ["node3", "node3:abc", ":29500", "127.0.0.1:0", "127.0.0.1:65536"])
def test_a_store_address_that_is_not_host_and_port_is_refused_before_connecting(address):
    assert _store_error(address) == f"--store {address}: give HOST:PORT, the job's MASTER_ADDR:MASTER_PORT"


def _ipv6_closed_port() -> int | None:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
            return sock.getsockname()[1]
    except OSError:
        return None


@pytest.mark.parametrize("address", [
    lambda: f"127.0.0.1:{_closed_port()}",
    lambda: "127.0.0.1:1",  # the lowest port there is
    lambda: f"[::1]:{port}" if (port := _ipv6_closed_port()) else pytest.skip("no IPv6 loopback here"),
], ids=["ipv4", "port-1", "ipv6-in-brackets"])
def test_a_store_address_where_nothing_listens_says_why_and_what_to_check(address):
    pytest.importorskip("torch.distributed")
    address = address()
    assert _store_error(address) == (f"--store {address}: nothing answers there ({REFUSED}); check "
                                     "MASTER_ADDR:MASTER_PORT and that the job runs")


def _listener_that_accepts_nobody():
    """A port whose connection queue is full (backlog 0, one connection held): the next connection
    is never answered, as a host that drops packets."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    held = socket.create_connection(listener.getsockname(), timeout=5)
    return listener, held


@pytest.mark.parametrize("timeout,given_up", [(0.5, 0.5), (5.5, 5.0)], ids=["its-timeout", "at-most-5-s"])
def test_a_store_that_never_answers_the_connection_is_given_up_within_the_timeout_or_5_s(timeout, given_up):
    """Costs 5 s (at-most-5-s): the cap on the first connection cannot be seen sooner."""
    pytest.importorskip("torch.distributed")  # imported now, not while timed
    listener, held = _listener_that_accepts_nobody()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    said: list[str] = []

    def connect():
        try:
            fetch.store_workers(address, None, timeout)
        except UsageError as exc:
            said.append(str(exc))

    started = time.monotonic()
    waiting = threading.Thread(target=connect, daemon=True)  # left behind where the cap is lost
    waiting.start()
    waiting.join(given_up + 3)
    took = time.monotonic() - started
    held.close()
    listener.close()
    assert said == [(f"--store {address}: nothing answers there (no answer in time); check MASTER_ADDR:MASTER_PORT and "
                     "that the job runs")]
    assert given_up - 0.1 < took < given_up + 0.4


def test_without_torch_the_store_cannot_be_read_and_the_message_says_each_way_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.distributed", None)  # import fails as where torch is missing
    assert _store_error("127.0.0.1:29500") == (
        "--store reads the job's TCPStore with torch's client, and torch is not installed here: run frtrace live on a "
        "training host, or pip install torch, or give --workers URL...")


@pytest.fixture
def store():
    """A job's store (torch's TCPStore, in this process) and its debug-server part."""
    distributed = pytest.importorskip("torch.distributed")
    import datetime

    master = distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                  timeout=datetime.timedelta(seconds=5))
    yield master, distributed.PrefixStore("debug_server", master)


def test_each_rank_s_worker_comes_from_its_key_in_the_store_and_a_rank_without_one_is_said(store):
    """Ranks 0-2 have a key (rank 2's holds no address), rank 3 none, rank 4 one: without a world,
    the world is the consecutive keys from rank 0."""
    master, debug = store
    for rank, text in ((0, "127.0.0.1:29600"), (1, "http://node1:29600"), (2, "not an address\x1b[2J"), (4, "node4:29600")):
        debug.set(f"rank{rank}", text)
    address = f"127.0.0.1:{master.port}"
    garbage = "the store holds no worker address for it ('not an address\\x1b[2J')"  # escaped once, never raw

    assert fetch.store_workers(address, None, 5) == ({0: "http://127.0.0.1:29600", 1: "http://node1:29600"}, {2: garbage})
    assert fetch.store_workers(address, 5, 5) == (
        {0: "http://127.0.0.1:29600", 1: "http://node1:29600", 4: "http://node4:29600"},
        {2: garbage, 3: "no worker address in the store (the rank never started the debug server)"})


def test_a_job_s_store_gives_the_ranks_to_ask_and_a_rank_missing_there_is_silent_without_an_address(store, tmp_path):
    """skip_rank2's ranks 0, 1 and 3 have workers, their addresses in the store as the debug
    server keeps them (HOST:PORT); rank 2 has none there."""
    master, debug = store
    servers = {r: _worker(_as_json(DESYNC_RANK2 / f"nccl_trace_rank_{r}")) for r in (0, 1, 3)}
    for rank, server in servers.items():
        debug.set(f"rank{rank}", f"127.0.0.1:{server.server_address[1]}")
    out, log = tmp_path / "snap", io.StringIO()
    why = "no worker address in the store (the rank never started the debug server)"

    snap = frtrace.live_snapshot(store=f"127.0.0.1:{master.port}", world=4, out_dir=str(out), interval=0, jobs=1, log=log)

    assert [(a.rank, a.url, a.error) for a in snap.answers] == [
        (0, _url(servers[0]), None), (1, _url(servers[1]), None), (2, "", why), (3, _url(servers[3]), None)]
    assert snap.as_dict()["live"]["silent"] == [{"rank": 2, "url": "", "error": why}]
    assert json.loads((out / "manifest.json").read_text())["ranks"][2] == {
        "rank": 2, "url": "", "seconds": 0.0, "answered": False, "error": why, "asked": False}
    assert log.getvalue().splitlines()[0] == f"frtrace: rank 2: {why}"
    assert snap.result.culprit_ranks == (2,)  # ranks 0-1,3 wait for it in all_reduce #10
    # never asked, so nothing is known of its process: not said to be gone, nor to have not answered
    report = snap.result.as_dict()
    assert report["causes"]["2"]["cause"] == "unknown" and "whether its process is alive cannot be told" in report["causes"]["2"]["said"]
    assert "left no address for frtrace live to ask" in snap.result.headline
    assert "did not answer" not in snap.text() and "gone" not in snap.text()
    assert "Now (the ranks' Python stacks): rank 2 was not asked (no address)" in snap.text().splitlines()


def test_a_store_without_any_worker_says_how_to_start_them(store):
    master, _ = store
    address = f"127.0.0.1:{master.port}"
    assert _store_error(address) == (f"--store {address}: the store holds no debug-server worker (debug_server/rank<R>): "
                                     "start the job's ranks with torch.distributed.debug.start_debug_server()")
