"""The Python API: a dump set found in a folder or an archive, read, its groups resolved and
analysed (analyze_dumps), and each output written from the Result, whole or not at all. Nothing
here prints or exits; the command line (cli.py) is a layer over it."""

from __future__ import annotations

import gc
import gzip
import io
import json
import os
import shlex
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from .reading.anchor import Anchoring, anchor_relative_seqs
from .builder import build_database, write_database
from .reading.discover import UNANSWERED, UNASKED, Discovery, find_dump_files
from .errors import OutputError, UsageError, display_path, printable
from .reading.groups import GroupTable, resolve_groups
from .reading.stacks import read_stack_files
from .loader import load_dumps
from .matcher import analyze
from .outputs.commit import Outputs, plan_outputs, resolved
from .outputs.report import render_text, report_dict
from .outputs.timeline import write_chrome_trace
from .database import Database
from .types import Analysis, LoadResult

if TYPE_CHECKING:
    from .reading.cluster import Cluster, DriverProcess


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use, not the machine's
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextmanager
def discovered(trace_dir: str, prefix: str | None, cluster: Cluster | DriverProcess | None = None,
               node_local: bool = False) -> Iterator[Discovery]:
    """The dump files of a folder or an archive, for as long as the block reads them (an archive's
    members are copied out for it, and removed after), or under a URL (reading.remote); with
    `node_local`, of the folder `trace_dir` on each node of the Ray `cluster` (reading.cluster); a
    folder the `cluster` reads is listed on this machine's Ray node where it can be (discover_shared)."""
    from .reading.remote import find_remote_dumps, is_url, local_path

    remote = is_url(trace_dir)
    trace_dir = local_path(trace_dir)
    if node_local:
        if remote:
            raise UsageError(f"--node-local reads each node's own disk; {display_path(trace_dir)} is a URL, the same "
                             "from every node: drop --node-local")
        yield cluster.discover_on_nodes(trace_dir, prefix)
        return
    if remote or not os.path.isdir(trace_dir):  # zipfile and tarfile imported for an archive only
        from .reading.archive import is_archive, unpacked

        if is_archive(trace_dir):  # in a store too: read member by member
            if cluster is not None:
                raise UsageError(f"{display_path(trace_dir)}: an archive is unpacked on this machine, where a Ray "
                                 "cluster's nodes cannot read it: drop --ray, or extract it into a folder every node shares")
            with unpacked(trace_dir, prefix) as discovery:
                yield discovery
            return
    if remote:
        yield find_remote_dumps(trace_dir, prefix)
    else:
        listed = cluster.discover_shared(trace_dir, prefix) if cluster is not None else None
        yield listed if listed is not None else find_dump_files(trace_dir, prefix)


@contextmanager
def discovered_through(trace_dir: str, prefix: str | None, ray: str | None = None, node_local: bool = False,
                       timeout: float | None = None) -> Iterator[tuple[Discovery, Cluster | DriverProcess | None]]:
    """discovered(), and the Ray cluster at `ray` that reads the files where one is given
    (connected for the block, closed after); (discovery, cluster or None)."""
    with ExitStack() as stack:
        cluster = None
        if ray is not None:
            from .reading.cluster import TIMEOUT, connect

            cluster = stack.enter_context(connect(ray, timeout or TIMEOUT))
        yield stack.enter_context(discovered(trace_dir, prefix, cluster, node_local)), cluster


def read_set(trace_dir: str, prefix: str | None, err: TextIO, *, jobs: int = 1, progress: bool = False,
             ft_group_world_size: int | None = None) -> tuple[LoadResult, GroupTable]:
    """One dump set read and its groups resolved; skipped files are said on `err`."""
    with discovered(trace_dir, prefix) as discovery:
        return load_set(discovery, trace_dir, prefix, err, jobs=jobs, progress=progress,
                        ft_group_world_size=ft_group_world_size)


def load_set(discovery: Discovery, trace_dir: str, prefix: str | None, err: TextIO, *, jobs: int = 1, progress: bool = False,
             ft_group_world_size: int | None = None, times: bool = True,
             cluster: Cluster | DriverProcess | None = None) -> tuple[LoadResult, GroupTable]:
    """The dumps discovered read and their groups resolved; skipped files are said on `err`.
    Without `times`, the entries' times are not loaded (load_dumps). With a Ray `cluster`, the
    files are read by its tasks (and node-local stack files on their nodes)."""
    if not discovery.files:
        hint = f" starting with {printable(prefix)!r}" if prefix else ""
        seen = (f" ({len(discovery.ignored)} file(s) ignored, e.g. {discovery.ignored[0].path}: {discovery.ignored[0].reason})"
                if discovery.ignored else "")
        raise UsageError(f"{display_path(trace_dir)}: no dump files{hint}: no file is named <prefix><rank> "
                         f"and starts like a pickle or JSON dump{seen}; check the directory and --prefix "
                         "(dumps written with TORCH_FR_DUMP_DYNAMIC_FILE_NAME=1 carry no rank: rename each to <prefix><rank>)"
                         + ("; dumps on each Ray node's own disk: add --node-local" if cluster is not None and
                            not cluster.node_of else ""))
    loaded = load_dumps(discovery, progress=progress and len(discovery.files) > 8, workers=jobs,
                        bound_by_configs=ft_group_world_size is None, times=times,
                        read=cluster.read if cluster is not None else None)
    for item in loaded.skipped:
        print(f"frtrace: skipped {item.path}: {item.reason}", file=err)
    if not loaded.dumps:
        raise UsageError(f"{display_path(trace_dir)}: none of the {len(loaded.ranks_named)} dump file(s) could be read; "
                         "see the messages above")
    if ft_group_world_size is None:
        ft_group_world_size = loaded.replica_size
        if ft_group_world_size is not None:
            loaded = replace(loaded, notes=(
                f"torchft replica groups: every rank's default group lists the replica-local ranks 0-{ft_group_world_size - 1}, "
                f"and ranks beyond {ft_group_world_size - 1} fill other replicas; each replica's ranks are mapped to global "
                f"ranks (replica = rank // {ft_group_world_size}); give --transform-ft --group-world-size N where "
                "the replica size differs", *loaded.notes))
    table = resolve_groups(loaded.dumps, loaded.ranks_named, ft_group_world_size)
    if discovery.stacks:
        ranks = set(loaded.ranks_named) | set(loaded.dumps) | set(table.world)
        alive = _ranks_alive(ranks, {rank for rank, _ in discovery.stacks})
        if cluster is not None and cluster.node_of:  # on the nodes that hold them, the job's ranks' only
            fetched = cluster.read_stacks([path for rank, path in discovery.stacks if rank in ranks | alive])
            stacks, notes = read_stack_files(discovery.stacks, ranks | alive, read=fetched.__getitem__)
        else:
            stacks, notes = read_stack_files(discovery.stacks, ranks | alive)
        loaded = replace(loaded, stacks=stacks, notes=(*loaded.notes, *notes))
        if alive - set(table.world):  # a process that left no dump but wrote its stacks is a rank of the job
            table = resolve_groups(loaded.dumps, frozenset(loaded.ranks_named) | alive, ft_group_world_size)
    return loaded, table


def _ranks_alive(ranks: set[int], with_stacks: set[int]) -> set[int]:
    """The ranks past the dumps' world that stack files name, where they continue it without a gap
    (gloo dumps only from inside a collective: a rank stalled in its data loader never dumps, though
    its stacks were taken); a stack file of a rank far past the world is another job's."""
    alive: set[int] = set()
    nxt = max(ranks, default=-1) + 1
    while nxt in with_stacks:
        alive.add(nxt)
        nxt += 1
    return alive


class Result:
    """One dump set analysed: the verdict and what decided it, and each output on demand.

    `verdict` is "clean", "desync", "stuck" or "inconclusive"; `culprit_ranks` the ranks named;
    `headline` the report's first line; `evidence` what decided the verdict, a sentence each;
    `findings` the findings (root causes marked); `notes` what the reader should know of the
    set (torchft replicas mapped, ...); `skipped` the files that could not be used, with why.
    """

    def __init__(self, loaded: LoadResult, table: GroupTable, analysis: Analysis, trace_dir: str,
                 inputs: frozenset[tuple[int, int]]) -> None:
        self.loaded = loaded
        self.table = table
        self.analysis = analysis
        self.trace_dir = trace_dir
        self.inputs = inputs  # (device, inode) of every file read: never written over
        self._database: Database | None = None

    verdict = property(lambda self: self.analysis.verdict)
    culprit_ranks = property(lambda self: self.analysis.culprit_ranks)
    headline = property(lambda self: self.analysis.headline)
    evidence = property(lambda self: self.analysis.evidence)
    findings = property(lambda self: self.analysis.findings)
    notes = property(lambda self: self.loaded.notes)
    skipped = property(lambda self: self.loaded.skipped)

    def __repr__(self) -> str:
        return f"<frtrace.Result {self.verdict} culprits={list(self.culprit_ranks)} ranks={len(self.loaded.dumps)}>"

    def as_dict(self) -> dict[str, Any]:
        """The JSON report (docs: the JSON schema), as plain data."""
        loaded = self.loaded
        return report_dict(self.analysis, loaded.skipped, loaded.ignored, loaded.sources, loaded.dumps, loaded.unread,
                           loaded.stacks)

    def text(self, *, verbose: bool = False, print_stack_trace: bool = False, mismatch_cap: int = 10) -> str:
        """The text report the command prints."""
        out = io.StringIO()
        render_text(self.analysis, self.loaded.dumps, self.loaded.skipped, out, mismatch_cap=mismatch_cap,
                    print_stack_trace=print_stack_trace, verbose=verbose, sources=self.loaded.sources, unread=self.loaded.unread)
        return out.getvalue()

    def database(self) -> Database:
        """The flattened database (built once)."""
        if self._database is None:
            self._database = build_database(self.analysis, self.loaded.dumps, self.table)
        return self._database

    def write_json(self, path: str) -> None:
        self._write("--json", path)

    def write_database(self, path: str) -> None:
        """The pickle of (types, db) that `frtrace -o` writes."""
        self._write("-o", path)

    def write_sqlite(self, path: str) -> None:
        self._write("--sqlite", path)

    def write_html(self, path: str) -> None:
        self._write("--html", path)

    def write_markdown(self, path: str) -> None:
        """The one-screen summary for a ticket that `frtrace --markdown` writes."""
        self._write("--markdown", path)

    def write_chrome_trace(self, path: str, *, ranks: int | None = None, last: int | None = None) -> None:
        """The timeline (gzipped where `path` ends in .gz): `ranks` other ranks beside the culprits
        and their peers (None: every rank), each rank's `last` entries (None: all)."""
        self._write("--chrome-trace", path, trace_ranks=ranks, trace_last=last)

    def _write(self, flag: str, path: str, **trace) -> None:
        """One output, written whole or not at all, never over a file the set was read from."""
        with Outputs(plan_outputs([requested_output(flag, path)], self.trace_dir, self.inputs)) as outputs:
            stage_output(outputs, flag, self, **trace)
            outputs.commit()


_OUTPUTS = {"-o": ("database", True), "--sqlite": ("SQLite database", True), "--chrome-trace": ("Chrome trace", False),
            "--html": ("HTML report", False), "--json": ("JSON report", False), "--markdown": ("Markdown summary", False)}


def requested_output(flag: str, path: str) -> tuple[str, str, str, bool]:
    """(flag, path, what, binary), as plan_outputs takes it."""
    from .reading.remote import local_path

    path = local_path(path)  # file://; any other URL is an object in a store (plan_outputs)
    what, binary = _OUTPUTS[flag]
    return flag, path, what, binary or (flag == "--chrome-trace" and path.endswith(".gz"))


def stage_output(outputs: Outputs, flag: str, result: Result, trace_ranks: int | None = None,
                 trace_last: int | None = None, command: str | None = None) -> None:
    """Write one output of `result` into its staged file (Outputs.stage). `command`: the command
    line the Markdown summary says produced it (default: frtrace -d on the result's folder)."""
    dumps, table, analysis = result.loaded.dumps, result.table, result.analysis
    if flag == "-o":
        outputs.stage("-o", lambda f: write_database(result.database(), f))
    elif flag == "--sqlite":
        from .outputs.sqlite import write_sqlite  # the optional outputs' modules: imported when asked for

        with outputs.stage_path("--sqlite") as (temp, opened):
            write_sqlite(result.database(), dumps, table, temp, opened)
    elif flag == "--chrome-trace":
        path = outputs.plans[flag].path
        outputs.stage(flag, lambda f: _write_trace(f, path, analysis, dumps, table, trace_ranks, trace_last))
    elif flag == "--html":
        from .outputs.html import write_html

        outputs.stage("--html", lambda f: write_html(analysis, dumps, table, f))
    elif flag == "--json":
        payload = result.as_dict()
        outputs.stage("--json", lambda f: f.write(json.dumps(payload, indent=2) + "\n"))
    elif flag == "--markdown":
        from .outputs.markdown import write_markdown

        said = command or shlex.join(["frtrace", "-d", result.trace_dir])
        outputs.stage("--markdown", lambda f: write_markdown(analysis, result.as_dict(), f, said))


def _write_trace(handle, path: str, analysis, dumps, table, limit: int | None, last: int | None) -> None:
    if path.endswith(".gz"):  # Perfetto UI reads gzipped traces
        with gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as packed, io.TextIOWrapper(packed, encoding="utf-8") as text:
            write_chrome_trace(analysis, dumps, table, text, limit, last)
    else:
        write_chrome_trace(analysis, dumps, table, handle, limit, last)


def analysis_of(loaded: LoadResult, table: GroupTable, anchoring: Anchoring | None = None) -> Analysis:
    """The set's collectives aligned and its verdict reached (its seq ids lined up first, unless
    `anchoring` says how they were); a live snapshot's silent ranks are said to be so."""
    if anchoring is None:
        anchoring = anchor_relative_seqs(loaded.dumps, table)
    unanswered = frozenset(rank for rank, why in loaded.unread.items() if UNANSWERED in why)
    unasked = frozenset(rank for rank, why in loaded.unread.items() if UNASKED in why)
    return analyze(loaded.dumps, table, notes=loaded.notes, anchoring=anchoring, unanswered=unanswered,
                   unasked=unasked, stacks=loaded.stacks)


def analyzed(loaded: LoadResult, table: GroupTable, trace_dir: str, inputs: frozenset[tuple[int, int]]) -> Result:
    """The set analysed (analysis_of), as a Result."""
    return Result(loaded, table, analysis_of(loaded, table), trace_dir, inputs)


def analyze_dumps(path: str | os.PathLike, *, prefix: str | None = None, jobs: int | None = None,
                  group_world_size: int | None = None, ray: str | None = None, node_local: bool = False,
                  timeout: float | None = None) -> Result:
    """Read the Flight Recorder dumps in a folder (or a .tar, .tar.gz or .zip of them, or a URL)
    and find who desynced. `prefix`: the file name before the rank (inferred where None); `jobs`:
    reading processes (None: the CPUs this process may use); `group_world_size`: torchft's replica
    size where the dumps do not show it. `ray`: the address of a Ray cluster whose tasks read the
    files ("auto", "HOST:PORT", "ray://HOST:PORT"), from a path every node shares, or with
    `node_local` from each node's own disk at `path`; `timeout`: seconds without a task of it done
    before the rest is given up (default 60). Files that cannot
    be used are in `Result.skipped`; where none can, or the options cannot work, a FrtraceError
    says why (a TypeError naming the argument where one is of the wrong type). Nothing is printed."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"analyze_dumps: path must be a str or os.PathLike, not {type(path).__name__}")
    for name, value in (("prefix", prefix), ("ray", ray)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"analyze_dumps: {name} must be a str or None, not {type(value).__name__}")
    if not isinstance(node_local, bool):
        raise TypeError(f"analyze_dumps: node_local must be a bool, not {type(node_local).__name__}")
    if node_local and ray is None:
        raise UsageError("analyze_dumps: node_local says the dumps lie on each node of a Ray cluster; give ray=ADDRESS")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise TypeError(f"analyze_dumps: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if timeout is not None and not 0 < timeout <= 3600:
        raise UsageError(f"analyze_dumps: timeout must be above 0 and at most 3600 seconds, not {timeout:g}")
    jobs = _count_argument("jobs", jobs, "reading processes (None: the CPUs this process may use)")
    group_world_size = _count_argument("group_world_size", group_world_size, "ranks in one torchft replica group")
    trace_dir = os.fspath(path)
    collecting = gc.isenabled()
    gc.disable()  # millions of small tuples with no cycles: the collector would only rescan them
    try:
        with discovered_through(trace_dir, prefix, ray, node_local, timeout) as (discovery, cluster):
            loaded, table = load_set(discovery, trace_dir, prefix, io.StringIO(), jobs=jobs or default_jobs(),
                                     ft_group_world_size=group_world_size, cluster=cluster)
        return analyzed(loaded, table, trace_dir, discovery.identities)
    finally:
        if collecting:
            gc.enable()


def _count_argument(name: str, value: Any, what: str, function: str = "analyze_dumps") -> int | None:
    """An API argument that counts something, checked as the command line checks its option: None,
    or an int of at least 1 (a bool is no count)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{function}: {name} must be an int or None, not {type(value).__name__}")
    if value < 1:
        raise UsageError(f"{function}: {name} must be at least 1 ({what}), not {value}")
    return value


class Compared:
    """Two dump sets of one job compared (compare_sets): `verdict` ("progressing", "stuck" or
    "partly_stuck"), `headline`, `comparison` (what decided it), `timings` (per op, where asked
    for), `as_dict()` (the JSON comparison), `text(head)` (what frtrace compare prints) and
    `write_json(path)`, whole or not at all, never over a file of either set."""

    def __init__(self, comparison, timings, earlier: str, later: str, inputs: frozenset[tuple[int, int]]) -> None:
        self.comparison, self.timings = comparison, timings
        self.earlier, self.later, self.inputs = earlier, later, inputs

    verdict = property(lambda self: self.comparison.verdict)
    headline = property(lambda self: self.comparison.headline)

    def __repr__(self) -> str:
        return f"<frtrace.Compared {self.verdict}>"

    def as_dict(self) -> dict[str, Any]:
        from . import __version__
        from .comparing.two_sets import comparison_dict

        return comparison_dict(self.comparison, self.timings, __version__)

    def text(self, head: int = 20) -> str:
        """The report frtrace compare prints; `head`: the ops shown of the timings."""
        from .comparing.two_sets import render_comparison

        out = io.StringIO()
        render_comparison(self.comparison, self.timings, out, head)
        return out.getvalue()

    def write_json(self, path: str, log: TextIO | None = None) -> None:
        """The JSON comparison, whole or not at all ('-': standard output); `log`: where the file
        written is said."""
        requested = [("--json", path, "JSON comparison", False)]
        plan_outputs(requested, self.earlier, self.inputs)  # refused the same way for either set
        commit_json(self.as_dict(), plan_outputs(requested, self.later, self.inputs), log)


def commit_json(payload: Any, plans: list, log: TextIO | None = None) -> None:
    """`payload` written as the planned --json output (plan_outputs), whole or not at all; the file
    written said on `log` where given."""
    with Outputs(plans) as outputs:
        outputs.stage("--json", lambda f: f.write(json.dumps(payload, indent=2) + "\n"))
        outputs.commit()
        if log is not None:
            outputs.confirm(log)


def compare_sets(earlier: str | os.PathLike, later: str | os.PathLike, *, prefix: str | None = None,
                 jobs: int | None = None, timing: bool = False, log: TextIO | None = None) -> Compared:
    """Two dump sets of one job, `earlier` then `later` (folders, archives or URLs), compared: which
    ranks moved between them, which froze, and (`timing`) which ops got slower. `log`: where each
    file that cannot be used is said as it is read (None: nowhere). A FrtraceError where the two
    cannot be compared (one set twice, two jobs, B older than A); nothing is printed."""
    from .comparing.two_sets import compare_sets as compared, not_one_job, older, op_timings, same_set

    for name, value in (("earlier", earlier), ("later", later)):
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"compare_sets: {name} must be a str or os.PathLike, not {type(value).__name__}")
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"compare_sets: prefix must be a str or None, not {type(prefix).__name__}")
    jobs = _count_argument("jobs", jobs, "reading processes (None: the CPUs this process may use)", "compare_sets")
    earlier, later = os.fspath(earlier), os.fspath(later)
    err = log if log is not None else io.StringIO()
    sets, files = [], []
    for path in (earlier, later):
        with discovered(path, prefix) as discovery:
            files.append(discovery.identities)
            if len(files) == 2 and files[0] == files[1]:  # before reading B: it is A
                raise UsageError(f"{display_path(earlier)} and {display_path(later)} are the same dump set "
                                 "(the same files): nothing can have moved between them; pass a set taken later as B")
            sets.append(load_set(discovery, path, prefix, err, jobs=jobs or default_jobs(), times=timing))
    (loaded_a, table_a), (loaded_b, table_b) = sets
    a, b = display_path(earlier), display_path(later)
    if not loaded_a.dumps.keys() & loaded_b.dumps.keys():
        raise UsageError(f"{a} and {b} share no rank: not two dumps of one job")
    anchor_relative_seqs(loaded_a.dumps, table_a)
    anchoring_b = anchor_relative_seqs(loaded_b.dumps, table_b)
    difference = not_one_job(loaded_a.dumps, table_a, loaded_b.dumps, table_b, forward=False)
    if not difference and older(loaded_a.dumps, loaded_b.dumps):
        raise UsageError(f"every rank holds fewer records in {b} than in {a}: pass the earlier set first")
    difference = difference or not_one_job(loaded_a.dumps, table_a, loaded_b.dumps, table_b)
    if difference:
        raise UsageError(f"{a} and {b} are not one job dumped twice: {difference}; compare two dump sets of one job, "
                         "the earlier first")
    analysis_b = analysis_of(loaded_b, table_b, anchoring_b)
    comparison = compared(loaded_a.dumps, table_a, loaded_b.dumps, table_b, analysis_b)
    if same_set(loaded_a.dumps, loaded_b.dumps):  # a hung gloo job dumped twice is so too: said, not refused
        comparison.headline += ("; every rank's dump is the same in A and B, record for record: if B is not a copy of A "
                                "(its archive, say), the job made no progress at all between the two dumps")
    timings = op_timings(loaded_a.dumps, table_a, loaded_b.dumps, table_b) if timing else None
    return Compared(comparison, timings, earlier, later, frozenset(files[0] | files[1]))


class ReplayPlan:
    """A dump set's communication as a plan to run (plan_replay): `plan` (what plan.json holds:
    each rank's ops on its groups), `mode`, `analysis` (the recorded verdict), `ops` (in all),
    and `out_dir` where it was written (None where it was not)."""

    def __init__(self, plan: dict[str, Any], mode: str, analysis: Analysis, out_dir: str | None) -> None:
        self.plan, self.mode, self.analysis, self.out_dir = plan, mode, analysis, out_dir
        self.ops = sum(len(v) for v in plan["ranks"].values())

    def __repr__(self) -> str:
        return f"<frtrace.ReplayPlan {self.mode} {self.plan['world_size']} ranks {self.ops} ops>"


_REPLAY_MODES = ("as-recorded", "majority")


def plan_replay(path: str | os.PathLike, *, out_dir: str | os.PathLike | None = None, mode: str = "as-recorded",
                prefix: str | None = None, jobs: int | None = None, log: TextIO | None = None) -> ReplayPlan:
    """The communication of the dump set at `path` as a replay plan (frtrace replay): "as-recorded"
    reproduces the desync, "majority" runs a healthy rank's program on every rank. With `out_dir`
    (a new or empty folder, never in or around the set, checked before the set is read), plan.json
    is written there, whole or not at all; run it with python -m frtrace.replay OUT_DIR. `log`:
    where each file that cannot be used is said (None: nowhere). Nothing is printed."""
    from .replay.plan import build_plan

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"plan_replay: path must be a str or os.PathLike, not {type(path).__name__}")
    if mode not in _REPLAY_MODES:
        raise UsageError(f"plan_replay: mode must be one of {', '.join(_REPLAY_MODES)}, not {printable(str(mode))}")
    jobs = _count_argument("jobs", jobs, "reading processes (None: the CPUs this process may use)", "plan_replay")
    trace_dir = os.fspath(path)
    given = None if out_dir is None else os.fspath(out_dir)
    if given is not None:
        target = resolved(given)  # through links: alias/replay with alias -> dumps is inside the dumps
        source = resolved(trace_dir)
        if target == source or target.startswith(source + os.sep) or source.startswith(target + os.sep):
            raise UsageError(f"{display_path(given)}: inside or around the dump set {display_path(trace_dir)}; "
                             "write the replay somewhere else")
        if os.path.lexists(given) and (not os.path.isdir(given) or os.path.islink(given) or os.listdir(given)):
            raise UsageError(f"{display_path(given)}: exists and is not an empty folder; frtrace replay never writes "
                             "over anything: choose a new folder")
    loaded, table = read_set(trace_dir, prefix, log if log is not None else io.StringIO(), jobs=jobs or default_jobs())
    analysis = analysis_of(loaded, table)
    plan = build_plan(loaded.dumps, table, analysis, mode)
    if given is not None:
        _write_plan(plan, given, target)
    return ReplayPlan(plan, mode, analysis, given)


def _write_plan(plan: dict[str, Any], given: str, target: str) -> None:
    """plan.json in a folder of its own, renamed into place whole: never half a replay."""
    import shutil
    import tempfile

    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".frtrace-replay-", dir=os.path.dirname(target))
    except OSError as exc:
        raise OutputError(f"{display_path(given)}: cannot write the replay ({exc.strerror}); nothing was written") from None
    try:
        with open(os.path.join(staging, "plan.json"), "w", encoding="utf-8") as handle:
            handle.write(json.dumps(plan))  # the C encoder: json.dump with indent (pure Python) made a 256-rank plan 9.1 s, now 4.4 s
        if os.path.isdir(target):
            os.rmdir(target)  # empty, checked before the set was read
        os.rename(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise OutputError(f"{display_path(given)}: cannot write the replay ({exc.strerror}); nothing was written") from None
