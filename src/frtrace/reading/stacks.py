"""Where a rank's Python program is, from the debug server's `dump_traceback` answer
(faulthandler's text: a `Thread 0x... (most recent call first):` line per thread, then its frames,
`  File "path", line N in func`, innermost first)."""

from __future__ import annotations

import re

from ..errors import printable

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+")
_FRAME = re.compile(r'^\s+File "(.{1,4096})", line (\d{1,9}) in (\S{1,4096})\s*$')
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3")  # torch, the rest of a venv, the standard library


def threads(text: str, max_lines: int = 100_000) -> list[list[tuple[str, int, str]]]:
    """Each thread's frames (file, line, function), innermost first, in the order the text has them."""
    found: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines()[:max_lines]:
        if _THREAD.match(line):
            found.append([])
        elif found and (frame := _FRAME.match(line)):
            found[-1].append((frame.group(1), int(frame.group(2)), frame.group(3)))
    return found


def _own(filename: str) -> bool:
    return not any(part in filename for part in _LIBRARY) and not filename.startswith("<")


def where(text: str) -> str | None:
    """'at train.py:88 in load_batch', with the library call it waits in where the innermost frame
    is one ('..., in all_reduce (distributed_c10d.py)'): the program's own innermost frame, on the
    first thread that has one (the training thread; the server's own thread has no Python frame).
    None where no thread shows one."""
    for frames in threads(text):
        own = next((f for f in frames if _own(f[0])), None)
        if own is None:
            continue
        filename, line, function = own
        said = f"at {printable(_short(filename))}:{line} in {printable(function)}"
        inner = frames[0]
        if inner is not own:
            said += f", in {printable(inner[2])} ({printable(_short(inner[0]))})"
        return said
    return None


def _short(filename: str) -> str:
    return filename.rsplit("/", 1)[-1]
