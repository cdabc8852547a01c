"""What the commands print through: text escaped on its way to a terminal, and standard output
that a reader may close (`| head`) or that may fill."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from .errors import OutputError


# C0 controls but newline and tab, DEL and C1 controls: what a terminal acts on. Dump strings are
# escaped when loaded; this is the last guard on everything the report prints.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)] if c not in (0x0a, 0x09)}


class TerminalSafe:
    """A text stream that escapes control characters on their way to a terminal, and what its
    encoding cannot hold (PYTHONIOENCODING=ascii, a latin-1 terminal) as backslash escapes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        text = text.translate(_CONTROLS)
        try:
            return self.stream.write(text)
        except UnicodeEncodeError:  # raised before anything is written
            encoding = getattr(self.stream, "encoding", None) or "ascii"
            return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        self.stream.flush()


def printed(out: TextIO, render) -> None:
    """Run `render` into standard output and flush it. A reader that went away (`| head`) ends the
    printing quietly, and the verdict still decides the status; a full or failing stdout is an
    OutputError."""
    try:
        render()
        out.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as exc:
        silence_stdout()
        raise OutputError(f"cannot write the report to standard output ({exc.strerror or exc}); "
                          "nothing more was printed") from None


def silence_stdout() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor behind it (a test's stand-in)
        pass
