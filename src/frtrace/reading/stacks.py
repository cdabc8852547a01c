"""Where a rank's Python program is, from a stack file written beside its dump or by the debug
server: faulthandler's text (`dump_traceback`, `faulthandler.dump_traceback`: a `Thread 0x...
(most recent call first):` line per thread, then `  File "path", line N in func`, innermost
first), or py-spy's `dump` (text: `Thread N (idle): "MainThread"` then `    func (file.py:N)`;
`--json`: a list of threads with their frames).

A stack file is data: read under a size cap, parsed by patterns, never evaluated; what it says
reaches a terminal or a page only through `printable` or the page's escaping.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import display_path, printable
from .limits import read_small
from .remote import is_url, read_small_object

MAX_STACK_BYTES = 4 << 20  # a few hundred threads' stacks are well under this
MAX_LINES = 100_000
MAX_THREADS = 4096

_FAULTHANDLER_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.{1,4096})", line (\d{1,9}) in (\S{1,4096})\s*$')
_PYSPY_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]{1,20} \((?:idle|active|gil)[^)]{0,40}\)(?:: "(.{0,200})")?\s*$')
_PYSPY_FRAME = re.compile(r"^\s{4}(\S.{0,4095}?) \((.{1,4096}?):(\d{1,9})\)\s*$")
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3")  # torch, the rest of a venv, the standard library
# py-spy's text names files by their base name only: the library files a training thread waits in
_LIBRARY_NAMES = frozenset({"distributed_c10d.py", "c10d_logger.py", "threading.py", "selectors.py", "queue.py",
                            "socket.py", "subprocess.py", "_ops.py", "module.py"})

Frame = tuple[str, int, str]  # (file, line, function)


@dataclass(frozen=True, slots=True)
class Thread:
    """One thread's frames, innermost first; its name where the format gives one."""

    name: str | None
    frames: tuple[Frame, ...]


def parse(data: bytes | str) -> list[Thread] | None:
    """The threads of a stack file in any of the three formats, in its order; None where it is
    none of them (no thread with a frame)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    if text.lstrip().startswith("["):
        return _pyspy_json(text)
    found: list[Thread] = []
    name: str | None = None
    frames: list[Frame] | None = None
    for line in text.splitlines()[:MAX_LINES]:
        if header := _FAULTHANDLER_THREAD.match(line) or _PYSPY_THREAD.match(line):
            if frames is not None:
                found.append(Thread(name, tuple(frames)))
            if len(found) >= MAX_THREADS:
                frames = None
                break
            name, frames = (header.group(1) if header.re is _PYSPY_THREAD else None), []  # faulthandler names none
        elif frames is not None and (frame := _FAULTHANDLER_FRAME.match(line)):
            frames.append((frame.group(1), int(frame.group(2)), frame.group(3)))
        elif frames is not None and (frame := _PYSPY_FRAME.match(line)):
            frames.append((frame.group(2), int(frame.group(3)), frame.group(1)))
    if frames is not None:
        found.append(Thread(name, tuple(frames)))
    return found if any(t.frames for t in found) else None


def _pyspy_json(text: str) -> list[Thread] | None:
    try:
        threads = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(threads, list):
        return None
    found = []
    for thread in threads[:MAX_THREADS]:
        frames = thread.get("frames") if isinstance(thread, dict) else None
        if not isinstance(frames, list):
            continue
        kept = tuple((f["filename"], f["line"], f["name"]) for f in frames
                     if isinstance(f, dict) and isinstance(f.get("filename"), str) and type(f.get("line")) is int
                     and isinstance(f.get("name"), str))
        name = thread.get("thread_name")
        found.append(Thread(name if isinstance(name, str) else None, kept))
    return found if any(t.frames for t in found) else None


def _own(filename: str) -> bool:
    return (not any(part in filename for part in _LIBRARY) and not filename.startswith("<")
            and filename.rsplit("/", 1)[-1] not in _LIBRARY_NAMES)


def main_thread(found: list[Thread]) -> Thread | None:
    """The training thread: the one py-spy names MainThread, else the one that runs the script
    (`<module>` outermost), else the first with a frame of the program's own."""
    named = [t for t in found if t.name == "MainThread" and t.frames]
    if named:
        return named[0]
    script = [t for t in found if t.frames and t.frames[-1][2] == "<module>"]
    if script:
        return script[0]
    return next((t for t in found if any(_own(f[0]) for f in t.frames)), None)


def place(thread: Thread) -> str | None:
    """'at train.py:88 in load_batch', with the library call it waits in where the innermost frame
    is one ('..., in all_reduce (distributed_c10d.py)'); None where the thread has no frame of the
    program's own."""
    own = next((f for f in thread.frames if _own(f[0])), None)
    if own is None:
        return None
    filename, line, function = own
    said = f"at {printable(_short(filename))}:{line} in {printable(function)}"
    inner = thread.frames[0]
    if inner is not own:
        said += f", in {printable(inner[2])} ({printable(_short(inner[0]))})"
    return said


def outline(thread: Thread) -> tuple[Frame, ...]:
    """The thread's frames as two ranks' stacks are compared, outermost first: down to the
    program's innermost own frame, then the library call it waits in (the innermost frame) with
    no line, as `place` names it: where a library's wait loop polls is no difference between
    two ranks. The whole stack where it has no frame of the program's own."""
    own = next((i for i, f in enumerate(thread.frames) if _own(f[0])), None)
    if own is None:
        return thread.frames[::-1]
    kept = thread.frames[own:][::-1]
    if own:
        filename, _, function = thread.frames[0]
        kept += ((filename, 0, function),)
    return kept


def first_apart(one: tuple[Frame, ...], other: tuple[Frame, ...]) -> int:
    """Where two outlines part: the index of their first differing frame, outermost first;
    the shorter one's length where it is the start of the other, and the length where they are
    the same."""
    return next((i for i, (a, b) in enumerate(zip(one, other)) if a != b), min(len(one), len(other)))


def frame_text(frame: Frame) -> str:
    """'train.py:88 in load_batch' ('distributed_c10d.py in all_reduce' where `outline` left out
    the line), printable."""
    filename, line, function = frame
    return f"{printable(_short(filename))}{f':{line}' if line else ''} in {printable(function)}"


def in_torch_distributed(thread: Thread) -> str | None:
    """The torch.distributed call the thread waits in ('recv', 'all_reduce'), where its innermost
    frames, before any of the program's own, hold one; None where it is elsewhere."""
    for filename, _, function in thread.frames:
        if _own(filename):
            return None
        if _short(filename) == "distributed_c10d.py":
            return function
    return None


def in_data_loader(thread: Thread) -> bool:
    """Whether the thread is inside torch's data loader (a frame of torch/utils/data): fetching a
    batch, in the loader's own code or in the dataset's it calls."""
    return any("torch/utils/data/" in filename for filename, _, _ in thread.frames)


def where(text: str) -> str | None:
    """Where the program is, from a stack file's text: where_in its threads."""
    return where_in(parse(text) or [])


def where_in(found: list[Thread]) -> str | None:
    """Where the program is: the place of its main thread; None where no thread shows a frame of
    its own."""
    thread = main_thread(found)
    return place(thread) if thread else None


def _short(filename: str) -> str:
    return filename.rsplit("/", 1)[-1]


def read_stacks(path: str) -> tuple[list[Thread] | None, str | None]:
    """(threads, None) from a stack file, or (None, why it cannot serve): limits.read_small, up to
    MAX_STACK_BYTES."""
    try:
        raw = read_small_object(path, MAX_STACK_BYTES) if is_url(path) else read_small(path, MAX_STACK_BYTES)
    except OSError as exc:
        return None, f"cannot read it ({exc.strerror})"
    except ValueError as exc:
        return None, str(exc)
    found = parse(raw)
    if found is None:
        return None, "not a stack frtrace reads (faulthandler's text, py-spy dump's text or --json)"
    return found, None


def read_stack_files(files: tuple[tuple[int, str], ...], ranks: set[int],
                     read: Callable[[str], tuple[list[Thread] | None, str | None]] = read_stacks,
                     ) -> tuple[dict[int, list[Thread]], list[str]]:
    """The stack files of the job's ranks read ({rank: threads}), and a note for each file that
    cannot serve, or that is a second one for its rank: a bad file costs that file only. `read`:
    read_stacks, or what gives its answer for files read elsewhere (a Ray node's own disk)."""
    stacks: dict[int, list[Thread]] = {}
    used: dict[int, str] = {}
    notes = []
    for rank, path in sorted(files, key=lambda item: (item[0], item[1])):
        if rank not in ranks:
            notes.append(f"{display_path(path)}: the stacks of rank {rank}, which is not a rank of this dump set; not used")
        elif rank in used:
            notes.append(f"{display_path(path)}: a second stack file of rank {rank}; {display_path(used[rank])} is used")
        else:
            found, why = read(path)
            if found is None:
                notes.append(f"{display_path(path)}: {why}; rank {rank}'s Python stack is not used")
            else:
                stacks[rank], used[rank] = found, path
    return stacks, notes
