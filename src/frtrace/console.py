"""The frtrace command's entry point: the CLI is imported under the same Ctrl-C handling as the run."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:  # Ctrl-C while the modules load
        print("frtrace: interrupted; no output file was written or changed", file=sys.stderr)
        return 130
    return cli_main(argv)
