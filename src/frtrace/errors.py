"""The one exception family of frtrace; the CLI turns each into a single stderr line."""

from __future__ import annotations

import os


def printable(text: str) -> str:
    """`text` with every character a terminal could act on escaped: control characters (ESC, CR,
    newline, BEL), bidi overrides, lone surrogates. Strings from dumps and file names pass here
    before they reach a terminal, a message or a report; printable text comes back unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def display_path(path: str) -> str:
    """The path as printable text, even when the name is not valid UTF-8 or holds a newline."""
    return printable(os.fsencode(path).decode("utf-8", "backslashreplace"))


EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3  # what every command exits with


class FrtraceError(Exception):
    """Base class: the message names the file or rank and says what to do."""

    exit_code = 2


class UsageError(FrtraceError):
    """The arguments cannot work together or name something that is not there."""


class DumpError(FrtraceError):
    """One dump file cannot be used; the analysis goes on without it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{display_path(path)}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self):  # crosses process boundaries from loader workers
        return (type(self), (self.path, self.reason))


class OutputError(FrtraceError):
    """An output file cannot be written."""


class LimitError(FrtraceError):
    """A limit of this machine or process (memory, open files, processes) stops the run: never
    blamed on a dump. The message names the limit and what to raise. Crosses from the loader's
    worker processes."""

    def __reduce__(self):
        return (type(self), self.args)


class InternalError(Exception):
    """A bug of frtrace's met while reading one file: never blamed on the rank. Crosses from
    the loader's worker processes with the traceback as text."""

    def __init__(self, where: str, summary: str, traceback_text: str) -> None:
        super().__init__(f"{where}: {summary}")
        self.where = where
        self.summary = summary
        self.traceback_text = traceback_text

    def __reduce__(self):
        return (type(self), (self.where, self.summary, self.traceback_text))
