"""Reading dump files: every format version, and every kind of damaged or hostile input."""

from __future__ import annotations

import json
import math
import os
import pickle
import platform
import socket
import sys
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES, entry, make_dump, ops, write_dumps
from frtrace.reading.discover import find_dump_files
from frtrace.errors import DumpError, UsageError
from frtrace.loader import load_dumps, normalize, read_dump, read_raw
from frtrace.reading.safe_read import parse_raw, short_reason
from frtrace.types import Frame


def load(directory, **kw):
    return load_dumps(find_dump_files(str(directory), **kw))


# ---------------------------------------------------------------------------- format versions
def test_pickle_and_json_normalize_to_the_same_entries(tmp_path):
    raw = make_dump(ops(3))
    write_dumps(tmp_path / "p", {0: raw})
    as_json = json.loads(json.dumps(raw))
    for e in as_json["entries"]:  # JSON writes 0 for unset times and lists for tuples
        e["time_discovered_started_ns"] = 0
        e["time_discovered_completed_ns"] = 0
    write_dumps(tmp_path / "j", {0: as_json}, fmt="json")
    from_pickle = load(tmp_path / "p").dumps[0]
    from_json = load(tmp_path / "j").dumps[0]
    assert from_pickle.entries == from_json.entries
    assert from_json.file_format == "json" and from_pickle.file_format == "pickle"
    assert from_json.entries[0].time_started_ns is None


def test_version_before_1_0_is_a_bare_list_with_one_seq_counter(tmp_path):
    old = [{"seq_id": i, "pg_id": 0, "profiling_name": "nccl:all_reduce", "input_sizes": [[2]], "output_sizes": [[2]],
            "state": "completed", "frames": []} for i in (1, 2)]
    write_dumps(tmp_path, {0: old})
    dump = load(tmp_path).dumps[0]
    assert dump.version == (0, 0)
    assert [e.collective_seq_id for e in dump.entries] == [1, 2]
    assert dump.entries[0].pg_name == "0" and dump.entries[0].record_id is None


def test_version_1_4_pg_config_maps_ids_to_rank_lists(tmp_path):
    raw = {"version": "1.4", "pg_config": {0: [0, 1, 2]}, "entries": [
        {"record_id": 0, "seq_id": 1, "pg_id": 0, "op_id": 1, "profiling_name": "nccl:all_reduce",
         "input_sizes": [[2]], "output_sizes": [[2]], "state": "scheduled"}]}
    write_dumps(tmp_path, {0: raw})
    dump = load(tmp_path).dumps[0]
    assert dump.version == (1, 4)
    assert [(g.name, g.ranks) for g in dump.group_configs] == [("0", (0, 1, 2))]


def test_version_2_0_cpp_dtype_names_are_normalized(tmp_path):
    write_dumps(tmp_path, {0: make_dump([entry(dtype="float"), entry(seq=2, dtype="c10::Half")], version="2.0")})
    dump = load(tmp_path).dumps[0]
    assert [e.input_dtypes for e in dump.entries] == [("Float",), ("Half",)]


def test_real_gloo_placeholder_pg_config_counts_as_no_config(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(1))})
    assert load(tmp_path).dumps[0].group_configs == ()


def test_pg_config_ranks_text_is_parsed_without_eval(tmp_path):
    marker = tmp_path / "pwned"
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},  # eval'd, this makes a file and is a list
              "1": {"name": "1", "desc": "evil", "ranks": f"__import__('pathlib').Path({str(marker)!r}).touch() or [0, 1]"}}
    write_dumps(tmp_path / "d", {0: make_dump(ops(1), pg_config=config)})
    dump = load(tmp_path / "d").dumps[0]
    assert not marker.exists()
    assert [(g.name, g.ranks) for g in dump.group_configs] == [("0", (0, 1))]
    assert any("not a list of ranks" in n for n in dump.notes)


def test_entries_may_be_absent_when_empty(tmp_path):
    write_dumps(tmp_path, {0: {"version": "2.10", "pg_config": {}}}, fmt="json")
    assert load(tmp_path).dumps[0].entries == ()


def test_unknown_version_string_is_read_by_its_fields(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(2), version="banana")})
    dump = load(tmp_path).dumps[0]
    assert len(dump.entries) == 2
    assert any("unknown version" in n for n in dump.notes)


def test_unknown_backend_and_op_are_kept(tmp_path):
    write_dumps(tmp_path, {0: make_dump([entry(backend="mybackend", op="frobnicate")])})
    e = load(tmp_path).dumps[0].entries[0]
    assert (e.backend, e.op) == ("mybackend", "frobnicate")


def test_seq_ids_written_as_digit_strings_are_accepted(tmp_path):
    raw = make_dump(ops(1))
    raw["entries"][0]["collective_seq_id"] = "1"
    write_dumps(tmp_path, {0: raw})
    assert load(tmp_path).dumps[0].entries[0].collective_seq_id == 1


# ---------------------------------------------------------------------------- file names
@pytest.mark.parametrize("name,rank", [
    ("nccl_trace_rank_12", 12), ("comm_lib_trace_rank_3.json", 3), ("trace_host-a01_7", 7), ("dump5.pkl", 5),
])
def test_rank_comes_from_the_trailing_digits(tmp_path, name, rank):
    (tmp_path / name).write_bytes(pickle.dumps(make_dump(ops(1))))
    assert [f.rank for f in find_dump_files(str(tmp_path)).files] == [rank]


def test_prefix_option_accepts_a_path_prefix(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(1)), 1: make_dump(ops(1))})
    write_dumps(tmp_path, {0: make_dump(ops(1))}, prefix="other_")
    found = find_dump_files(str(tmp_path), prefix="/tmp/nccl_trace_rank_")
    assert [os.path.basename(f.path) for f in found.files] == ["nccl_trace_rank_0", "nccl_trace_rank_1"]


def test_not_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not a directory"):
        find_dump_files(str(tmp_path / "nope.txt") if (tmp_path / "nope.txt").write_text("x") else "")


# ---------------------------------------------------------------------------- hostile input
class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Evals:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import builtins
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


class _Subprocess:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import subprocess
        return (subprocess.call, (["touch", str(self.marker)],))


@pytest.mark.parametrize("payload", [_RunsCode, _Evals, _Subprocess], ids=["os.system", "builtins.exec", "subprocess.call"])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path, payload):
    marker = tmp_path / "pwned"
    evil = make_dump(ops(1))
    evil["entries"][0]["frames"] = [payload(marker)]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "nccl_trace_rank_0").write_bytes(pickle.dumps(evil))
    write_dumps(tmp_path / "d", {1: make_dump(ops(1))})

    result = load(tmp_path / "d")

    assert not marker.exists()
    assert list(result.dumps) == [1]
    (skipped,) = result.skipped
    assert "refused" in skipped.reason and "nccl_trace_rank_0" in skipped.path


class _Global:
    """A pickle that calls one global with some arguments (what a hostile dump does)."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def _hostile(marker):
    import builtins
    return {
        "builtins.eval": _Global(builtins.eval, f"open({str(marker)!r}, 'w').write('ran')"),
        "builtins.getattr": _Global(builtins.getattr, str(marker), "upper"),
        "builtins.__import__": _Global(builtins.__import__, "os"),
        "io.open": _Global(builtins.open, str(marker), "w"),
        "posix.system": _Global(os.system, f"touch {marker}"),
    }


@pytest.mark.parametrize("name", list(_hostile(Path("x"))))
def test_every_global_a_pickle_asks_for_is_refused_by_name(tmp_path, name):
    marker = tmp_path / "pwned"
    evil = make_dump(ops(1))
    evil["entries"][0]["frames"] = [_hostile(marker)[name]]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "nccl_trace_rank_0").write_bytes(pickle.dumps(evil))

    result = load(tmp_path / "d")

    assert not marker.exists() and not result.dumps
    (skipped,) = result.skipped
    function = _hostile(marker)[name].function  # named as this Python names it: io.open is _io.open from 3.12
    assert f"asks for {function.__module__}.{function.__qualname__}" in skipped.reason
    assert "do not trust this file" in skipped.reason


def test_reading_a_fifo_never_waits_for_a_writer(tmp_path):
    import threading
    fifo = tmp_path / "nccl_trace_rank_0"
    os.mkfifo(fifo)
    said = []
    reader = threading.Thread(target=lambda: said.append(_reason(lambda: read_raw(str(fifo)))), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked in open(): let it go before failing
        with open(fifo, "wb"):
            pass
        reader.join(10)
        pytest.fail("opening the FIFO waited for a writer")
    assert said == ["not a regular file; not read"]


def test_a_directory_where_a_dump_was_is_not_read(tmp_path):
    (tmp_path / "folder").mkdir()
    assert _reason(lambda: read_raw(str(tmp_path / "folder"))) == "not a regular file; not read"


def test_a_dump_says_which_format_it_was_read_as(tmp_path):
    raw = make_dump(ops(2))
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(raw))
    (tmp_path / "nccl_trace_rank_1.json").write_text(json.dumps(raw))
    (tmp_path / "nccl_trace_rank_2.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(raw).encode())  # with a BOM
    dumps = [read_dump(str(tmp_path / name), 0) for name in ["nccl_trace_rank_0", "nccl_trace_rank_1.json", "nccl_trace_rank_2.json"]]
    assert [d.file_format for d in dumps] == ["pickle", "json", "json"]
    assert dumps[0].entries == dumps[1].entries == dumps[2].entries


def test_a_dump_at_the_size_cap_is_read_and_one_byte_more_is_not(tmp_path, monkeypatch):
    from frtrace.reading import safe_read

    text = json.dumps(make_dump(ops(2))).encode()
    monkeypatch.setattr(safe_read, "MAX_DUMP_BYTES", len(text))
    at_cap, over = tmp_path / "at_cap.json", tmp_path / "over.json"
    at_cap.write_bytes(text)
    over.write_bytes(text + b" ")
    assert read_raw(str(at_cap))[1] == "json"
    assert _reason(lambda: read_raw(str(over))).startswith("more than the ")


def test_a_file_past_a_gibibyte_is_refused_unread(tmp_path):
    huge = tmp_path / "nccl_trace_rank_0"
    with open(huge, "wb") as handle:  # sparse: takes no disk
        handle.write(b"\x80\x02")
        handle.truncate((1 << 30) + 1)
    assert _reason(lambda: read_raw(str(huge))) == "more than the 1024 MiB a Flight Recorder dump can hold; not read"


def test_a_damaged_dump_is_named_in_its_error(tmp_path):
    for name, data in (("r0.json", b'{"version": "2.10", "entries": ['), ("r1", pickle.dumps(make_dump(ops(3)))[:-40])):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DumpError) as caught:
            read_raw(str(tmp_path / name))
        assert caught.value.path == str(tmp_path / name)


class _CountedReads:
    """A file handle that notes each read's requested size and the bytes it gave."""

    def __init__(self, handle, asked: list, taken: list) -> None:
        self.handle, self.asked, self.taken = handle, asked, taken

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()

    def read(self, size=-1):
        self.asked.append(size)
        data = self.handle.read(size)
        self.taken.append(len(data))
        return data


def test_a_file_growing_past_the_cap_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    """The size said by fstat may be stale (the file grows while read): the read itself stops
    one byte past the cap, so a file growing without end costs no more than that."""
    from frtrace.reading import safe_read

    cap = 3 << 20
    grown = tmp_path / "grown.json"
    with open(grown, "wb") as handle:  # sparse past its first byte
        handle.write(b"[")
        handle.truncate(4 << 20)
    monkeypatch.setattr(safe_read, "MAX_DUMP_BYTES", cap)
    real_fstat, real_fdopen = os.fstat, os.fdopen
    taken = []

    with monkeypatch.context() as patch:
        patch.setattr(safe_read.os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 10, *real_fstat(fd)[7:])))
        patch.setattr(safe_read.os, "fdopen", lambda *args, **kw: _CountedReads(real_fdopen(*args, **kw), [], taken))
        reason = _reason(lambda: read_raw(str(grown)))
    assert reason == "grew past 3 MiB while being read; not read"
    assert sum(taken) == cap + 1


def test_a_dump_is_read_in_one_request_of_its_own_size(tmp_path, monkeypatch):
    """Asking for the cap (a GiB) allocates, then gives back, that much for every file: a quarter
    of a millisecond a file, as much as a tenth of parsing it. One read of the size and one byte."""
    from frtrace.reading import safe_read

    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(make_dump(ops(50))))
    real_fdopen = os.fdopen
    asked = []
    monkeypatch.setattr(safe_read.os, "fdopen", lambda *args, **kw: _CountedReads(real_fdopen(*args, **kw), asked, []))
    raw, file_format = read_raw(str(path))
    assert file_format == "pickle" and len(raw["entries"]) == 50
    assert asked == [path.stat().st_size + 1]


def test_a_truncated_json_dump_is_refused_with_the_parsers_own_words(tmp_path):
    damaged = tmp_path / "nccl_trace_rank_0.json"
    damaged.write_text(json.dumps(make_dump(ops(2)))[:-30])
    assert _reason(lambda: read_raw(str(damaged))) == (
        "not valid JSON (Unterminated string starting at: line 1 column 956 (char 955)); the file is truncated or damaged, "
        "re-dump the rank or leave it out")


def test_integers_too_long_for_json_cost_their_fields_and_shorter_ones_keep_their_value(tmp_path):
    """A number of over 4300 digits fails Python's JSON parser: the dump is parsed again with
    numbers of more than 20 digits kept as their length only; each costs its field."""
    raw = make_dump([entry(seq=1, time_discovered_started_ns=7771, time_discovered_completed_ns=7772, duration_ms=7773)])
    text = json.dumps(raw)
    for marker, digits in ((7771, 4400), (7772, 20), (7773, 21)):
        text = text.replace(f": {marker}", f": {'9' * digits}", 1)
    (tmp_path / "r.json").write_text(text)
    assert sorted(read_dump(str(tmp_path / "r.json"), 0).notes) == [
        "entry 0: 'duration_ms' is a 21-digit integer where milliseconds belong; the field was dropped",
        "entry 0: 'time_discovered_completed_ns' is 99999999999999999999, beyond a 64-bit integer; the field was dropped",
        "entry 0: 'time_discovered_started_ns' is a 4400-digit integer where an integer belongs; the field was dropped",
    ]


def _reason(read) -> str:
    try:
        read()
    except DumpError as exc:
        return exc.reason
    return "read"


@pytest.mark.parametrize("content,reason", [
    (b"", "empty file"),
    (pickle.dumps(make_dump(ops(5)))[:-20], "truncated pickle"),
    (json.dumps(make_dump(ops(5))).encode()[:-30], "not valid JSON"),
    (b"\x80\x02" + bytes(range(256)) * 4, "not a readable pickle"),
    (pickle.dumps([1, 2, 3]), "entry 0 is 1"),
    (pickle.dumps(42), "holds int"),
    (pickle.dumps({"foo": 1}), "not a Flight Recorder dump"),
    (json.dumps({"version": "2.10", "entries": 5}).encode(), "'entries' is 5"),
])
def test_damaged_files_are_skipped_with_a_reason_and_the_others_load(tmp_path, content, reason):
    write_dumps(tmp_path, {0: make_dump(ops(2)), 2: make_dump(ops(2))})
    (tmp_path / "nccl_trace_rank_1").write_bytes(content)

    result = load(tmp_path)

    assert sorted(result.dumps) == [0, 2]
    (skipped,) = result.skipped
    assert skipped.path.endswith("nccl_trace_rank_1") and reason in skipped.reason
    assert 1 in result.ranks_named


@pytest.mark.parametrize("field,value,reason", [
    ("input_sizes", "[3, 4]", "where a list of shapes belongs"),
    ("input_sizes", [["3", 4]], "where a list of shapes belongs"),
    ("collective_seq_id", None, "where an integer belongs"),
    ("collective_seq_id", "seven", "where an integer belongs"),
    ("process_group", 17, "where a (name, desc) pair belongs"),
    ("profiling_name", 3, "where a string belongs"),
    ("input_dtypes", [1], "list of dtype names"),
    ("input_dtypes", [{"a": 1}], "list of dtype names"),  # found by hypothesis: unhashable
    ("input_sizes", [[True, 4]], "where a list of shapes belongs"),
    ("input_sizes", [[{}]], "where a list of shapes belongs"),
])
def test_entries_with_wrong_types_name_the_entry_and_field(tmp_path, field, value, reason):
    raw = make_dump(ops(3))
    raw["entries"][1][field] = value
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(raw))
    with pytest.raises(DumpError) as caught:
        read_dump(str(path), 0)
    message = str(caught.value)
    assert "entry 1" in message and field in message and reason in message and str(path) in message


def test_missing_required_key_is_named(tmp_path):
    raw = make_dump(ops(2))
    del raw["entries"][0]["input_sizes"]
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(raw))
    with pytest.raises(DumpError, match="entry 0: 'input_sizes' is missing"):
        read_dump(str(path), 0)


def test_fifo_is_never_opened(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(1))})
    os.mkfifo(tmp_path / "nccl_trace_rank_1.pipe")
    os.mkfifo(tmp_path / "nccl_trace_rank_2")
    done = {}
    worker = threading.Thread(target=lambda: done.setdefault("result", load(tmp_path)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert "result" in done, "loading blocked on a FIFO"
    result = done["result"]
    assert list(result.dumps) == [0]
    reasons = {os.path.basename(s.path): s.reason for s in result.skipped}
    assert "FIFO" in reasons["nccl_trace_rank_2"]


def test_sockets_directories_links_and_junk_are_skipped(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(1))})
    (tmp_path / "folder").mkdir()
    os.symlink(tmp_path / "folder", tmp_path / "nccl_trace_rank_1")  # a linked folder is never walked into
    os.symlink(tmp_path / "loop_b", tmp_path / "nccl_trace_rank_2")
    os.symlink(tmp_path / "nccl_trace_rank_2", tmp_path / "loop_b")
    (tmp_path / "README").write_text("notes")
    (tmp_path / ".DS_Store").write_bytes(b"\0\0")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "nccl_trace_rank_3"))
    try:
        result = load(tmp_path)
    finally:
        server.close()
    assert list(result.dumps) == [0]
    reasons = {os.path.basename(s.path): s.reason for s in result.skipped}
    assert "directory" in reasons["nccl_trace_rank_1"]
    assert "cannot stat" in reasons["nccl_trace_rank_2"]
    assert "socket" in reasons["nccl_trace_rank_3"]
    assert set(reasons) == {"nccl_trace_rank_1", "nccl_trace_rank_2", "nccl_trace_rank_3"}
    assert any("README: ignored, the name does not end in a rank number" in n for n in result.notes)
    assert not any(".DS_Store" in n for n in result.notes)


def test_unreadable_file_is_skipped(tmp_path, monkeypatch):
    write_dumps(tmp_path, {0: make_dump(ops(1)), 1: make_dump(ops(1))})
    real_open = os.open

    def denied(path, *args, **kw):  # chmod 0 does not stop root, who runs CI
        if str(path).endswith("nccl_trace_rank_1"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kw)

    monkeypatch.setattr(os, "open", denied)
    result = load(tmp_path)
    assert list(result.dumps) == [0] and "cannot open it (Permission denied)" in result.skipped[0].reason


def test_non_utf8_file_name_is_reported_printably(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(1))})
    folder = os.fsencode(str(tmp_path)) + b"/host_\xff"  # the job's name in a host folder named in no encoding
    os.mkdir(folder)
    bad = folder + b"/nccl_trace_rank_1"
    with open(bad, "wb") as handle:
        handle.write(b"\x80\x02garbage")
    result = load(tmp_path)
    (skipped,) = result.skipped
    assert "\\xff" in skipped.path
    skipped.path.encode("utf-8")  # printable


@pytest.mark.parametrize("other", ["old_run/nccl_trace_rank_1", "nccl_trace_rank_01"])
def test_two_files_claiming_one_rank_are_an_input_error_naming_both(tmp_path, other):
    write_dumps(tmp_path, {0: make_dump(ops(1)), 1: make_dump(ops(1))})
    (tmp_path / other).parent.mkdir(exist_ok=True)
    (tmp_path / other).write_bytes(pickle.dumps(make_dump(ops(2))))
    with pytest.raises(UsageError, match="two dump files claim rank 1: ") as raised:
        load(tmp_path)
    message = str(raised.value)
    assert "/nccl_trace_rank_1" in message and f"/{other}" in message and "move the one that does not belong" in message


def test_unreadable_pickle_falls_back_to_its_json_twin(tmp_path):
    write_dumps(tmp_path, {0: make_dump(ops(2))}, fmt="json")
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"\x80\x02")
    result = load(tmp_path)
    assert result.dumps[0].file_format == "json"
    assert "truncated" in result.skipped[0].reason


# ---------------------------------------------------------------------------- fast path, workers
REAL_DUMPS = sorted(p for p in FIXTURES.glob("*/*")
                    if p.name.startswith(("nccl_trace", "comm_lib", "trace_host")) and not p.name.endswith(".stacks"))


@pytest.mark.parametrize("path", REAL_DUMPS, ids=[f"{p.parent.name}/{p.name}" for p in REAL_DUMPS])
def test_fast_and_careful_paths_read_the_same_entries(path, monkeypatch):
    from frtrace.reading import fastpath

    fast = read_dump(str(path), 0)
    monkeypatch.setattr(fastpath, "fast_columns", lambda raw_entries, rank, stacks: None)
    careful = read_dump(str(path), 0)
    assert (fast.entries or fast.recorder_off) and fast.entries == careful.entries
    assert fast.stacks == careful.stacks
    assert (fast.moments, fast.recorder_off) == (careful.moments, careful.recorder_off)


def _fast_peak(entries) -> tuple[object, int]:
    """fast_columns over raw entries, and the most memory (bytes) it held at once."""
    import tracemalloc

    from frtrace.reading import fastpath

    tracemalloc.start()
    try:
        columns = fastpath.fast_columns(entries, 0, {})
        return columns, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_value_shared_by_every_entry_is_marshalled_within_a_budget():
    big = "B" * 400_000  # one string in the file, written into each entry's kind: 800 MB for all of them
    entries = make_dump(ops(2000, dtype=big))["entries"]
    columns, peak = _fast_peak(entries)
    assert columns is None and peak < 40 << 20, peak  # declined (the careful path cuts the text) early


def test_a_value_shared_within_one_entry_is_marshalled_once():
    level = [1] * 10
    for _ in range(6):  # 10**7 ints when expanded
        level = [level] * 10
    entries = make_dump(ops(3))["entries"]
    entries[1]["input_sizes"] = level
    columns, peak = _fast_peak(entries)
    assert columns is None and peak < 4 << 20, peak


def test_a_frame_shared_by_every_entry_is_marshalled_within_a_budget():
    # each entry its own list of frames, each list holding the one big frame: marshalled into
    # every entry's stack key, 800 MB in all, were the keys not made against a budget (32 KiB an entry)
    big = {"name": "B" * 400_000, "filename": "train.py", "line": 1}
    entries = make_dump([entry(seq=s, frames=[big]) for s in range(1, 2001)])["entries"]
    columns, peak = _fast_peak(entries)
    assert columns is None and peak < 80 << 20, peak
    careful = normalize(make_dump(entries[:3]), 0, "nccl_trace_rank_0", "pickle")
    assert careful.stacks[0][0].filename == "train.py" and careful.stacks[0][0].name.endswith("...")


def test_deep_stacks_of_their_own_take_the_fast_path():
    # 150 frames of long paths in every entry's own list (a deep model's stack): within the budget
    from frtrace.reading import fastpath

    def frames():
        return [{"name": f"forward_{i}", "filename": f"/opt/conda/lib/python3.11/site-packages/{'x' * 100}/layer_{i}.py",
                 "line": i} for i in range(150)]

    stacks: dict = {}
    columns = fastpath.fast_columns(make_dump([entry(seq=s, frames=frames()) for s in range(1, 41)])["entries"], 0, stacks)
    assert columns is not None and list(columns.stack_id) == [0] * 40 and len(next(iter(stacks))) == 150


@pytest.mark.parametrize("shared", [False, True], ids=["own-lists", "shared-lists"])
def test_stacks_are_read_by_their_frames_whether_entries_share_their_lists_or_not(shared):
    from frtrace.reading import fastpath

    def frames(line):
        return [{"name": "step", "filename": "train.py", "line": line}, {"name": "main", "filename": "run.py", "line": 7}]

    lists = {line: frames(line) for line in (10, 20)}
    lines = [10, 20, 10, 10, 20, 30]
    entries = [entry(seq=s, frames=(lists.get(ln) or frames(ln)) if shared else frames(ln)) for s, ln in enumerate(lines, 1)]
    entries.insert(3, entry(seq=99, frames=[]))  # no frames
    stacks: dict = {}
    columns = fastpath.fast_columns(make_dump(entries)["entries"], 0, stacks)
    assert [list(stacks)[i][0].line if i >= 0 else None for i in columns.stack_id] == [10, 20, 10, None, 10, 20, 30]
    assert list(stacks)[0][1] == Frame("main", "run.py", 7) and len(stacks) == 3


@pytest.mark.parametrize("frame", [["step", "train.py", 3], {"name": "step", "filename": "train.py"},
                                   {"name": "step", "filename": "train.py", "line": True},
                                   {"name": "step", "filename": b"train.py", "line": 3}],
                         ids=["a-list", "no-line", "a-bool-line", "bytes-filename"])
def test_a_frame_that_is_not_a_plain_dict_of_its_fields_goes_to_the_careful_path(frame):
    from frtrace.reading import fastpath

    good = {"name": "step", "filename": "train.py", "line": 3}
    entries = make_dump([entry(seq=1, frames=[good]), entry(seq=2, frames=[good, frame])])["entries"]
    assert fastpath.fast_columns(entries, 0, {}) is None


@pytest.mark.parametrize("field", ["op", "state"])
def test_a_name_or_state_past_the_text_cap_goes_to_the_careful_path_which_cuts_it(field):
    from frtrace.reading import fastpath
    from frtrace.reading.limits import MAX_TEXT

    long = "x" * (MAX_TEXT + 1)
    raw = make_dump([entry(seq=1, backend=""), entry(seq=2, backend="", **{field: long})])
    assert fastpath.fast_columns(raw["entries"], 0, {}) is None
    shown = getattr(normalize(raw, 0, "nccl_trace_rank_0", "pickle").entries[1], field)
    assert shown == "x" * MAX_TEXT + "..."


def test_times_never_recorded_read_as_zeros_and_durations_as_not_recorded():
    from frtrace.reading import fastpath

    raw = make_dump([entry(seq=s, time_created_ns=None, duration_ms=None) for s in (1, 2, 3)])
    columns = fastpath.fast_columns(raw["entries"], 0, {})
    for name in ("time_created_ns", "time_started_ns", "time_completed_ns"):
        assert getattr(columns, name).tolist() == [0, 0, 0] and getattr(columns, name).typecode == "q"
    assert columns.duration_ms.typecode == "d" and all(map(math.isnan, columns.duration_ms))
    assert [e.time_created_ns for e in columns] == [None] * 3 and [e.duration_ms for e in columns] == [None] * 3


@pytest.mark.parametrize("line", [3.0, True], ids=["a-float-line", "a-bool-line"])
def test_a_line_equal_to_its_kind_s_first_entry_s_but_not_an_int_goes_to_the_careful_path(line):
    # the fast path compares each entry's frames with its kind's first entry's (==): 3.0 == 3 and
    # True == 1, yet the careful path takes neither for a line number
    from frtrace.reading import fastpath

    first = [{"name": "step", "filename": "train.py", "line": 3 if line == 3.0 else 1}]
    odd = [{"name": "step", "filename": "train.py", "line": line}]
    raw = make_dump([entry(seq=1, frames=first), entry(seq=2, frames=[dict(first[0])]), entry(seq=3, frames=odd)])
    assert fastpath.fast_columns(raw["entries"], 0, {}) is None
    careful = normalize(raw, 0, "nccl_trace_rank_0", "pickle")
    assert [careful.stack_of(e.stack_id) != () for e in careful.entries] == [True, True, False]


def test_an_entry_called_from_elsewhere_than_the_first_of_its_kind_gets_its_own_stack_in_order():
    from frtrace.reading import fastpath

    def at(line):
        return [{"name": "step", "filename": "train.py", "line": line}]

    # one kind throughout, called from line 10, then 20, 10, 30, 20: stacks numbered as first met
    raw = make_dump([entry(seq=s, frames=at(line)) for s, line in enumerate([10, 20, 10, 30, 20], 1)])
    stacks: dict = {}
    columns = fastpath.fast_columns(raw["entries"], 0, stacks)
    assert [list(stacks)[i][0].line for i in columns.stack_id] == [10, 20, 10, 30, 20]
    assert [s[0].line for s in stacks] == [10, 20, 30]
    other_kind = make_dump([entry(seq=1, frames=at(30), op="broadcast"), *raw["entries"]])["entries"]
    stacks = {}
    columns = fastpath.fast_columns(other_kind, 0, stacks)
    assert [s[0].line for s in stacks] == [30, 10, 20] and list(columns.stack_id) == [0, 1, 2, 1, 0, 2]


@pytest.mark.parametrize("kinds, sites", [(3, 2), (200, 1), (300, 1), (50, 3)],
                         ids=["few", "kind-codes-past-127", "kinds-past-a-byte", "stacks-past-127"])
def test_stack_ids_of_many_kinds_and_call_sites_read_as_the_careful_path_reads_them(kinds, sites):
    # each kind called from `sites` places in turn, every 7th entry without frames: stack ids are
    # numbered in the order of the entries as the careful path numbers them, whether the codes
    # fit in a signed byte (translated) or not
    from frtrace.reading import fastpath

    def at(kind, site):  # kinds 50 apart share their frames
        return [{"name": "step", "filename": "train.py", "line": 100 * site + kind % 50}]

    raw = make_dump([entry(seq=s, op=f"op{s % kinds}", frames=[] if s % 7 == 0 else at(s % kinds, (s // kinds) % sites))
                     for s in range(1, 2 * kinds * sites + 2)])
    stacks: dict = {}
    columns = fastpath.fast_columns(raw["entries"], 0, stacks)
    careful = normalize(raw, 0, "nccl_trace_rank_0", "pickle")
    assert columns is not None and len(stacks) == len(careful.stacks) > 1
    assert [list(stacks)[i] if i >= 0 else () for i in columns.stack_id] == [careful.stack_of(e.stack_id) for e in careful.entries]
    assert list(columns.stack_id) == [e.stack_id for e in careful.entries]


def test_frames_that_compare_too_deep_go_to_the_careful_path_or_read_as_it_reads_them():
    from frtrace.reading import fastpath

    def deep() -> list:
        value: list = []
        for _ in range(1500):  # within marshal's nesting limit, past the interpreter's recursion limit
            value = [value]
        return value

    frames = [{"name": "step", "filename": "train.py", "line": 3, "locals": deep()}]
    again = [{"name": "step", "filename": "train.py", "line": 3, "locals": deep()}]
    raw = make_dump([entry(seq=1, frames=frames), entry(seq=2, frames=again)])
    stacks: dict = {}
    columns = fastpath.fast_columns(raw["entries"], 0, stacks)  # 3.10-3.12 stop the comparison; 3.13 goes deeper
    careful = normalize(raw, 0, "nccl_trace_rank_0", "pickle")
    assert columns is None or (list(columns.stack_id) == list(careful.entries.stack_id) and tuple(stacks) == careful.stacks)
    assert careful.stacks == ((Frame("step", "train.py", 3),),)


def test_entries_with_more_tensors_than_a_dump_holds_go_to_the_careful_path():
    from frtrace.reading import fastpath

    usual = make_dump(ops(100, sizes=((4,),) * 8))["entries"]
    assert fastpath.fast_columns(usual, 0, {}) is not None
    many = make_dump([entry(seq=s, sizes=((4 + s,),) * 20) for s in range(100)])  # every kind its own
    assert fastpath.fast_columns(many["entries"], 0, {}) is None
    careful = normalize(many, 0, "nccl_trace_rank_0", "pickle").entries
    assert len(careful) == 100 and careful[99].input_sizes == ((103,),) * 20


def test_kinds_found_by_comparing_entries_with_the_step_before_are_those_read_entry_by_entry():
    # a step of three ops repeated, some entries unlike the one a step before: a kind first met
    # late, met again, and an entry back to the step's op after one that was not
    from frtrace.reading import fastpath

    plan = [("all_reduce", 4), ("all_gather", 8), ("broadcast", 2)] * 7
    plan[7] = plan[16] = ("all_reduce", 16)
    plan[11] = ("reduce_scatter", 4)
    raw = make_dump([entry(seq=s, op=op, sizes=((n,),)) for s, (op, n) in enumerate(plan, 1)])
    columns = fastpath.fast_columns(raw["entries"], 0, {})
    distinct = list(dict.fromkeys(plan))
    assert [(k.op, k.input_sizes[0][0]) for k in columns.kinds] == distinct
    assert list(columns.kind) == [distinct.index(p) for p in plan]


def test_kinds_of_entries_after_a_step_cut_short_are_those_read_entry_by_entry():
    # an extra op mid-buffer shifts every step after it: those entries differ from their
    # counterparts in the first step, and equal theirs in the last
    from frtrace.reading import fastpath

    step = [("all_reduce", 4), ("all_gather", 8), ("broadcast", 2)]
    plan = step * 4 + [("barrier", 1)] + step * 4 + step[:2]
    raw = make_dump([entry(seq=s, op=op, sizes=((n,),)) for s, (op, n) in enumerate(plan, 1)])
    columns = fastpath.fast_columns(raw["entries"], 0, {})
    distinct = list(dict.fromkeys(plan))
    assert [(k.op, k.input_sizes[0][0]) for k in columns.kinds] == distinct
    assert list(columns.kind) == [distinct.index(p) for p in plan]


@pytest.mark.parametrize("number", [4.0, True], ids=["a-float", "a-bool"])
def test_sizes_equal_to_the_step_before_s_but_not_ints_go_to_the_careful_path(number):
    # each entry is compared (==) with the one a step before: 4.0 == 4 and True == 1, yet the
    # careful path takes neither for a dimension
    from frtrace.reading import fastpath

    usual = 4 if number == 4.0 else 1
    entries = [entry(seq=s, op=("all_reduce", "broadcast")[s % 2], sizes=((usual,),)) for s in range(1, 21)]
    entries[13] = entry(seq=14, op="all_reduce", sizes=((number,),))
    assert fastpath.fast_columns(make_dump(entries)["entries"], 0, {}) is None
    assert fastpath.fast_columns(make_dump(entries[:13] + entries[14:])["entries"], 0, {}) is not None


def test_entries_sharing_one_list_of_many_tensors_go_to_the_careful_path_unwalked():
    # equal by sharing the list, so compared at no cost: 2,000 entries of 6,000 tensors in and out
    # (one kind within the room a dump's kinds have) are counted first and declined, not walked
    # number by number (24 million of them)
    from frtrace.reading import fastpath

    shared = [[4]] * 6_000
    raw = make_dump([entry(seq=s) for s in range(1, 2001)])
    for item in raw["entries"]:
        item["input_sizes"] = item["output_sizes"] = shared
    assert fastpath.fast_columns(raw["entries"], 0, {}) is None


def test_entries_are_compared_only_as_far_as_an_entry_read_goes():
    # two equal values, each its own objects, nested past any depth a comparison can walk: entries
    # holding one or the other are compared only with entries read (whose sizes are shallow), so
    # no comparison walks them; compared with each other they would raise RecursionError
    from frtrace.reading import fastpath

    def deep() -> list:
        value: list = [4]
        for _ in range(5000):
            value = [value]
        return [value]

    one, other = deep(), deep()
    raw = make_dump([entry(seq=s) for s in range(1, 2001)])
    for index in range(500, 1500):  # the first and last entries as usual: the step is found, they are read
        raw["entries"][index]["input_sizes"] = raw["entries"][index]["output_sizes"] = one if index % 2 else other
    assert fastpath.fast_columns(raw["entries"], 0, {}) is None  # marshal refuses them: the careful path decides


def test_workers_give_the_same_result_as_one_process(tmp_path, monkeypatch):
    for rank in range(18):
        write_dumps(tmp_path, {rank: make_dump(ops(4, sizes=((rank + 1,),)))})
    (tmp_path / "nccl_trace_rank_18").write_bytes(b"\x80\x04junk")
    (tmp_path / "nccl_trace_rank_19").write_bytes(pickle.dumps({"entries": [{"bad": 1}]}))
    serial = load(tmp_path)
    from frtrace.reading import workers as worker_processes

    pools = []
    real_workers = worker_processes.in_workers

    def counting(load, jobs, workers):
        pools.append(workers)
        return real_workers(load, jobs, workers)

    monkeypatch.setattr(worker_processes, "in_workers", counting)
    parallel = load_dumps(find_dump_files(str(tmp_path)), workers=2)
    assert pools == [2], "the worker pool was not used"
    assert parallel == serial
    assert sorted(parallel.dumps) == list(range(18)) and len(parallel.skipped) == 2


@pytest.mark.process
@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"), reason="glibc's malloc")
def test_a_worker_keeps_the_memory_it_frees_between_files():
    # in a process of its own: the settings stay with the process that makes them (a worker)
    import subprocess

    code = "from frtrace.reading.workers import keep_heap; print(keep_heap())"
    said = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")})
    assert said.stdout.strip() == "True", said.stderr


@pytest.mark.process
def test_workers_take_files_as_they_answer_so_one_slow_file_holds_up_no_other(tmp_path):
    from frtrace.reading.workers import in_workers

    marker = tmp_path / "job 18 done"

    def load(job):
        if job == 0:  # waits for job 18: with a fixed share per worker (0, 2, ..., 18) it never would
            for _ in range(400):
                if marker.exists():
                    return ("released", os.getpid())
                threading.Event().wait(0.05)
            return ("timed out", os.getpid())
        if job == 18:
            marker.touch()
        return (job, os.getpid())

    results = list(in_workers(load, list(range(20)), 2))
    assert results[0][0] == "released"
    assert [r[0] for r in results[1:]] == list(range(1, 20))  # answers come back in job order


def _echo(job):
    return job


@pytest.mark.process
def test_a_ctrl_c_while_a_worker_starts_is_not_lost(monkeypatch, ctrl_c_as_in_a_terminal):
    """The parent keeps Ctrl-C from a child while forking it; one pressed then must still stop the
    parent (it used to be ignored for that moment, and the run went on to write its outputs)."""
    import signal

    from frtrace.reading import workers

    process_class = workers.process_context().Process
    real_start = process_class.start

    def start_then_interrupt(self):
        real_start(self)
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal does, while the worker is being started

    monkeypatch.setattr(process_class, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        list(workers.in_workers(_echo, [("a", 0), ("b", 1), ("c", 2)], 2))


@pytest.mark.process
@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_that_dies_costs_only_the_file_it_was_reading(workers):
    from frtrace.reading.workers import in_workers

    def load(job):
        if job[1] in (5, 6):
            os._exit(1)  # as if killed (out of memory) or crashed (segfault)
        return job

    results = list(in_workers(load, [(f"file{i}", i) for i in range(12)], workers))
    lost = [i for i, r in enumerate(results) if isinstance(r, DumpError)]
    assert lost == [5, 6]  # the files queued behind them went to a new worker
    assert all(results[i] == (f"file{i}", i) for i in range(12) if i not in lost)
    assert all("crashed or ran out of memory" in results[i].reason and results[i].path == f"file{i}" for i in lost)


# ---------------------------------------------------------------------------- the words of a refusal
@pytest.mark.parametrize("data, reason", [
    (b"", "empty file (the rank may have been killed before it dumped); leave it out or re-dump"),
    (b"\x80\x02\xff", "not a readable pickle or JSON dump (invalid load key, '\\xff'.); leave it out"),
    # a global's name is cut at 120 characters
    (b"\x80\x02c" + b"m" * 200 + b"\nf\n.", f"refused: the pickle asks for {'m' * 120}, and a dump holds only data; do not trust this file"),
])
def test_a_refused_file_is_told_in_full_words(data, reason):
    with pytest.raises(DumpError) as refused:
        parse_raw(data, "nccl_trace_rank_0")
    assert refused.value.reason == reason


@pytest.mark.parametrize("exc, said", [
    (ValueError("first line\nsecond line"), "first line"),
    (ValueError(), "ValueError"),  # no message: its type
    (ValueError("x" * 300), "x" * 120),
    (ValueError("bell \x07 and escape \x1b[31m"), "bell \\x07 and escape \\x1b[31m"),
])
def test_the_reason_given_for_an_unreadable_file_is_one_short_printable_line(exc, said):
    assert short_reason(exc) == said
