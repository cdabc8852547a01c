"""The runs of frtrace's other commands (compare, live, replay) from their options: one library call
each (compare_sets, live_snapshot, plan_replay), then what the command prints and its exit status.
cli.py parses their arguments."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TextIO

from .api import compare_sets, plan_replay
from .live.session import live_snapshot
from .errors import EXIT_CLEAN, EXIT_FOUND, display_path
from .terminal import printed


@dataclass(frozen=True, slots=True)
class LiveOptions:
    workers: tuple[str, ...] = ()
    store: str | None = None
    world: int | None = None
    out_dir: str | None = None
    timeout: float = 10.0
    interval: float = 3.0
    json_path: str | None = None
    jobs: int = 1


def run_live(options: LiveOptions, out: TextIO, err: TextIO) -> int:
    """Fetch every rank at once into the snapshot folder, keep it, analyse it as a dump set (live_snapshot)."""
    snap = live_snapshot(store=options.store, workers=options.workers, world=options.world, out_dir=options.out_dir,
                         timeout=options.timeout, interval=options.interval, jobs=options.jobs, log=err)
    if options.json_path == "-":
        printed(out, lambda: out.write(json.dumps(snap.as_dict(), indent=2) + "\n"))
    elif options.json_path:
        snap.write_json(options.json_path, log=err)
    if options.json_path != "-":
        printed(out, lambda: out.write(snap.text()))
    return EXIT_CLEAN if snap.verdict in ("clean", "progressing") else EXIT_FOUND


@dataclass(frozen=True, slots=True)
class CompareOptions:
    earlier: str
    later: str
    prefix: str | None = None
    timing: bool = False
    head: int = 20
    json_path: str | None = None
    jobs: int = 1


def run_compare(options: CompareOptions, out: TextIO, err: TextIO) -> int:
    """Compare two sets as the options say (api.compare_sets); 0 progressing, 1 stuck or partly stuck."""
    compared = compare_sets(options.earlier, options.later, prefix=options.prefix, jobs=options.jobs,
                            timing=options.timing, log=err)
    if options.json_path:
        compared.write_json(options.json_path, log=err)
    if options.json_path != "-":
        printed(out, lambda: out.write(compared.text(options.head)))
    return EXIT_CLEAN if compared.verdict == "progressing" else EXIT_FOUND


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    trace_dir: str
    out_dir: str
    mode: str = "as-recorded"
    prefix: str | None = None
    jobs: int = 1


def run_replay(options: ReplayOptions, out: TextIO, err: TextIO) -> int:
    """Write the replay plan into a new folder (api.plan_replay); the dumps are never written to."""
    replay = plan_replay(options.trace_dir, out_dir=options.out_dir, mode=options.mode, prefix=options.prefix,
                         jobs=options.jobs, log=err)
    print(f"wrote {display_path(options.out_dir)}/plan.json: {options.mode} replay of {replay.plan['world_size']} ranks, "
          f"{replay.ops} ops (recorded verdict: {replay.analysis.headline})", file=out)
    for note in replay.plan["notes"][:5]:
        print(f"  note: {note}", file=out)
    print(f"run it: python -m frtrace.replay {display_path(options.out_dir)} --backend gloo   "
          "(needs torch: pip install 'frtrace[replay]')", file=out)
    return EXIT_CLEAN
