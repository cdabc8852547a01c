"""Timing one frtrace run as a child process: wall time and the child's CPU time (user + system),
so that runs on a shared, noisy machine can be compared pair by pair."""

from __future__ import annotations

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
