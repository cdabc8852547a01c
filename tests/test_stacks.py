"""Python stacks beside the dumps (issue 31): read in each format a program writes, matched to
ranks by name, never trusted beyond what they show, and a bad one costs only itself."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, make_dump, ops
from frtrace.cli import main
from frtrace.reading.discover import stack_rank
from frtrace.reading.stacks import main_thread, parse, place

DATA = Path(__file__).with_name("data")
FAULTHANDLER = ('Thread 0x00007f1 (most recent call first):\n'
                '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
                '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
                'Current thread 0x00007f0 (most recent call first):\n'
                '  File "/job/data.py", line 88 in load_batch\n'
                '  File "/job/train.py", line 12 in <module>\n')


@pytest.mark.parametrize("text", [FAULTHANDLER, (DATA / "pyspy_dump.txt").read_text(), (DATA / "pyspy_dump.json").read_text()],
                         ids=["faulthandler", "py-spy-text", "py-spy-json"])
def test_each_format_gives_the_training_thread_and_where_it_is(text):
    found = parse(text)
    assert found is not None and len(found) == 2
    thread = main_thread(found)
    assert place(thread) in ("at data.py:88 in load_batch", "at stuck.py:3 in load_batch")


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "[1, 2", '[{"frames": "no"}]', "Thread 0x1 (most recent call first):\n"])
def test_what_is_not_a_stack_is_none(text):
    assert parse(text) is None


@pytest.mark.parametrize("where,rank", [
    ("stacks/rank_3.txt", 3), ("stacks/12.json", 12), ("host-a/stacks/rank_5.txt", 5),
    ("nccl_trace_rank_7.stacks", 7), ("trace_host-node01_5.stacks.json", 5), ("nccl_trace_rank_2.stacks.txt", 2),
    ("nccl_trace_rank_3", None), ("stacks.txt", None), ("notes/rank_3.txt", None), ("stacks/README", None),
])
def test_a_stack_file_is_matched_to_its_rank_by_name(where, rank):
    assert stack_rank(where) == rank


def _set_with(tmp_path: Path, fixture: str, stacks: dict[str, bytes | str]) -> Path:
    folder = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, folder, ignore=shutil.ignore_patterns("*.stacks", "expected.json"))
    for name, content in stacks.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return folder


def _report(folder: Path, tmp_path: Path, capsys) -> tuple[int, dict, str]:
    code = main(["-d", str(folder), "--json", str(tmp_path / "r.json"), "-v"])
    said = capsys.readouterr()
    return code, json.loads((tmp_path / "r.json").read_text()), said.out + said.err


@pytest.mark.parametrize("name", ["stacks/rank_2.txt", "nccl_trace_rank_2.stacks", "stacks/2.json"])
def test_the_culprit_s_stack_says_where_it_is_in_any_layout(name, tmp_path, capsys):
    text = (DATA / "pyspy_dump.json").read_text() if name.endswith(".json") else FAULTHANDLER
    code, report, said = _report(_set_with(tmp_path, "skip_rank2", {name: text}), tmp_path, capsys)
    assert code == 1 and report["culprit_ranks"] == [2]
    assert report["causes"]["2"]["cause"] == "compute_or_data_stall"
    assert report["causes"]["2"]["said"].endswith("its Python stack: at " + ("stuck.py:3" if name.endswith(".json") else "data.py:88")
                                                  + " in load_batch")
    assert any(e.startswith("stacks: rank 2's Python stack") for e in report["evidence"])
    assert name.rsplit("/", 1)[-1] not in json.dumps(report["ignored_files"])  # its own, not a stray file


def test_a_stack_in_a_receive_names_what_the_dumps_left_open(tmp_path, capsys):
    """gloo records no receive: a rank in no op its dump shows, whose stack is in recv, waits."""
    stack = ('Thread 0x1 (most recent call first):\n'
             '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2523 in recv\n'
             '  File "/job/pipe.py", line 40 in recv_forward\n  File "/job/train.py", line 9 in <module>\n')
    code, report, _ = _report(_set_with(tmp_path, "skip_rank2", {"stacks/rank_2.txt": stack}), tmp_path, capsys)
    assert code == 1 and report["culprit_ranks"] == [2]  # the culprit stays: stacks name a cause, not a culprit
    assert report["causes"]["2"]["cause"] == "unknown" and report["causes"]["2"]["said"].startswith("waits in recv")


def test_a_stack_never_overrules_what_the_dumps_decided(tmp_path, capsys):
    """Rank 1 issued other ops (the dumps show it blocked in tp); its stack in a data loader
    changes nothing but adds where it is."""
    stack = ('Thread 0x1 (most recent call first):\n'
             '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 725 in __next__\n'
             '  File "/job/train.py", line 9 in <module>\n')
    _, report, _ = _report(_set_with(tmp_path, "skip_goes_on", {"stacks/rank_1.txt": stack}), tmp_path, capsys)
    assert report["causes"]["1"]["cause"] == "divergence" and "train.py:9" in report["causes"]["1"]["said"]


@pytest.mark.parametrize("bad,why", [
    (b"\x00\x01 not a stack", "not a stack frtrace reads"),
    (b"Thread 0x1 (most recent call first):\n" + b"x" * (4 << 20), "over 4 MiB"),
    (None, "not a regular file"),
])
def test_a_stack_file_that_cannot_serve_costs_only_itself(bad, why, tmp_path, capsys):
    folder = _set_with(tmp_path, "skip_rank2", {} if bad is None else {"stacks/rank_2.txt": bad})
    if bad is None:  # a FIFO: never waited on
        (folder / "stacks").mkdir()
        os.mkfifo(folder / "stacks" / "rank_2.txt")
    code, report, said = _report(folder, tmp_path, capsys)
    assert code == 1 and report["culprit_ranks"] == [2] and report["cause"] == "compute_or_data_stall"
    assert "rank_2.txt" in said and why in said and "rank 2's Python stack is not used" in said


def test_stacks_of_other_ranks_or_twice_one_rank_are_said_and_one_is_used(tmp_path, capsys):
    folder = _set_with(tmp_path, "skip_rank2", {"stacks/rank_9.txt": FAULTHANDLER, "stacks/rank_2.txt": FAULTHANDLER,
                                                "nccl_trace_rank_2.stacks": FAULTHANDLER.replace("data.py", "other.py")})
    _, report, said = _report(folder, tmp_path, capsys)
    assert "rank_9.txt: the stacks of rank 9, which is not a rank of this dump set" in said
    assert "a second stack file of rank 2" in said  # the first by path is used: the one beside the dump
    assert "other.py:88" in report["causes"]["2"]["said"] and "data.py" not in report["causes"]["2"]["said"]


def test_strings_from_a_stack_reach_the_terminal_escaped(tmp_path, capsys):
    stack = 'Thread 0x1 (most recent call first):\n  File "/job/\x1b[2Jevil.py", line 1 in f\x1b]0;x\x07\n'
    code, _, said = _report(_set_with(tmp_path, "skip_rank2", {"stacks/rank_2.txt": stack}), tmp_path, capsys)
    assert code == 1 and "\x1b" not in said and "\\x1b[2Jevil.py:1" in said


def test_stacks_in_a_folder_without_dumps_of_their_ranks_change_nothing(dump_dir, capsys):
    folder = dump_dir({r: make_dump(ops(3)) for r in range(2)})
    (folder / "stacks").mkdir()
    (folder / "stacks" / "rank_0.txt").write_text(FAULTHANDLER)
    assert main(["-d", str(folder)]) == 0 and capsys.readouterr().out.startswith("CLEAN")


def test_a_culprit_elsewhere_than_most_of_its_group_is_named_with_where_they_are(tmp_path, capsys):
    """Real stacks (faulthandler, 2.5 s into the hang): rank 7 skipped its dp all_reduce and waits
    in the world all_reduce, where its dp peers 1, 3, 5 wait in dp."""
    code, report, _ = _report(FIXTURES / "stacks_two_faults_hidden_ranks2_7", tmp_path, capsys)
    odd = [e for e in report["evidence"] if e.startswith("stacks: rank 7 is at")]
    assert code == 1 and len(odd) == 1, report["evidence"]
    mine, theirs = odd[0].split("; ")
    assert mine.endswith("in all_reduce (distributed_c10d.py)") and theirs.startswith("3 of its 3 dp peers are at")
    assert mine.split(" is ")[1] != theirs.split(" are ")[1]


def test_no_majority_of_peers_names_no_odd_one_out(tmp_path, capsys):
    stacks = {f"stacks/rank_{r}.txt": FAULTHANDLER.replace("data.py", f"part{r}.py") for r in range(4)}
    _, report, _ = _report(_set_with(tmp_path, "skip_rank2", stacks), tmp_path, capsys)
    assert not [e for e in report["evidence"] if " peers are " in e]


def _outermost_first(path: Path) -> list[tuple[str, str, str]]:
    """The first thread's frames of a faulthandler file (dump_traceback_later's one), outermost
    first: (file name, line, function)."""
    text = path.read_text().split("(most recent call first):", 1)[1]
    frames = re.findall(r'File "(?:[^"]*/)?([^"/]+)", line (\d+) in (\S+)', text.split("\n\n", 1)[0])
    return frames[::-1]


def test_the_first_frame_where_a_culprit_parts_from_its_peers_is_said_and_marked(tmp_path, capsys):
    """Real stacks: rank 2 loads data (torch's DataLoader) where ranks 0-1 wait in the world
    all_reduce; the first frame apart, outermost first, is read from the files themselves."""
    folder = FIXTURES / "stacks_data_stall_rank2"
    mine, theirs = (_outermost_first(folder / f"nccl_trace_rank_{r}.stacks") for r in (2, 0))
    at = next(i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b)
    apart = f"{mine[at][0]}:{mine[at][1]} in {mine[at][2]}"
    code, report, _ = _report(folder, tmp_path, capsys)
    odd = [e for e in report["evidence"] if e.startswith("stacks: rank 2") and "peers are at" in e]
    assert code == 1 and len(odd) == 1 and "2 of its 3 default_pg peers are at" in odd[0], report["evidence"]
    # said once: what the stack shows (the data loader) and where its peers are, on one line
    assert odd[0].startswith("stacks: rank 2's Python stack shows it in the data loader, at ")
    assert not [e for e in report["evidence"] if e.startswith("stacks: rank 2") and e not in odd], report["evidence"]
    assert odd[0].endswith(f"their stacks part at {apart} against {theirs[at][0]}:{theirs[at][1]} in {theirs[at][2]}")
    assert main(["-d", str(folder), "--html", str(tmp_path / "r.html")]) == 1
    page = (tmp_path / "r.html").read_text()
    table = page[page.index("<table class='stacks' id='now-2'>"):].split("</table>", 1)[0]
    marked = [row for row in table.split("<tr") if row.startswith(" class=diff")]
    assert len(marked) == 1 and f"&rarr; {apart}</td>" in marked[0], table


def test_waiters_in_another_op_are_no_odd_ones_out(tmp_path, capsys):
    """Real stacks, 8 ranks: ranks 1, 3, 5 wait in dp while four wait in the world all_reduce;
    three against four is no odd one out (ranks 2 and 7, the culprits, are)."""
    code, report, _ = _report(FIXTURES / "stacks_two_faults_hidden_ranks2_7", tmp_path, capsys)
    named = sorted(int(e.split()[2]) for e in report["evidence"] if re.match(r"stacks: rank \d+ is ", e))
    assert code == 1 and named == [2, 7], report["evidence"]


def test_every_rank_apart_from_most_of_its_group_is_named_culprit_or_not(tmp_path, capsys):
    """Two of eight ranks in a data loader, the other six in an all_reduce: both are named, rank
    5 though the dumps name no culprit there, and the culprit's table is in the page."""
    loader = ('Current thread 0x1 (most recent call first):\n'
              '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 725 in __next__\n'
              '  File "/job/train.py", line 30 in step\n  File "/job/train.py", line 9 in <module>\n')
    waiting = ('Current thread 0x1 (most recent call first):\n'
               '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2800 in all_reduce\n'
               '  File "/job/train.py", line 31 in step\n  File "/job/train.py", line 9 in <module>\n')
    stacks = {f"stacks/rank_{r}.txt": loader if r in (2, 5) else waiting for r in range(8)}
    folder = _set_with(tmp_path, "stacks_two_faults_hidden_ranks2_7", stacks)
    _, report, _ = _report(folder, tmp_path, capsys)
    named = {int(e.split()[2].removesuffix("'s")): e for e in report["evidence"]
             if re.match(r"stacks: rank \d+", e) and "peers are" in e}
    assert sorted(named) == [2, 5] and 5 not in report["culprit_ranks"], report["evidence"]
    assert named[5].startswith("stacks: rank 5 is at train.py:30 in step, in __next__ (dataloader.py); ")
    assert "peers are at train.py:31 in step, in all_reduce (distributed_c10d.py)" in named[5]
    assert "their stacks part" not in named[5]  # they part at the rank's own innermost line, said already


def test_py_spy_stacks_of_real_stuck_ranks_say_where_each_is_and_never_pick_the_culprit(tmp_path, capsys):
    """py-spy read each rank of a real gloo job from outside while it hung: rank 3 skipped a tp
    all_reduce and sits in the world one with ranks 0-1, so by stacks rank 2 (in tp) is the odd
    one out; the dumps name rank 3, and its stack says where it is."""
    folder = FIXTURES / "pyspy_tp_skip_rank3"
    text = (folder / "stacks" / "rank_3.txt").read_text()
    assert text.startswith("Process ") and 'Thread ' in text  # py-spy dump's text, as it wrote it
    line, function = next((m.group(2), m.group(1)) for m in re.finditer(r"^\s+(\S+) \(generate_gloo\.py:(\d+)\)$", text, re.M))
    code, report, _ = _report(folder, tmp_path, capsys)
    assert code == 1 and report["culprit_ranks"] == [3] and report["cause"] == "divergence"
    assert f"its Python stack: at generate_gloo.py:{line} in {function}, in all_reduce" in report["causes"]["3"]["said"]
    assert [e for e in report["evidence"] if re.match(r"stacks: rank \d+ is ", e)][0].startswith("stacks: rank 2 is at")
