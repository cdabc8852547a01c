"""Dumps from other producers of the format (issue 11): read by the values present."""

from __future__ import annotations

import pytest

from conftest import entry, make_dump, ops
from frtrace.loader import health_checks, normalize


def _seqs(dump) -> list[int]:
    return list(dump.entries.collective_seq_id)


def test_process_wide_seq_ids_are_renumbered_per_group():
    # one counter for the process: world gets 1, 3, 5; tp gets 2, 4, 6 (is_p2p False everywhere)
    raw = make_dump([entry(pg="0" if s % 2 else "1", desc="default_pg" if s % 2 else "tp", seq=s) for s in range(1, 7)])
    dump = normalize(raw, 0, "x", "pickle")
    assert _seqs(dump) == [1, 1, 2, 2, 3, 3]
    assert any("renumbered per group" in n for n in dump.notes)


@pytest.mark.parametrize("seqs,groups", [
    ([1, 2, 3, 1, 2, 3], ["0", "0", "0", "1", "1", "1"]),  # per-group counters: values repeat across groups
    ([1, 2, 3, 4], ["0", "0", "0", "0"]),  # one group
    ([1, 3, 2, 4], ["0", "1", "0", "1"]),  # decreasing: not a process counter
], ids=["per-group", "one-group", "decreasing"])
def test_per_group_seq_ids_are_kept(seqs, groups):
    raw = make_dump([entry(pg=g, desc="default_pg" if g == "0" else "tp", seq=s) for s, g in zip(seqs, groups)])
    assert _seqs(normalize(raw, 0, "x", "pickle")) == seqs


def test_a_wrapped_buffer_with_process_wide_seq_ids_is_numbered_from_its_oldest_op():
    raw = make_dump([entry(pg="0" if s % 2 else "1", desc="default_pg" if s % 2 else "tp", seq=s) for s in range(11, 17)],
                    first_record=10)
    dump = normalize(raw, 0, "x", "pickle")
    assert _seqs(dump) == [1, 1, 2, 2, 3, 3] and dump.relative_seqs
    assert any("from the oldest op the buffer still holds" in n for n in dump.notes)
    whole = make_dump([entry(pg="0" if s % 2 else "1", desc="default_pg" if s % 2 else "tp", seq=s) for s in range(1, 7)])
    assert not normalize(whole, 0, "x", "pickle").relative_seqs  # records from 0: the groups' own numbers


_CONFIG = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
           "1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"},
           "2": {"name": "2", "desc": "tp", "ranks": "[2, 3]"}}


def _torchcomms_job(steps=6, skip=None, keep=7, state="completed", backend="nccl") -> dict:
    """4 ranks, tp pairs {0,1} {2,3}, each step a tp all_reduce (ranks 1 and 3 run two) and a world
    all_reduce, numbered by one counter per process; `skip` = (rank, step) leaves that world
    all_reduce out, and the others wait in it. Rank 0's buffer holds all; the others' last `keep`."""
    dumps = {}
    for rank in range(4):
        pg, entries = ("1", "2")[rank // 2], []
        for step in range(steps):
            last = step == steps - 1
            for _ in range(1 + rank % 2):
                entries.append(entry(pg=pg, desc="tp", state=state, backend=backend))
            if (rank, step) != skip:
                entries.append(entry(state="started" if skip and last and state == "completed" else state, backend=backend,
                                     sizes=((8,),)))
        for seq, e in enumerate(entries, start=1):
            e["collective_seq_id"] = seq
        first = 0 if rank == 0 else len(entries) - keep
        dumps[rank] = make_dump(entries[first:], pg_config=_CONFIG, first_record=first)
    return dumps


def test_wrapped_torchcomms_dumps_are_lined_up_by_their_completed_ops(tmp_path):
    report = _analyse(tmp_path / "skip", _torchcomms_job(skip=(2, 5)))
    assert report["verdict"] == "desync" and report["culprit_ranks"] == [2], report["headline"]
    assert "all_reduce #6 of default_pg" in report["headline"]  # rank 0's own numbers are the reference
    report = _analyse(tmp_path / "healthy", _torchcomms_job())
    assert report["verdict"] == "clean", report["headline"]


@pytest.mark.parametrize("backend,why", [("gloo", "records no completion"), ("nccl", "where its ops start cannot be told")],
                         ids=["no-completion-data", "nothing-completed"])
def test_wrapped_torchcomms_dumps_without_completed_ops_are_inconclusive(tmp_path, backend, why):
    report = _analyse(tmp_path, _torchcomms_job(skip=(2, 5), state="scheduled", backend=backend))
    assert report["verdict"] == "inconclusive" and why in report["headline"], report["headline"]


def test_wrapped_torchcomms_dumps_whose_completed_ops_differ_once_lined_up_are_inconclusive(tmp_path):
    dumps = _torchcomms_job()
    dumps[3]["entries"][0]["profiling_name"] = "nccl:broadcast"  # its oldest tp op, completed with rank 2's all_reduce
    report = _analyse(tmp_path, dumps)
    assert report["verdict"] == "inconclusive" and "completed different ops" in report["headline"], report["headline"]


def test_a_wrapped_member_with_nothing_completed_starts_at_the_op_in_flight(tmp_path):
    dumps = _torchcomms_job(skip=(2, 5))
    dumps[1]["entries"] = dumps[1]["entries"][-3:]  # rank 1 holds its last two tp ops and the world op it waits in
    report = _analyse(tmp_path, dumps)
    assert report["verdict"] == "desync" and report["culprit_ranks"] == [2], report["headline"]


def test_send_and_recv_names_are_point_to_point_whatever_is_p2p_says():
    raw = make_dump([entry(seq=1), entry(seq=1, op="send 0->1", is_p2p=False), entry(seq=1, op="coalesced", is_p2p=False)])
    kinds = normalize(raw, 0, "x", "pickle").entries.kinds
    assert [(k.op, k.is_p2p) for k in kinds] == [("all_reduce", False), ("send 0->1", True), ("coalesced", False)]


@pytest.mark.parametrize("raw,expected", [
    ({"gpu": {"passed": False, "detail": "Xid 79"}, "nic": True},
     [("gpu", False, "passed=False", "Xid 79", (("passed", "False"), ("detail", "Xid 79"))), ("nic", True, "passed", "", ())]),
    ({"gpu": {0: "OK", 1: "FAILED"}}, [("gpu 0", True, "OK", "", ()), ("gpu 1", False, "FAILED", "", ())]),
    ({"nic": {"status": "error"}}, [("nic", False, "error", "", (("status", "error"),))]),
    ({"x": [1, 2], 10**400: False}, [("?", False, "failed", "", ())]),  # a huge key is shown as "?", never converted
    ("not a dict", []),
    # NVRx's layout: the device and the error are the root cause, and are kept
    ({"gpu": {"status": "failed", "index": 5, "uuid": "GPU-8d2c", "error": "Xid 48: double-bit ECC error", "pids": [1, 2]}},
     [("gpu", False, "failed", "Xid 48: double-bit ECC error (index 5, uuid GPU-8d2c)",
       (("status", "failed"), ("index", "5"), ("uuid", "GPU-8d2c"), ("error", "Xid 48: double-bit ECC error")))]),
], ids=["flags", "nested", "status", "odd-keys", "not-a-dict", "device-and-error"])
def test_health_check_results_are_read_whatever_their_layout(raw, expected):
    assert [tuple(check) for check in health_checks(raw)] == expected


def test_health_checks_are_bounded_and_escaped():
    assert len(health_checks({str(i): False for i in range(10_000)})) == 64
    (check,) = health_checks({"gpu\x1b[2J": {"status": "FAIL", "error": "\x1b]0;x\x07" + "e" * 5000}})
    assert check.check == "gpu\\x1b[2J" and check.said == "FAIL"  # the key's escape sequence is shown escaped
    assert check.detail.startswith("\\x1b]0;x\\x07e") and len(check.detail) < 300 and "\x1b" not in str(check.fields)


def _analyse(tmp_path, dumps: dict) -> dict:
    import json
    from conftest import write_dumps
    from frtrace.cli import main
    write_dumps(tmp_path / "d", dumps)
    main(["-d", str(tmp_path / "d"), "--json", str(tmp_path / "r.json")])
    return json.loads((tmp_path / "r.json").read_text())


def _p2p(op: str, p2p_seq: int = 1) -> dict:
    return entry(seq=2, op=op, is_p2p=True, p2p_seq=p2p_seq, backend="nccl2")


def test_a_receive_from_any_takes_the_send_that_fits(tmp_path):
    report = _analyse(tmp_path, {0: make_dump(ops(2, backend="nccl2") + [_p2p("send 0->1")]),
                                 1: make_dump(ops(2, backend="nccl2") + [_p2p("recv 1<-?")])})
    assert report["verdict"] == "clean", report["headline"]


def test_a_receive_from_any_with_senders_from_two_ranks_is_ambiguous(tmp_path):
    report = _analyse(tmp_path, {0: make_dump(ops(2, backend="nccl2") + [_p2p("send 0->2")]),
                                 1: make_dump(ops(2, backend="nccl2") + [_p2p("send 1->2")]),
                                 2: make_dump(ops(2, backend="nccl2") + [_p2p("recv 2<-?")])})
    assert report["verdict"] == "inconclusive" and "which send each took cannot be told" in report["headline"]


def test_a_send_nobody_receives_is_still_found_beside_a_receive_from_any(tmp_path):
    report = _analyse(tmp_path, {0: make_dump(ops(2, backend="nccl2") + [_p2p("send 0->1"), _p2p("send 0->1", 2)]),
                                 1: make_dump(ops(2, backend="nccl2") + [_p2p("recv 1<-?")])})
    assert report["verdict"] == "desync" and report["culprit_ranks"] == [1]


def test_a_recorder_reset_is_read_as_a_dump_that_lost_its_older_ops(tmp_path):
    # 4 ranks (NCCL layout, pg_config lists tp = all 4): 3 tp all_reduces, then 4 world all_reduces.
    # Rank 1 called reset_fr_trace() after its tp ops: its dump counts records from 0 again and
    # holds only world #3-#4. It did issue the tp ops; it must not read as a rank that skipped them.
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
              "1": {"name": "1", "desc": "tp", "ranks": "[0, 1, 2, 3]"}}

    def job(rank: int) -> dict:
        tp = [entry(pg="1", desc="tp", seq=s, backend="nccl", state="completed") for s in range(1, 4)]
        world = [entry(seq=s, backend="nccl", state="completed") for s in range(1, 5)]
        return make_dump(world[2:] if rank == 1 else tp + world, pg_config=config)
    dumps = {r: job(r) for r in range(4)}
    report = _analyse(tmp_path, dumps)
    assert report["verdict"] == "clean", report["headline"]
    dump = normalize(dumps[1], 1, "x", "pickle")
    assert dump.restarted and dump.wrapped and any("recorder was reset" in n for n in dump.notes)
    assert not normalize(dumps[0], 0, "x", "pickle").restarted


def test_process_wide_seq_ids_after_a_reset_are_numbered_from_the_oldest_op():
    raw = make_dump([entry(pg="0" if s % 2 else "1", desc="default_pg" if s % 2 else "tp", seq=s) for s in range(21, 27)])
    dump = normalize(raw, 0, "x", "pickle")
    assert dump.restarted and dump.relative_seqs and _seqs(dump) == [1, 1, 2, 2, 3, 3]


def test_a_wrong_size_at_a_groups_first_op_in_a_wrapped_buffer_is_found(tmp_path):
    # rank 2's buffer wrapped: it starts with a tp op, then world #4 with other sizes. Only the
    # buffer's oldest entry can be the tail of a cut coalesced group; world #4 is compared.
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
              "1": {"name": "1", "desc": "tp", "ranks": "[0, 1, 2]"}}

    def job(rank: int) -> dict:
        entries = []
        for s in range(1, 5):
            entries.append(entry(pg="1", desc="tp", seq=s, backend="nccl", state="completed"))
            entries.append(entry(seq=s, backend="nccl", state="completed", sizes=((16,),) if (rank, s) == (2, 4) else ((8,),)))
        return make_dump(entries[6:] if rank == 2 else entries, pg_config=config, first_record=6 if rank == 2 else 0)
    report = _analyse(tmp_path, {r: job(r) for r in range(3)})
    assert report["verdict"] == "desync" and report["culprit_ranks"] == [2], report["headline"]
