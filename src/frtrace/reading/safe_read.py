"""Reading one dump file's bytes and parsing them, safely: a dump is data and must never run code.

Pickles go through an unpickler that refuses every global (so no callable can be named, let alone
called) and every persistent id; files are opened non-blocking (a FIFO put in a dump's place must
not block) and checked to be regular files of bounded size before a byte is read; parsing runs
under a memory ceiling. Every failure is a DumpError naming the file and what to do.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import stat
from typing import Any

from .discover import HEAD_BYTES, sniff
from .remote import is_url, read_object
from ..errors import DumpError, LimitError, display_path, printable
from .limits import (MAX_DUMP_BYTES, MAX_ENTRIES, PARSE_CAP, MachineMemory, bounded_memory, memory_limit_text, open_file,
                     over_the_cap, parse_is_capped)



class _Refused(Exception):
    pass


class _DataOnlyUnpickler(pickle.Unpickler):
    """Builds only dicts, lists, tuples, strings, numbers, bools and None."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


class HugeInt:
    """Stands for a JSON integer too long to convert: the field holding it is dropped or refused."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"a {self.digits}-digit integer"


def _bounded_int(text: str) -> int | HugeInt:
    return int(text) if len(text) <= 20 else HugeInt(len(text))


def read_raw(path: str, shown: str | None = None, span: tuple[int, int] | None = None) -> tuple[Any, str]:
    """The raw object held by a dump file, and "pickle" or "json" (sniffed from the first bytes).

    The file is opened non-blocking (a FIFO that replaced it since discovery must not block; where
    frtrace mcp confines reading, through no link: limits.open_file), checked to be a regular file
    of bounded size, sniffed from its first bytes before the rest is read, and parsed under a
    memory ceiling (limits.bounded_memory). Errors name the file as `shown` where it is given (an
    archive member, read from the copy frtrace made of it, at `span`: (offset, length) in it)."""
    if is_url(path):  # a dump in a store, read by fsspec (reading.remote)
        return parse_raw(read_object(path), path)
    if shown is not None:
        try:
            return _read_raw(path, own=True, span=span)
        except DumpError as exc:
            raise DumpError(shown, exc.reason) from None
    return _read_raw(path, own=False)


def _read_raw(path: str, own: bool, span: tuple[int, int] | None = None) -> tuple[Any, str]:
    try:
        fd = open_file(path, own=own)
    except OSError as exc:
        raise DumpError(path, f"cannot open it ({exc.strerror}); check its permissions") from None
    if span is not None:  # a member's bytes in the copy of an archive frtrace made, bounded when it was made
        try:
            offset, length = span
            data = os.pread(fd, length, offset)
        except OSError as exc:
            raise DumpError(path, f"cannot read it ({exc.strerror})") from None
        finally:
            os.close(fd)
        return parse_raw(data, path)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DumpError(path, "not a regular file; not read")
        if info.st_size > MAX_DUMP_BYTES:
            raise DumpError(path, over_the_cap(MAX_DUMP_BYTES))
        head = os.pread(fd, HEAD_BYTES, 0)
        file_format = sniff(head)
        if head and file_format is None:
            raise DumpError(path, "its first bytes are not those of a pickle or JSON dump; leave it out")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            # in one read, into one buffer: the size fstat said and one byte more, to see a file
            # that grew since (asking for the cap would allocate, then give back, a GiB every time)
            expected = info.st_size + 1
            data = handle.read(expected)
            if len(data) >= expected:  # it grew: read on, to one byte past the cap
                data += handle.read(MAX_DUMP_BYTES + 1 - len(data))
    except OSError as exc:
        raise DumpError(path, f"cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(path, f"grew past {MAX_DUMP_BYTES >> 20} MiB while being read; not read")
    return parse_raw(data, path)


def parse_raw(data: bytes, path: str) -> tuple[Any, str]:
    """The raw object a dump's bytes hold, and "pickle" or "json"; `path` names it in errors.
    Parsed under a memory ceiling, by an unpickler that refuses every global."""
    if not data:
        raise DumpError(path, "empty file (the rank may have been killed before it dumped); leave it out or re-dump")
    file_format = sniff(data[:HEAD_BYTES])
    if file_format is None:
        raise DumpError(path, "its first bytes are not those of a pickle or JSON dump; leave it out")
    try:
        with bounded_memory(len(data)):
            if file_format == "json":
                return _parse_json(data, path), "json"
            return _DataOnlyUnpickler(io.BytesIO(data)).load(), "pickle"
    except _Refused as exc:
        raise DumpError(path, f"refused: the pickle asks for {printable(str(exc))[:120]}, and a dump holds only data; "
                              "do not trust this file") from None
    except MachineMemory as exc:
        raise LimitError(f"{display_path(path)}: parsing it ran out of memory under {memory_limit_text(exc.limit)}: the "
                         "machine's limit, not the file's fault; raise the limit (ulimit -v unlimited) or pass fewer "
                         "--jobs, and run again") from None
    except MemoryError:
        if parse_is_capped(len(data)):
            raise DumpError(path, f"parsing it needs more than the {PARSE_CAP >> 30} GiB of memory frtrace gives one dump: "
                                  f"it holds far more entries than a Flight Recorder keeps (2,000 by default; frtrace "
                                  f"reads up to {MAX_ENTRIES:,}); leave it out, or cut it down") from None
        raise DumpError(path, f"parsing it needs far more memory than a {len(data)}-byte dump can; "
                              "the file is damaged or hostile, leave it out") from None
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, UnicodeDecodeError, RecursionError) as exc:
        if isinstance(exc, EOFError) or "truncated" in str(exc):
            raise DumpError(path, "truncated pickle (the rank was likely killed mid-write); re-dump it or leave it out") from None
        raise DumpError(path, f"not a readable pickle or JSON dump ({short_reason(exc)}); leave it out") from None


def _parse_json(data: bytes, path: str) -> Any:
    try:  # json.loads reads bytes as UTF-8, 16 or 32 by their first bytes, and skips a UTF-8 BOM
        return json.loads(data)
    except ValueError as exc:
        first = exc
    except RecursionError:
        raise DumpError(path, "not valid JSON (nested too deeply); the file is damaged, leave it out") from None
    try:  # an integer too long to convert fails the fast parse: parse again, marking such numbers
        return json.loads(data, parse_int=_bounded_int)
    except (ValueError, RecursionError):
        raise DumpError(path, f"not valid JSON ({short_reason(first)}); the file is truncated or damaged, "
                              "re-dump the rank or leave it out") from None


def short_reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return printable(text[:120])
