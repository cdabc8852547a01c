"""The runs of frtrace's other commands (compare, live, replay) from their options: what each reads,
writes and prints, and its exit status. cli.py parses their arguments; frtrace mcp runs them too."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TextIO

from . import __version__
from .api import analyze_dumps, compare_sets, plan_replay, requested_output
from .errors import EXIT_CLEAN, EXIT_FOUND, UsageError, display_path, printable
from .matcher import format_ranks
from .outputs.commit import Outputs, plan_outputs
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
    """Fetch every rank at once into the snapshot folder, keep it, analyse it as a dump set."""
    from .live.fetch import Answer, SnapshotFolder, store_workers, worker_url
    from .reading.discover import SNAPSHOT_OTHER_RECORDER
    from .reading.stacks import where_in

    out_dir = options.out_dir or time.strftime("frtrace-live-%Y%m%d-%H%M%S")
    with SnapshotFolder(out_dir) as snapshot:  # refused where it exists, before any rank is asked
        if options.store:
            urls, missing = store_workers(options.store, options.world, options.timeout)
        else:
            urls, missing = {rank: worker_url(text) for rank, text in enumerate(options.workers)}, {}
        _one_worker_each(urls)
        absent = [Answer(rank, "", None, None, why, 0.0) for rank, why in missing.items()]
        for name in ("a", "b") if options.interval else ("",):
            if name == "b":
                time.sleep(options.interval)
            answers = snapshot.take(name, urls, options.timeout, absent)
            if all(a.error is not None for a in answers):  # nothing to keep: said, nothing written
                reasons = sorted({a.error for a in answers if a.error})
                raise UsageError(f"no rank answered ({'; '.join(reasons[:3])}): check the worker addresses and that the "
                                 "job runs with the debug server on; nothing was written")
        snapshot.keep()
    later = os.path.join(out_dir, "b") if options.interval else out_dir
    silent = [a for a in answers if a.error is not None]
    for answer in silent:
        if answer.refused:
            print(f"frtrace: rank {answer.rank}'s answer was not kept: {answer.error}", file=err)
        elif answer.url and answer.error == "no answer in time":
            print(f"frtrace: rank {answer.rank} ({answer.url}) did not answer within {options.timeout:g} s; "
                  "its process may be gone or its host unreachable", file=err)
        elif answer.url:
            print(f"frtrace: rank {answer.rank} ({answer.url}) did not answer: {answer.error}", file=err)
        else:
            print(f"frtrace: rank {answer.rank}: {answer.error}", file=err)
    for answer in answers:
        if answer.stacks_error:
            print(f"frtrace: rank {answer.rank}'s stacks were not kept ({answer.stacks_error}); its recorder was", file=err)
    kept = (f"two snapshots {options.interval:g} s apart kept in {display_path(out_dir)} ({len(answers) - len(silent)} of "
            f"{len(answers)} ranks; frtrace -d {display_path(later)} reads the later, frtrace compare "
            f"{display_path(os.path.join(out_dir, 'a'))} {display_path(later)} compares them)" if options.interval else
            f"snapshot of {len(answers) - len(silent)} of {len(answers)} ranks kept in {display_path(out_dir)} "
            f"(frtrace -d {display_path(out_dir)} reads it again)")
    print(f"frtrace: {kept}", file=err)
    both = [a.rank for a in answers if a.other_file is not None]
    if both:
        print(f"frtrace: {'ranks' if len(both) > 1 else 'rank'} {format_ranks(both)}: the dumps are the NCCL recorders; the backend-neutral ones (gloo's ops) held "
              f"entries too, kept in {display_path(os.path.join(later, SNAPSHOT_OTHER_RECORDER))} (frtrace -d reads it)",
              file=err)
    result = analyze_dumps(later, jobs=options.jobs)  # the manifest says who did not answer (reading/discover.py)
    moved = _moved(analyze_dumps(os.path.join(out_dir, "a"), jobs=options.jobs), result) if options.interval else None
    stacks = result.loaded.stacks  # the snapshot's stacks/ as the analysis read them (reading/stacks.py)
    gone = {a.rank for a in silent}
    places = {rank: at for rank in result.culprit_ranks
              if (at := "did not answer" if rank in gone else where_in(stacks[rank]) if rank in stacks else None)}
    now = [f"rank {rank} {place}" for rank, place in places.items()]
    if options.json_path:
        _live_json(options.json_path, result, out, err, out_dir, answers, places, moved)
    if moved is not None and moved.verdict == "progressing":
        if options.json_path != "-":
            printed(out, lambda: out.write(f"{moved.headline}\n"))
        return EXIT_CLEAN
    if options.json_path != "-":
        lines = result.text().split("\n")
        head = 2 if result.analysis.causes else 1  # the verdict, and its Cause line where it has one
        said = [f"Now (the ranks' Python stacks): {'; '.join(now)}"] if now else []
        said += [f"Between the two snapshots: {moved.headline}"] if moved is not None else []
        printed(out, lambda: out.write("\n".join(lines[:head] + said + lines[head:])))
    return EXIT_CLEAN if result.verdict == "clean" and moved is None else EXIT_FOUND


def _one_worker_each(urls: dict[int, str]) -> None:
    """A UsageError where one worker address is given for two ranks: its answers would stand for both."""
    seen: dict[str, int] = {}
    for rank, url in sorted(urls.items()):
        if url in seen:
            raise UsageError(f"{printable(url)} is given for rank {seen[url]} and rank {rank}: one worker answers for one "
                             "rank; give each rank's own address, in rank order")
        seen[url] = rank


def _live_json(path: str, result, out: TextIO, err: TextIO, out_dir: str, answers, places: dict[int, str], moved) -> None:
    """The later snapshot's JSON report, with what only frtrace live knows under "live"."""
    from .comparing.two_sets import comparison_dict

    payload = result.as_dict()
    payload["live"] = {
        "snapshot": display_path(out_dir),
        "silent": [{"rank": a.rank, "url": a.url, "error": a.error} for a in answers if a.error is not None],
        "recorders": {a.rank: a.recorder for a in answers if a.error is None},
        "now": [{"rank": rank, "where": place} for rank, place in places.items()],
        "comparison": None if moved is None else comparison_dict(moved, None, __version__),
    }
    if path == "-":
        printed(out, lambda: out.write(json.dumps(payload, indent=2) + "\n"))
        return
    with Outputs(plan_outputs([requested_output("--json", path)], result.trace_dir, result.inputs)) as outputs:
        outputs.stage("--json", lambda f: f.write(json.dumps(payload, indent=2) + "\n"))
        outputs.commit()
        outputs.confirm(err)


def _moved(earlier, later):
    """The two snapshots compared as frtrace compare does (the later's analysis decides who)."""
    from .comparing.two_sets import compare_sets

    return compare_sets(earlier.loaded.dumps, earlier.table, later.loaded.dumps, later.table, later.analysis)


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
