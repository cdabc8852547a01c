"""Timing one frtrace run as a child process: wall time and the child's CPU time (user + system),
so that runs on a shared, noisy machine can be compared pair by pair."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_frtrace(*args: str) -> tuple[float, float]:
    """(wall s, CPU s) of `python -m frtrace ARGS`, its output discarded."""
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "frtrace", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, children_cpu() - cpu


ANSWER_FD = "FRTRACE_BENCH_ANSWER_FD"  # the descriptor a reporting script writes its JSON answer to


def reported_run(script: str, args: list[str], env: dict[str, str]) -> tuple[float, object]:
    """(wall s, what it answered) of `python -c SCRIPT ARGS`, whose script writes one JSON value to
    the descriptor named by $FRTRACE_BENCH_ANSWER_FD before it exits (its own getrusage, say:
    what only the process itself can see); its output discarded."""
    read, write = os.pipe()
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, pass_fds=(write,), env={**env, ANSWER_FD: str(write)})
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read()
    process.wait()
    return time.perf_counter() - start, json.loads(said)
