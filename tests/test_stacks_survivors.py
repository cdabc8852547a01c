"""The stack reader on the inputs the mutation run's survivors named and no test built: bytes
that are not UTF-8, py-spy's JSON with whitespace before it, a malformed thread or frame or a
thread name that is no string, more threads than are read, thread names in py-spy's text, a main
thread picked by its name or by the script it runs, a stack without a frame of the program's
own, a frame of frozen or exec'd code, a line left out, a stack file read from a URL, the reason
a file is no stack, and the notes said in rank order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frtrace.reading.stacks import (MAX_THREADS, Thread, frame_text, main_thread, outline, parse, place,
                                    read_stack_files, read_stacks, where)

DATA = Path(__file__).with_name("data")
PYSPY_TEXT = (DATA / "pyspy_dump.txt").read_text()
PYSPY_JSON = (DATA / "pyspy_dump.json").read_text()
LIBRARY_WAIT = ("/usr/lib/python3.11/threading.py", 320, "wait")


def _frame(filename, line, name) -> dict:
    return {"name": name, "filename": filename, "short_filename": filename.rsplit("/", 1)[-1], "line": line,
            "locals": None, "is_entry": False}


def _pyspy_json(*threads: dict) -> str:
    return json.dumps([{"pid": 1, "thread_id": i, "active": False, "owns_gil": False, **thread}
                       for i, thread in enumerate(threads)])


# ---------------------------------------------------------------------------- reading the text
def test_bytes_that_are_not_utf8_are_read_with_the_bad_byte_replaced():
    data = b'Current thread 0x1 (most recent call first):\n  File "/job/tr\xffain.py", line 12 in <module>\n'
    assert parse(data) == [Thread(None, (("/job/tr\ufffdain.py", 12, "<module>"),))]


def test_py_spy_json_after_leading_whitespace_is_read_as_json():
    found = parse("\n  " + PYSPY_JSON)
    assert found is not None and [t.name for t in found] == ["prefetch", "MainThread"]


def test_py_spy_text_gives_each_thread_its_name():
    """pyspy_dump.txt: `Thread 27897 (idle): "MainThread"` first, then `... "prefetch"`."""
    found = parse(PYSPY_TEXT)
    assert [t.name for t in found] == ["MainThread", "prefetch"]
    assert found[1].frames[0] == ("stuck.py", 7, "helper")


def test_threads_past_the_limit_are_not_read():
    text = "".join(f'Thread 0x{i:x} (most recent call first):\n  File "/job/t.py", line {i + 1} in f\n'
                   for i in range(MAX_THREADS + 1))
    found = parse(text)
    assert len(found) == MAX_THREADS and found[-1].frames == (("/job/t.py", MAX_THREADS, "f"),)


# ---------------------------------------------------------------------------- py-spy's JSON
def test_py_spy_json_gives_each_thread_its_name():
    """pyspy_dump.json lists the "prefetch" thread, then "MainThread"."""
    assert [t.name for t in parse(PYSPY_JSON)] == ["prefetch", "MainThread"]


def test_a_thread_name_that_is_no_string_is_none():
    text = _pyspy_json({"thread_name": 7, "frames": [_frame("/job/train.py", 9, "<module>")]})
    assert parse(text) == [Thread(None, (("/job/train.py", 9, "<module>"),))]


@pytest.mark.parametrize("thread", [None, "MainThread", 3], ids=["null", "string", "number"])
def test_an_entry_that_is_no_thread_is_skipped(thread):
    text = json.dumps([thread, {"thread_name": "MainThread", "frames": [_frame("/job/train.py", 9, "<module>")]}])
    assert parse(text) == [Thread("MainThread", (("/job/train.py", 9, "<module>"),))]


@pytest.mark.parametrize("frames", [None, "load_batch", {}], ids=["null", "string", "object"])
def test_a_thread_without_a_list_of_frames_is_skipped_and_the_rest_read(frames):
    text = _pyspy_json({"thread_name": "prefetch", "frames": frames},
                       {"thread_name": "MainThread", "frames": [_frame("/job/train.py", 9, "<module>")]})
    assert parse(text) == [Thread("MainThread", (("/job/train.py", 9, "<module>"),))]


@pytest.mark.parametrize("bad", [
    "load_batch",
    {"name": "load_batch", "line": 3},
    {"name": "load_batch", "filename": None, "line": 3},
    {"name": "load_batch", "filename": "/job/data.py", "line": "3"},
    {"name": "load_batch", "filename": "/job/data.py", "line": True},
    {"name": None, "filename": "/job/data.py", "line": 3},
], ids=["no-object", "no-filename", "null-filename", "line-a-string", "line-a-bool", "null-name"])
def test_a_malformed_frame_is_left_out_and_the_thread_s_others_kept(bad):
    text = _pyspy_json({"thread_name": "MainThread", "frames": [bad, _frame("/job/train.py", 9, "<module>")]})
    assert parse(text) == [Thread("MainThread", (("/job/train.py", 9, "<module>"),))]


# ---------------------------------------------------------------------------- the main thread
def test_the_thread_named_main_thread_is_the_training_thread_wherever_it_is_listed():
    """Run as `python -m trainer`: MainThread's outermost frame is runpy's, not `<module>`, and a
    worker thread in the program's own code is listed first."""
    text = ('Thread 31 (idle): "prefetch"\n    fill (loader.py:40)\n    Thread.run (threading.py:982)\n'
            'Thread 30 (idle): "MainThread"\n    load_batch (data.py:88)\n    main (trainer.py:12)\n'
            '    _run_module_as_main (<frozen runpy>:198)\n')
    thread = main_thread(parse(text))
    assert thread.name == "MainThread" and place(thread) == "at data.py:88 in load_batch"


def test_without_names_the_thread_that_runs_the_script_is_the_training_thread():
    """faulthandler names no thread; the worker thread, listed first, has frames of the program's
    own too, but only the other runs the script (`<module>` outermost)."""
    text = ('Thread 0x2 (most recent call first):\n  File "/job/loader.py", line 40 in fill\n'
            '  File "/usr/lib/python3.11/threading.py", line 982 in run\n\n'
            'Current thread 0x1 (most recent call first):\n  File "/job/data.py", line 88 in load_batch\n'
            '  File "/job/train.py", line 12 in <module>\n')
    assert main_thread(parse(text)).frames[-1] == ("/job/train.py", 12, "<module>")
    assert where(text) == "at data.py:88 in load_batch"


# ---------------------------------------------------------------------------- frames of the program's own
def test_a_main_thread_only_in_library_code_has_no_place():
    thread = Thread("MainThread", (LIBRARY_WAIT, ("/usr/lib/python3.11/threading.py", 1002, "_bootstrap")))
    assert place(thread) is None
    assert where('Thread 30 (idle): "MainThread"\n    wait (threading.py:320)\n    _bootstrap (threading.py:1002)\n') is None


def test_a_stack_without_a_frame_of_its_own_is_outlined_whole_outermost_first():
    frames = (LIBRARY_WAIT, ("/usr/lib/python3.11/threading.py", 1002, "_bootstrap"))
    assert outline(Thread(None, frames)) == frames[::-1]


@pytest.mark.parametrize("filename", ["<frozen importlib._bootstrap>", "<string>"])
def test_frozen_or_exec_d_code_is_no_frame_of_the_program_s_own(filename):
    thread = Thread(None, ((filename, 241, "_call_with_frames_removed"), ("/job/train.py", 9, "<module>")))
    assert place(thread) == f"at train.py:9 in <module>, in _call_with_frames_removed ({filename})"


def test_a_frame_outline_left_the_line_of_is_said_without_one():
    thread = Thread(None, (("/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 2800, "all_reduce"),
                           ("/job/train.py", 31, "step")))
    assert [frame_text(f) for f in outline(thread)] == ["train.py:31 in step", "distributed_c10d.py in all_reduce"]


# ---------------------------------------------------------------------------- reading the files
def test_a_stack_file_is_read_from_a_url():
    fs = pytest.importorskip("fsspec", reason="URLs are read through fsspec (the test extra installs it)").filesystem("memory")
    fs.pipe("/frtrace-stacks-survivors/rank_2.txt", PYSPY_TEXT.encode())
    try:
        found, why = read_stacks("memory://frtrace-stacks-survivors/rank_2.txt")
    finally:
        fs.rm("/frtrace-stacks-survivors", recursive=True)
    assert why is None and found == parse(PYSPY_TEXT)


def test_a_file_that_is_no_stack_says_which_formats_are_read(tmp_path):
    (tmp_path / "rank_2.txt").write_text("hello\n")
    assert read_stacks(str(tmp_path / "rank_2.txt")) == (
        None, "not a stack frtrace reads (faulthandler's text, py-spy dump's text or --json)")


def test_notes_on_the_stack_files_are_said_in_rank_order():
    files = ((7, "/job/a/rank_7.txt"), (5, "/job/b/rank_5.txt"), (1, "/job/c/rank_1.txt"), (0, "/job/d/rank_0.txt"))
    stacks, notes = read_stack_files(files, {0, 1}, read=lambda path: ([Thread(None, (LIBRARY_WAIT,))], None))
    assert list(stacks) == [0, 1]
    assert notes == ["/job/b/rank_5.txt: the stacks of rank 5, which is not a rank of this dump set; not used",
                     "/job/a/rank_7.txt: the stacks of rank 7, which is not a rank of this dump set; not used"]
