"""Write output files whole or not at all: a temp file beside the target, then a rename."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from .errors import OutputError, display_path


def check_writable(path: str, what: str) -> None:
    """Fail early, before any analysis, when `path` cannot become a file."""
    if path == "-":
        return
    if os.path.isdir(path):
        raise OutputError(f"{display_path(path)}: is a directory; give a file name for the {what}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"{display_path(path)}: the folder {display_path(parent)} does not exist; create it or choose another path for the {what}")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{display_path(path)}: cannot write in {display_path(parent)}; choose another path for the {what}")


@contextmanager
def atomic_file(path: str, what: str, binary: bool = False) -> Iterator[IO]:
    """Yield a file to write; it replaces `path` only when the block finishes without error.

    "-" writes to standard output instead.
    """
    if path == "-":
        yield sys.stdout.buffer if binary else sys.stdout
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"{display_path(path)}: cannot write the {what} ({exc.strerror}); choose another path") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except OSError as exc:
        raise OutputError(f"{display_path(path)}: cannot write the {what} ({exc.strerror}); choose another path") from None
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def write_atomically(path: str, what: str, write: Callable[[IO], None], binary: bool = False) -> None:
    with atomic_file(path, what, binary) as handle:
        write(handle)


@contextmanager
def atomic_path(path: str, what: str) -> Iterator[str]:
    """Yield a temporary path beside `path` for a writer that wants a file name (SQLite); renamed
    over `path` only when the block finishes without error."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise OutputError(f"{display_path(path)}: cannot write the {what} ({exc.strerror}); choose another path") from None
    try:
        yield temp
        os.replace(temp, path)
    except OSError as exc:
        raise OutputError(f"{display_path(path)}: cannot write the {what} ({exc.strerror}); choose another path") from None
    finally:
        for leftover in (temp, temp + "-journal"):
            if os.path.exists(leftover):
                os.unlink(leftover)
