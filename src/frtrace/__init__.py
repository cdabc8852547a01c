"""frtrace: find the rank that desynced a hung PyTorch job from its Flight Recorder dumps.

    import frtrace

    result = frtrace.analyze_dumps("dumps/")          # a folder, or a .tar, .tar.gz or .zip
    print(result.verdict, result.culprit_ranks)       # "desync" (2,)
    print(result.headline)
    result.write_html("hang.html")                    # whole or not at all, never over a dump

`__all__` is the contract. Nothing here prints or exits; errors are FrtraceError subclasses. The
names are imported on first use, so `import frtrace` stays cheap (the loader's worker processes
import this package too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["Compared", "DumpError", "FrtraceError", "LiveSnapshot", "OutputError", "ReplayPlan", "Result", "UsageError",
           "__version__", "analyze_dumps", "compare_sets", "live_snapshot", "plan_replay"]

if TYPE_CHECKING:
    from .api import Compared, ReplayPlan, Result, analyze_dumps, compare_sets, plan_replay
    from .errors import DumpError, FrtraceError, OutputError, UsageError
    from .live.session import LiveSnapshot, live_snapshot

_HOMES = {"analyze_dumps": "api", "Result": "api", "compare_sets": "api", "Compared": "api",
          "plan_replay": "api", "ReplayPlan": "api", "live_snapshot": "live.session", "LiveSnapshot": "live.session", "FrtraceError": "errors", "UsageError": "errors",
          "DumpError": "errors", "OutputError": "errors"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'frtrace' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
