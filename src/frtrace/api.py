"""A dump set as a whole: found in a folder or an archive, read, and its groups resolved."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TextIO

from .archive import is_archive, unpacked
from .discover import Discovery, find_dump_files
from .errors import UsageError, display_path, printable
from .groups import GroupTable, resolve_groups
from .loader import load_dumps
from .types import LoadResult


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use, not the machine's
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextmanager
def discovered(trace_dir: str, prefix: str | None) -> Iterator[Discovery]:
    """The dump files of a folder or an archive, for as long as the block reads them (an archive's
    members are copied out for it, and removed after)."""
    if is_archive(trace_dir):
        with unpacked(trace_dir, prefix) as discovery:
            yield discovery
    else:
        yield find_dump_files(trace_dir, prefix)


def read_set(trace_dir: str, prefix: str | None, err: TextIO, *, jobs: int = 1, progress: bool = False,
             ft_group_world_size: int | None = None) -> tuple[LoadResult, GroupTable]:
    """One dump set read and its groups resolved; skipped files are said on `err`."""
    with discovered(trace_dir, prefix) as discovery:
        return load_set(discovery, trace_dir, prefix, err, jobs=jobs, progress=progress,
                        ft_group_world_size=ft_group_world_size)


def load_set(discovery: Discovery, trace_dir: str, prefix: str | None, err: TextIO, *, jobs: int = 1, progress: bool = False,
             ft_group_world_size: int | None = None) -> tuple[LoadResult, GroupTable]:
    """The dumps discovered read and their groups resolved; skipped files are said on `err`."""
    if not discovery.files:
        hint = f" starting with {printable(prefix)!r}" if prefix else ""
        seen = (f" ({len(discovery.ignored)} file(s) ignored, e.g. {discovery.ignored[0].path}: {discovery.ignored[0].reason})"
                if discovery.ignored else "")
        raise UsageError(f"{display_path(trace_dir)}: no dump files{hint}: no file is named <prefix><rank> "
                         f"and starts like a pickle or JSON dump{seen}; check the directory and --prefix "
                         "(dumps written with TORCH_FR_DUMP_DYNAMIC_FILE_NAME=1 carry no rank: rename each to <prefix><rank>)")
    loaded = load_dumps(discovery, progress=progress and len(discovery.files) > 8, workers=jobs,
                        bound_by_configs=ft_group_world_size is None)
    for item in loaded.skipped:
        print(f"frtrace: skipped {item.path}: {item.reason}", file=err)
    if not loaded.dumps:
        raise UsageError(f"{display_path(trace_dir)}: none of the {len(loaded.ranks_named)} dump file(s) could be read; "
                         "see the messages above")
    if ft_group_world_size is None:
        ft_group_world_size = loaded.replica_size
        if ft_group_world_size is not None:
            loaded = replace(loaded, notes=(
                f"torchft replica groups: every rank's default group lists the replica-local ranks 0-{ft_group_world_size - 1}, "
                f"and ranks beyond {ft_group_world_size - 1} fill other replicas; each replica's ranks are mapped to global "
                f"ranks (replica = rank // {ft_group_world_size}); give --transform-ft --group-world-size N where "
                "the replica size differs", *loaded.notes))
    return loaded, resolve_groups(loaded.dumps, loaded.ranks_named, ft_group_world_size)
