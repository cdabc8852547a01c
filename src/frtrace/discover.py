"""Find the per-rank dump files in a directory, without opening anything that is not a file."""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from dataclasses import dataclass

from .errors import UsageError, display_path
from .types import SkippedFile

_FORMAT_SUFFIXES = {".json": "json", ".pkl": "pickle", ".pickle": "pickle"}
_RANK_AT_END = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True, slots=True)
class DumpFile:
    path: str
    rank: int
    prefix: str  # the name before the rank digits
    file_format: str  # "pickle" or "json": a guess from the name; the loader sniffs the bytes


@dataclass(frozen=True, slots=True)
class Discovery:
    files: tuple[DumpFile, ...]  # in rank order; per rank the preferred file first
    skipped: tuple[SkippedFile, ...]  # named like a dump but not a regular file
    ignored: tuple[str, ...] = ()  # names that are not dump names (README, expected.json)


def _kind_of(mode: int) -> str | None:
    """A human name for what is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (reading it would block forever)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _split_name(name: str, prefix: str | None) -> tuple[str, int, str] | None:
    stem, suffix = os.path.splitext(name)
    file_format = _FORMAT_SUFFIXES.get(suffix.lower())
    if file_format is None:
        stem, file_format = name, "pickle"
    if prefix is not None:
        if not stem.startswith(prefix) or not stem[len(prefix):].isdigit():
            return None
        return prefix, int(stem[len(prefix):]), file_format
    match = _RANK_AT_END.match(stem)
    if match is None:
        return None
    return match.group(1), int(match.group(2)), file_format


def find_dump_files(directory: str, prefix: str | None = None) -> Discovery:
    """List the dump files of `directory`: rank from the trailing digits of each name.

    `prefix` (a bare name or a path prefix such as /tmp/nccl_trace_rank_) restricts the names.
    Only regular files are returned; FIFOs, sockets, subdirectories and broken links are skipped
    with a reason. When a rank has several files, the one whose prefix most other dumps share
    comes first, then pickle before JSON, then the newest.
    """
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise UsageError(f"{directory}: cannot read the dump directory ({exc.strerror}); pass the directory that holds the per-rank dumps") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{directory}: not a directory; pass the directory that holds the per-rank dumps")
    if prefix is not None:
        prefix = os.path.basename(prefix)

    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise UsageError(f"{directory}: cannot list the directory ({exc.strerror}); check its permissions") from None

    candidates: list[tuple[DumpFile, float]] = []
    skipped: list[SkippedFile] = []
    ignored: list[str] = []
    for name in names:
        path = os.path.join(directory, name)
        printable = display_path(path)
        parts = _split_name(name, prefix)
        if parts is None:
            if not name.startswith("."):
                ignored.append(printable)
            continue
        try:
            info = os.stat(path)  # follows links; a loop or dangling link raises
        except OSError as exc:
            skipped.append(SkippedFile(printable, f"cannot stat it ({exc.strerror})"))
            continue
        kind = _kind_of(info.st_mode)
        if kind is not None:
            skipped.append(SkippedFile(printable, f"{kind}; not read"))
            continue
        file_prefix, rank, file_format = parts
        candidates.append((DumpFile(path, rank, file_prefix, file_format), info.st_mtime))

    prefix_counts = Counter(f.prefix for f, _ in candidates)
    candidates.sort(key=lambda c: (c[0].rank, -prefix_counts[c[0].prefix], c[0].file_format != "pickle", -c[1], c[0].path))
    return Discovery(tuple(f for f, _ in candidates), tuple(skipped), tuple(ignored))
