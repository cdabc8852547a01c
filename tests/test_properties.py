"""Property-based: generated dump sets, damaged at random, never crash frtrace; names never matter."""

from __future__ import annotations

import json
import pickle
import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import entry, examples, make_dump
from frtrace.cli import main

OPS = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "all_to_all", "gather", "frobnicate"]


@st.composite
def dump_sets(draw):
    """Raw dumps of a small job: a world group, with one optional fault."""
    return draw(jobs())[0]


@st.composite
def jobs(draw):
    """(raw dumps, the fault injected, the rank it was injected on, the ops run) of a small job."""
    world = draw(st.integers(2, 6))
    steps = draw(st.integers(1, 8))
    program = [draw(st.sampled_from(OPS)) for _ in range(steps)]
    backend = draw(st.sampled_from(["gloo", "nccl"]))
    fault = draw(st.sampled_from(["none", "skip", "op", "size", "dtype", "wrap"]))
    culprit = draw(st.integers(0, world - 1))
    dumps = {}
    for rank in range(world):
        entries = []
        for seq, op in enumerate(program, start=1):
            sizes, out = ((4,),), None
            if op == "all_gather":
                sizes, out = ((2,),), ((2 * world,),)
            elif op == "reduce_scatter":
                sizes, out = ((2 * world,),), ((2,),)
            elif op == "barrier":
                sizes = ()
            is_last = seq == len(program)
            if rank == culprit and is_last:
                if fault == "skip":
                    continue
                if fault == "op":
                    op = "broadcast" if op != "broadcast" else "all_reduce"
                    sizes, out = ((4,),), None
                if fault == "size":
                    sizes, out = ((5,),), ((5,),)
                if fault == "dtype":
                    entries.append(entry(seq=seq, op=op, sizes=sizes, out=out, backend=backend, dtype="Half"))
                    continue
            state = "completed" if backend == "nccl" and not is_last else "scheduled"
            entries.append(entry(seq=seq, op=op, sizes=sizes, out=out, backend=backend, state=state))
        first = 0
        if fault == "wrap" and rank == culprit and len(entries) > 2:
            entries, first = entries[2:], 10
        dumps[rank] = make_dump(entries, first_record=first)
    return dumps, fault, culprit, program


def _damage(data: bytes, how: str, rnd: random.Random) -> bytes:
    if not data:
        return data
    if how == "truncate":
        return data[: rnd.randrange(len(data))]
    if how == "flip":
        i = rnd.randrange(len(data))
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    if how == "garbage":
        return bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 200)))
    return b""


def _break_entry(raw: dict, rnd: random.Random) -> dict:
    raw = json.loads(json.dumps(raw))
    if raw["entries"]:
        victim = rnd.choice(raw["entries"])
        key = rnd.choice(sorted(victim))
        victim[key] = rnd.choice([None, "x", [["1"]], -1, {}, 3.5, True])
    return raw


def _write_set(work: Path, dumps: dict, prefix: str) -> Path:
    """Hypothesis runs many examples per test, so each gets its own directory (not tmp_path)."""
    directory = work / "dumps"
    directory.mkdir()
    for rank, raw in dumps.items():
        (directory / f"{prefix}{rank}").write_bytes(pickle.dumps(raw, protocol=2))
    return directory


def _run(directory: Path) -> tuple[int, dict | None]:
    report = directory.parent / "report.json"
    if report.exists():
        report.unlink()
    code = main(["-d", str(directory), "--json", str(report)])
    return code, (json.loads(report.read_text()) if report.exists() else None)


@settings(max_examples=examples(60))
@given(dumps=dump_sets(), seed=st.integers(0, 2**32 - 1),
       damage=st.lists(st.sampled_from(["truncate", "flip", "garbage", "empty", "entry", "json"]), max_size=3))
def test_damaged_dump_sets_never_raise(dumps, seed, damage, capsys):
    rnd = random.Random(seed)
    work = Path(tempfile.mkdtemp())
    try:
        directory = _write_set(work, dumps, "trace_rank_")
        for how in damage:
            victim = directory / f"trace_rank_{rnd.choice(sorted(dumps))}"
            if not victim.exists():
                continue
            if how == "entry":
                victim.write_bytes(pickle.dumps(_break_entry(dumps[int(victim.name.rsplit('_', 1)[1])], rnd)))
            elif how == "json":
                victim.unlink()
                victim.with_name(victim.name + ".json").write_text(json.dumps(dumps[int(victim.name.rsplit('_', 1)[1])])[: rnd.randrange(1, 400)])
            else:
                victim.write_bytes(_damage(victim.read_bytes(), how, rnd))

        code, report = _run(directory)

        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        assert code in (0, 1, 2)
        if code != 2:
            assert report["verdict"] in ("clean", "desync", "stuck", "inconclusive")
            assert set(report["culprit_ranks"]) <= set(range(len(dumps)))
    finally:
        shutil.rmtree(work)


@settings(max_examples=examples(40))
@given(dumps=dump_sets(), seed=st.integers(0, 2**32 - 1))
def test_verdict_does_not_depend_on_file_names_or_format(dumps, seed, capsys):
    rnd = random.Random(seed)
    work = Path(tempfile.mkdtemp())
    try:
        plain, renamed = work / "a" / "dumps", work / "b" / "dumps"
        plain.mkdir(parents=True)
        renamed.mkdir(parents=True)
        for rank, raw in dumps.items():
            (plain / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(raw, protocol=2))
            host = f"trace_host-{rnd.choice('abcxyz')}{rnd.randrange(100)}_{rank}"
            if rnd.random() < 0.5:
                (renamed / f"{host}.json").write_text(json.dumps(raw))
            else:
                (renamed / host).write_bytes(pickle.dumps(raw, protocol=2))

        first, second = _run(plain), _run(renamed)
        capsys.readouterr()
        assert first[0] == second[0]
        keys = ("verdict", "culprit_ranks", "headline", "ranks_loaded", "ranks_missing")
        assert {k: first[1][k] for k in keys} == {k: second[1][k] for k in keys}
    finally:
        shutil.rmtree(work)


# the faults that break a rule of the op they hit (the others, a size change of a barrier say,
# break none, and a healthy run could have written them)
_FOUND_BY_RULES = {
    "skip": set(OPS), "op": set(OPS), "dtype": set(OPS) - {"barrier"},
    "size": {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "gather"},
}


@settings(max_examples=examples(60))
@given(job=jobs())
def test_injected_faults_are_found_and_healthy_sets_are_clean(job, capsys):
    """The generator's own truth: a fault that breaks a rule names its rank (a pair may instead be
    inconclusive: two members cannot outvote each other); no fault is never a desync."""
    dumps, fault, culprit, program = job
    work = Path(tempfile.mkdtemp())
    try:
        code, report = _run(_write_set(work, dumps, "nccl_trace_rank_"))
        capsys.readouterr()
        if fault in ("none", "wrap"):
            assert report["verdict"] in ("clean", "stuck"), report["headline"]  # stuck: every member waits, below PyTorch
        elif program[-1] in _FOUND_BY_RULES[fault]:
            if len(dumps) == 2 and report["verdict"] == "inconclusive":
                return
            assert (report["verdict"], report["culprit_ranks"]) == ("desync", [culprit]), (fault, program, report["headline"])
        elif report["verdict"] == "desync":  # nothing a rule can see: never anyone else blamed
            assert set(report["culprit_ranks"]) <= {culprit}, report["headline"]
    finally:
        shutil.rmtree(work)
