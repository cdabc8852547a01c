"""frtrace.live_snapshot: a running (or hanging) job read from PyTorch's debug server (fetch),
kept as a snapshot folder, and analysed as a dump set; the library call behind `frtrace live`
and frtrace mcp's live_snapshot tool. Nothing here prints unless given a `log`."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, TextIO

from ..errors import UsageError, display_path, printable
from ..matcher import format_ranks


class LiveSnapshot:
    """What live_snapshot kept and found: `out_dir` (the snapshot folder), `later` (the set
    analysed: the later snapshot, or the only one), `answers` (each rank's, fetch.Answer),
    `result` (the later set's frtrace.Result), `moved` (the two snapshots compared, or None),
    `places` (culprit rank -> where its Python stack is now), `as_dict()` (frtrace live's JSON
    report), `text()` (what it prints), `verdict` (with two snapshots, their comparison's:
    "progressing", "stuck" or "partly_stuck"; with one, the set's) and `write_json(path)`."""

    def __init__(self, out_dir: str, later: str, answers: list, result, moved, places: dict[int, str]) -> None:
        self.out_dir, self.later, self.answers = out_dir, later, answers
        self.result, self.moved, self.places = result, moved, places

    @property
    def verdict(self) -> str:
        return self.moved.verdict if self.moved is not None else self.result.verdict

    def __repr__(self) -> str:
        return f"<frtrace.LiveSnapshot {self.verdict} {display_path(self.out_dir)}>"

    def as_dict(self) -> dict[str, Any]:
        """The later snapshot's JSON report, with what only frtrace live knows under "live"."""
        from .. import __version__
        from ..comparing.two_sets import comparison_dict

        payload = self.result.as_dict()
        payload["live"] = {
            "snapshot": display_path(self.out_dir),
            "silent": [{"rank": a.rank, "url": a.url, "error": a.error} for a in self.answers if a.error is not None],
            "recorders": {a.rank: a.recorder for a in self.answers if a.error is None},
            "now": [{"rank": rank, "where": place} for rank, place in self.places.items()],
            "comparison": None if self.moved is None else comparison_dict(self.moved, None, __version__),
        }
        return payload

    def text(self) -> str:
        """The report frtrace live prints: the moving job's one line, or the later set's report
        with where the culprits are now and what moved between the snapshots."""
        if self.moved is not None and self.moved.verdict == "progressing":
            return f"{self.moved.headline}\n"
        lines = self.result.text().split("\n")
        head = 2 if self.result.analysis.causes else 1  # the verdict, and its Cause line where it has one
        now = [f"rank {rank} {place}" for rank, place in self.places.items()]
        said = [f"Now (the ranks' Python stacks): {'; '.join(now)}"] if now else []
        said += [f"Between the two snapshots: {self.moved.headline}"] if self.moved is not None else []
        return "\n".join(lines[:head] + said + lines[head:])

    def write_json(self, path: str, log: TextIO | None = None) -> None:
        """The JSON report, whole or not at all ('-': standard output), never over a file of the snapshot."""
        from ..api import commit_json, requested_output
        from ..outputs.commit import plan_outputs

        commit_json(self.as_dict(), plan_outputs([requested_output("--json", path)], self.result.trace_dir,
                                                 self.result.inputs), log)


def live_snapshot(*, store: str | None = None, workers: Sequence[str] = (), world: int | None = None,
                  out_dir: str | None = None, timeout: float = 10.0, interval: float = 3.0, jobs: int | None = None,
                  log: TextIO | None = None) -> LiveSnapshot:
    """Every rank of a running job read at once from PyTorch's debug server, through the job's
    `store` (HOST:PORT, its MASTER_ADDR:MASTER_PORT; needs torch) or each rank's `workers`
    address (http://HOST:PORT, in rank order): its Flight Recorder and Python stacks kept in the
    new folder `out_dir` (default frtrace-live-<date>-<time>), twice `interval` seconds apart (0:
    once), each rank given `timeout` seconds to answer; then analysed as a dump set. `log`: where
    what frtrace live says on stderr goes as it happens (ranks that did not answer, the folder
    kept); None: nowhere. A UsageError where no rank answered (nothing is kept then)."""
    from ..api import analyze_dumps
    from ..reading.discover import SNAPSHOT_OTHER_RECORDER
    from ..reading.stacks import where_in
    from .fetch import Answer, SnapshotFolder, store_workers, worker_url

    if bool(store) == bool(workers):
        raise UsageError("live_snapshot: give the job's store (HOST:PORT) or its workers' addresses, one of the two")
    out_dir = out_dir or time.strftime("frtrace-live-%Y%m%d-%H%M%S")
    with SnapshotFolder(out_dir) as snapshot:  # refused where it exists, before any rank is asked
        if store:
            urls, missing = store_workers(store, world, timeout)
        else:
            urls, missing = {rank: worker_url(text) for rank, text in enumerate(workers)}, {}
        _one_worker_each(urls)
        absent = [Answer(rank, "", None, None, why, 0.0, asked=False) for rank, why in missing.items()]
        for name in ("a", "b") if interval else ("",):
            if name == "b":
                time.sleep(interval)
            answers = snapshot.take(name, urls, timeout, absent)
            if all(a.error is not None for a in answers):  # nothing to keep: said, nothing written
                reasons = sorted({a.error for a in answers if a.error})
                raise UsageError(f"no rank answered ({'; '.join(reasons[:3])}): check the worker addresses and that the "
                                 "job runs with the debug server on; nothing was written")
        snapshot.keep()
    later = os.path.join(out_dir, "b") if interval else out_dir
    silent = [a for a in answers if a.error is not None]
    if log is not None:
        _say_kept(log, out_dir, later, answers, silent, timeout, interval, SNAPSHOT_OTHER_RECORDER)
    result = analyze_dumps(later, jobs=jobs)  # the manifest says who did not answer (reading/discover.py)
    moved = _moved(analyze_dumps(os.path.join(out_dir, "a"), jobs=jobs), result) if interval else None
    stacks = result.loaded.stacks  # the snapshot's stacks/ as the analysis read them (reading/stacks.py)
    gone = {a.rank: "did not answer" if a.asked else "was not asked (no address)" for a in silent}
    places = {rank: at for rank in result.culprit_ranks
              if (at := gone.get(rank) or (where_in(stacks[rank]) if rank in stacks else None))}
    return LiveSnapshot(out_dir, later, answers, result, moved, places)


def _say_kept(log: TextIO, out_dir: str, later: str, answers: list, silent: list, timeout: float, interval: float,
              other_recorder: str) -> None:
    """What frtrace live says of the ranks and the folder once the snapshot is kept."""
    for answer in silent:
        if answer.refused:
            print(f"frtrace: rank {answer.rank}'s answer was not kept: {answer.error}", file=log)
        elif answer.url and answer.error == "no answer in time":
            print(f"frtrace: rank {answer.rank} ({answer.url}) did not answer within {timeout:g} s; "
                  "its process may be gone or its host unreachable", file=log)
        elif answer.url:
            print(f"frtrace: rank {answer.rank} ({answer.url}) did not answer: {answer.error}", file=log)
        else:
            print(f"frtrace: rank {answer.rank}: {answer.error}", file=log)
    for answer in answers:
        if answer.stacks_error:
            print(f"frtrace: rank {answer.rank}'s stacks were not kept ({answer.stacks_error}); its recorder was", file=log)
    kept = (f"two snapshots {interval:g} s apart kept in {display_path(out_dir)} ({len(answers) - len(silent)} of "
            f"{len(answers)} ranks; frtrace -d {display_path(later)} reads the later, frtrace compare "
            f"{display_path(os.path.join(out_dir, 'a'))} {display_path(later)} compares them)" if interval else
            f"snapshot of {len(answers) - len(silent)} of {len(answers)} ranks kept in {display_path(out_dir)} "
            f"(frtrace -d {display_path(out_dir)} reads it again)")
    print(f"frtrace: {kept}", file=log)
    both = [a.rank for a in answers if a.other_file is not None]
    if both:
        print(f"frtrace: {'ranks' if len(both) > 1 else 'rank'} {format_ranks(both)}: the dumps are the NCCL recorders; the "
              f"backend-neutral ones (gloo's ops) held entries too, kept in "
              f"{display_path(os.path.join(later, other_recorder))} (frtrace -d reads it)", file=log)


def _one_worker_each(urls: dict[int, str]) -> None:
    """A UsageError where one worker address is given for two ranks: its answers would stand for both."""
    seen: dict[str, int] = {}
    for rank, url in sorted(urls.items()):
        if url in seen:
            raise UsageError(f"{printable(url)} is given for rank {seen[url]} and rank {rank}: one worker answers for one "
                             "rank; give each rank's own address, in rank order")
        seen[url] = rank


def _moved(earlier, later):
    """The two snapshots compared as frtrace compare does (the later's analysis decides who)."""
    from ..comparing.two_sets import compare_sets

    return compare_sets(earlier.loaded.dumps, earlier.table, later.loaded.dumps, later.table, later.analysis)
