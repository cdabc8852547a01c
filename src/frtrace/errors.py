"""The one exception family of frtrace; the CLI turns each into a single stderr line."""

from __future__ import annotations

import os


def display_path(path: str) -> str:
    """The path as printable text, even when the name is not valid UTF-8."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


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
