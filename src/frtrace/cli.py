"""Command line: argv -> Options -> run -> exit code. The only module that prints or exits."""

from __future__ import annotations

import argparse
import difflib
import gc
import os
import shlex
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from . import __version__
from .api import analyzed, default_jobs, discovered_through, load_set, requested_output, stage_output
from .commands import CompareOptions, LiveOptions, ReplayOptions, run_compare, run_live, run_replay
from .errors import (EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, EXIT_INTERNAL, FrtraceError, InternalError, OutputError,
                     UsageError, printable)
from .matcher import format_ranks
from .outputs.commit import Outputs, plan_outputs
from .outputs.report import SCHEMAS, render_entries, schema_text
from .outputs.timeline import DEFAULT_TRACE_RANKS, TRACE_EVERY_RANK_UP_TO, chosen_ranks
from .terminal import TerminalSafe, printed, silence_stdout


@dataclass(frozen=True, slots=True)
class Options:
    trace_dir: str
    prefix: str | None = None
    output: str | None = None
    json_path: str | None = None
    just_print_entries: bool = False
    selected_ranks: tuple[int, ...] | None = None
    pg_filters: tuple[str, ...] | None = None
    verbose: bool = False
    print_stack_trace: bool = False
    mismatch_cap: int = 10
    allow_incomplete_ranks: bool = False
    ft_group_world_size: int | None = None
    strict: bool = False
    progress: bool = False
    jobs: int = 1
    chrome_trace: str | None = None
    trace_ranks: int | None = None
    trace_every_rank: bool = False  # --trace-ranks all: no default limit on a big job
    trace_last: int | None = None
    html: str | None = None
    markdown: str | None = None
    command: str | None = None  # the command line, as the Markdown summary says it
    sqlite: str | None = None
    stats: bool = False
    timeout: float | None = None  # seconds a store may take to answer (a URL's dumps); None: reading.remote's
    ray: str | None = None  # the Ray cluster that reads the files (--ray ADDRESS)
    node_local: bool = False  # the folder is each Ray node's own disk


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line through main's error path, not usage + exit
        raise UsageError(f"{message}{self._suggestion(message)}; see {self.prog} --help")

    def _suggestion(self, message: str) -> str:
        """' (did you mean --json?)' for an option argparse does not know that is close to one it does."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        known = [option for action in self._actions for option in action.option_strings]
        for given in message.removeprefix("unrecognized arguments: ").split():
            name = given.split("=", 1)[0]
            if name.startswith("-"):
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="frtrace",
        description="Find the rank that desynced a hung PyTorch job, from its Flight Recorder dumps.",
        epilog="Exit status: 0 clean, 1 desync, stuck or inconclusive, 2 usage, input or output error, "
               "3 internal error (a bug: please report it), 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM). "
               "Also: 'frtrace compare A B' (two dump sets of one job: hung or slow?), "
               "'frtrace live --store HOST:PORT' (a running job, read now from PyTorch's debug server), "
               "'frtrace replay DIR -o OUT' (a runnable replay of the dumps' communication), "
               "'frtrace mcp --root DIR' (an MCP server for agents) and 'frtrace schema [report|compare]' "
               "(the JSON outputs' schemas); each has --help.",
    )
    parser.add_argument("trace_dir", nargs="?", help="directory (or .tar/.tar.gz/.zip archive) holding one dump per rank (same as -d)")
    parser.add_argument("-d", "--dir", dest="dir_option", metavar="DIR",
                        help="directory holding one dump per rank, in it or in subfolders; or a .tar, .tar.gz or .zip of them")
    parser.add_argument("-p", "--prefix", help="file name prefix before the rank number (default: inferred from the names)")
    parser.add_argument("-o", "--output", metavar="DB", help="write the flattened database here, as a pickle of (types, db)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON report here ('-' for stdout)")
    parser.add_argument("--chrome-trace", metavar="PATH",
                        help="write a timeline for Perfetto UI / chrome://tracing (gzipped when PATH ends in .gz)")
    parser.add_argument("--trace-ranks", type=_trace_ranks, nargs="?", const=DEFAULT_TRACE_RANKS, metavar="N|all",
                        help=f"with --chrome-trace: only the culprits, their groups' members and N other ranks "
                             f"(default {DEFAULT_TRACE_RANKS}; the default for jobs of more than {TRACE_EVERY_RANK_UP_TO} "
                             f"ranks); 'all': every rank")
    parser.add_argument("--trace-last", type=int, metavar="N", help="with --chrome-trace: only each rank's last N entries")
    parser.add_argument("--html", metavar="PATH", help="write a one-file HTML report (opens from disk, no network)")
    parser.add_argument("--markdown", metavar="PATH|-", help="write a one-screen Markdown summary for a ticket or a chat "
                        "('-': standard output, instead of the text report)")
    parser.add_argument("--sqlite", metavar="PATH", help="write the database and every raw entry as SQLite tables")
    parser.add_argument("--stats", action="store_true", help="print per-op statistics and the ranks that arrive last")
    parser.add_argument("-j", "--just-print-entries", "--just_print_entries", dest="just_print_entries", action="store_true",
                        help="print the entries side by side, one column per rank, and skip the analysis")
    parser.add_argument("--selected-ranks", "--selected_ranks", dest="selected_ranks", type=int, nargs="+", metavar="RANK",
                        help="with -j: only these ranks' columns")
    parser.add_argument("--pg-filters", "--pg_filters", dest="pg_filters", nargs="+", metavar="NAME",
                        help="with -j: only groups with this name or desc")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every note, not only the first five (torchfrtrace's -v logs its matching steps instead)")
    parser.add_argument("--print-stack-trace", "--print_stack_trace", dest="print_stack_trace", action="store_true",
                        help="print the stack of every offending rank's op, not only the culprits' (after the analysis: "
                             "unlike torchfrtrace's, not with -j)")
    parser.add_argument("--mismatch-cap", "--mismatch_cap", dest="mismatch_cap", type=int, default=10, metavar="N",
                        help="print at most N findings (default 10; 0 for all); torchfrtrace caps mismatches per group instead")
    parser.add_argument("--allow-incomplete-ranks", "--allow_incomplete_ranks", dest="allow_incomplete_ranks", action="store_true",
                        help="accepted for torchfrtrace compatibility: missing ranks never stop frtrace")
    parser.add_argument("--transform-ft", "--transform_ft", dest="transform_ft", action="store_true",
                        help="torchft: shift each replica group's default-group ranks to global ranks")
    parser.add_argument("--group-world-size", "--group_world_size", dest="group_world_size", type=int, metavar="N",
                        help="ranks per torchft replica group (needed by --transform-ft)")
    parser.add_argument("--strict", action="store_true", help="exit 2 when any file was skipped (for CI)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="read dump files in N processes (default: the CPUs this process may use)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="dumps at a URL: seconds the store may take to answer each request; with --ray: seconds "
                             "without a task of the cluster done (default 60)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="read the files as tasks of a Ray cluster (auto, HOST:PORT or ray://HOST:PORT): on a path "
                             "every node shares, or a URL; needs frtrace[ray] here and on every node")
    parser.add_argument("--node-local", "--node_local", dest="node_local", action="store_true",
                        help="with --ray: the dump folder is each node's own disk, the same path on every node; each "
                             "node reads its own files")
    parser.add_argument("--version", action="version", version=f"frtrace {__version__}")
    return parser


def _jobs(value: int | None) -> int:
    """--jobs as given (at least 1), else the CPUs this process may use."""
    if value is not None and value < 1:
        raise UsageError(f"--jobs must be at least 1, not {value}")
    return value or default_jobs()


def parse_options(argv: Sequence[str] | None, stderr_is_tty: bool = False) -> Options:
    """Options from argv; UsageError for arguments that cannot work together or would be ignored."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.trace_dir and args.dir_option and args.trace_dir != args.dir_option:
        raise UsageError(f"two dump directories given ({args.trace_dir} and -d {args.dir_option}); pass one")
    trace_dir = args.dir_option or args.trace_dir
    if not trace_dir:
        raise UsageError("no dump directory given; run as: frtrace -d DUMP_DIR [-o db.pkl]")
    if (args.selected_ranks or args.pg_filters) and not args.just_print_entries:
        raise UsageError("--selected-ranks and --pg-filters choose what -j/--just-print-entries prints; add -j")
    if args.just_print_entries:
        ignored = [flag for flag, value in (("-o", args.output), ("--json", args.json_path), ("--sqlite", args.sqlite),
                                            ("--chrome-trace", args.chrome_trace), ("--html", args.html),
                                            ("--markdown", args.markdown), ("--stats", args.stats),
                                            ("--print-stack-trace", args.print_stack_trace)) if value]
        if ignored:
            raise UsageError(f"-j prints the entries and runs no analysis, so {', '.join(ignored)} would write nothing; "
                             "run them without -j")
    if args.json_path == "-" and args.stats:
        raise UsageError("--json - puts only JSON on standard output, so --stats would print nothing; "
                         "write the JSON to a file, or drop --stats")
    if args.json_path == "-" and args.markdown == "-":
        raise UsageError("--json - and --markdown - would both go to standard output; write one of them to a file")
    if args.markdown == "-" and args.stats:
        raise UsageError("--markdown - puts only the summary on standard output, so --stats would print nothing; "
                         "write the summary to a file, or drop --stats")
    if args.transform_ft and not args.group_world_size:
        raise UsageError("--transform-ft needs --group-world-size N, the number of ranks in one replica group")
    if args.group_world_size is not None and args.group_world_size < 1:
        raise UsageError(f"--group-world-size must be a positive number of ranks, not {args.group_world_size}")
    if args.mismatch_cap < 0:
        raise UsageError(f"--mismatch-cap must be 0 (all findings) or more, not {args.mismatch_cap}")
    if args.sqlite == "-" or args.chrome_trace == "-" or args.html == "-":
        raise UsageError("--sqlite, --chrome-trace and --html write files; give a file name, not '-'")
    if (args.trace_ranks is not None or args.trace_last is not None) and not args.chrome_trace:
        raise UsageError("--trace-ranks and --trace-last choose what --chrome-trace writes; add --chrome-trace PATH")
    for flag, value in (("--trace-ranks", args.trace_ranks), ("--trace-last", args.trace_last)):
        if value is not None and value != "all" and value < (0 if flag == "--trace-ranks" else 1):
            raise UsageError(f"{flag} must be {'0 or more' if flag == '--trace-ranks' else 'at least 1'}, not {value}")
    jobs = _jobs(args.jobs)
    if args.timeout is not None and not 0 < args.timeout <= 3600:
        raise UsageError(f"--timeout must be above 0 and at most 3600 seconds, not {args.timeout:g}")
    if args.output == "-":
        raise UsageError("-o writes a binary pickle; give a file name, not '-'")
    if args.node_local and args.ray is None:
        raise UsageError("--node-local says the dumps lie on each node of a Ray cluster; give the cluster with --ray ADDRESS")
    return Options(
        trace_dir=trace_dir,
        prefix=args.prefix,
        output=args.output,
        json_path=args.json_path,
        just_print_entries=args.just_print_entries,
        selected_ranks=tuple(args.selected_ranks) if args.selected_ranks else None,
        pg_filters=tuple(args.pg_filters) if args.pg_filters else None,
        verbose=args.verbose,
        print_stack_trace=args.print_stack_trace,
        mismatch_cap=args.mismatch_cap,
        allow_incomplete_ranks=args.allow_incomplete_ranks,
        ft_group_world_size=args.group_world_size if args.transform_ft else None,
        strict=args.strict,
        progress=stderr_is_tty,
        jobs=jobs,
        chrome_trace=args.chrome_trace,
        trace_ranks=None if args.trace_ranks == "all" else args.trace_ranks,
        trace_every_rank=args.trace_ranks == "all",
        trace_last=args.trace_last,
        html=args.html,
        markdown=args.markdown,
        command=shlex.join(["frtrace", *(sys.argv[1:] if argv is None else argv)]),
        sqlite=args.sqlite,
        stats=args.stats,
        timeout=args.timeout,
        ray=args.ray,
        node_local=args.node_local,
    )


def _trace_ranks(value: str) -> int | str:
    if value == "all":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of ranks or 'all', not {value!r}") from None


def _trace_limit(options: Options, dumps: dict) -> int | None:
    """The --trace-ranks in force: as given, else every rank of a job up to TRACE_EVERY_RANK_UP_TO
    ranks and the default selection of a bigger one (its whole timeline is too big to open)."""
    if options.trace_ranks is None and not options.trace_every_rank and len(dumps) > TRACE_EVERY_RANK_UP_TO:
        return DEFAULT_TRACE_RANKS
    return options.trace_ranks


def _requested_outputs(options: Options) -> list[tuple[str, str, str, bool]]:
    return [requested_output(flag, path) for flag, path in (
        ("-o", options.output), ("--sqlite", options.sqlite), ("--chrome-trace", options.chrome_trace),
        ("--html", options.html), ("--json", options.json_path), ("--markdown", options.markdown)) if path]


def _reads_times(options: Options) -> bool:
    """Whether an output asked for reads the entries' times: the report, the JSON, the Markdown,
    the database and -j never do, and the main process then keeps 40% of each dump's columns
    (4,096 ranks of timed entries: 332 MiB at peak instead of 601)."""
    return bool(options.html or options.sqlite or options.chrome_trace or options.stats)


def _check_selection(options: Options, dumps: dict, table) -> None:
    """-j's filters that match nothing are an error, not an empty table."""
    if options.selected_ranks and not set(options.selected_ranks) & set(dumps):
        raise UsageError(f"--selected-ranks {' '.join(map(str, options.selected_ranks))}: no such rank among the dumps "
                         f"(ranks {format_ranks(tuple(dumps))})")
    if options.pg_filters:
        known = {g.name for g in table.groups} | {g.desc for g in table.groups}
        if not set(options.pg_filters) & known:
            names = ", ".join(sorted(printable(n) for n in known if n))[:200]
            raise UsageError(f"--pg-filters {printable(' '.join(options.pg_filters))}: no group has that name or desc "
                             f"(groups: {names})")


def run(options: Options, out: TextIO, err: TextIO) -> int:
    """Analyze the dumps as the options say, write the outputs, return the exit code."""
    if options.timeout is not None:  # before the workers start: they take it with them
        from .reading import remote

        remote.TIMEOUT = options.timeout
    with discovered_through(options.trace_dir, options.prefix, options.ray, options.node_local,
                            options.timeout) as (discovery, cluster):
        plans = plan_outputs(_requested_outputs(options), options.trace_dir, discovery.identities)
        loaded, table = load_set(discovery, options.trace_dir, options.prefix, err, jobs=options.jobs,
                                 progress=options.progress, ft_group_world_size=options.ft_group_world_size,
                                 times=_reads_times(options), cluster=cluster)
    if options.just_print_entries:
        _check_selection(options, loaded.dumps, table)
        printed(out, lambda: render_entries(loaded.dumps, table, out, selected_ranks=options.selected_ranks,
                                             pg_filters=options.pg_filters))
        return EXIT_CLEAN

    result = analyzed(loaded, table, options.trace_dir, discovery.identities)
    analysis = result.analysis
    status = EXIT_CLEAN if analysis.verdict == "clean" else EXIT_FOUND
    trace_ranks = _trace_limit(options, loaded.dumps) if options.chrome_trace else None
    with Outputs(plans) as outputs:
        try:
            for plan in plans:
                stage_output(outputs, plan.flag, result, trace_ranks, options.trace_last, options.command)
        except OutputError as exc:  # while staging: nothing was replaced yet
            raise OutputError(f"{exc}{outputs.written_note()}") from None
        except KeyboardInterrupt as exc:
            raise Interrupted(outputs.written_note()) from exc
        try:
            outputs.commit()  # an OutputError from here says what was and was not written
        except KeyboardInterrupt as exc:  # held off during the commit: lands when it is over
            raise Interrupted(outputs.written_note()) from exc
        outputs.confirm(err)
    if trace_ranks != options.trace_ranks:  # a big job's default limit: said, with the way round it
        shown = len(chosen_ranks(analysis, loaded.dumps, table, DEFAULT_TRACE_RANKS))
        print(f"frtrace: --chrome-trace holds {shown} of {len(loaded.dumps)} ranks (the culprits, their peers and "
              f"{DEFAULT_TRACE_RANKS} others); '--trace-ranks all' writes every rank", file=err)
    if "-" not in (options.json_path, options.markdown):  # the JSON or the summary is standard output's whole
        def report() -> None:
            out.write(result.text(verbose=options.verbose, print_stack_trace=options.print_stack_trace,
                                  mismatch_cap=options.mismatch_cap))
            if options.stats:
                from .outputs.stats import compute_stats, render_stats

                render_stats(compute_stats(analysis, loaded.dumps), out)
        printed(out, report)
    if options.strict and loaded.skipped:
        print(f"frtrace: --strict: {len(loaded.skipped)} file(s) skipped; failing", file=err)
        return EXIT_ERROR
    return status


class Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP, with what had been written by then."""


def _on_signal(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _internal_error(exc: BaseException, where: str, traceback_text: str) -> int:
    try:
        fd, path = tempfile.mkstemp(prefix="frtrace-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(traceback_text)
        saved = f"with the traceback in {path}"
    except OSError:
        saved = "the traceback could not be saved"
    _say(f"internal error: {where}{printable(str(exc))[:200]}; please report this, {saved}")
    return EXIT_INTERNAL


def _say(line: str) -> None:
    """One line on stderr; a stderr that cannot take it does not turn into a traceback."""
    if sys.stderr is None:  # closed: print(file=None) would write to stdout, into the report
        return
    try:
        print(f"frtrace: {printable(line)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _open_standard_streams() -> dict[str, TextIO | None]:
    """Standard streams a run can use even when the caller closed them (`frtrace ... >&-`): a closed
    descriptor 0, 1 or 2 is opened on /dev/null, so that no file frtrace opens later takes its
    number (messages would land in it), and a missing sys.stdout or sys.stderr writes there.
    Returns what was replaced, by name, for main to put back."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:  # closed: the lowest free descriptor is this one
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    replaced = {}
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name) is None:
            replaced[name] = None
            setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))
    return replaced


def parse_schema(argv: list[str]) -> str:
    parser = _Parser(prog="frtrace schema", description="Print the JSON Schema of a JSON output: "
                     "the report (frtrace -d DIR --json PATH) or frtrace compare's (--json PATH).")
    parser.add_argument("which", nargs="?", default="report", metavar="report|compare")
    which = parser.parse_args(argv).which
    if which not in SCHEMAS:
        raise UsageError(f"frtrace schema {printable(which[:64])}: no such schema; give report or compare")
    return which


def run_schema(which: str, out: TextIO) -> int:
    out.write(schema_text(which))
    return EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the frtrace command; returns the exit code."""
    # The records are millions of small tuples with no reference cycles: the cyclic garbage
    # collector would only rescan them again and again (it tripled the load time at 256 ranks).
    collecting = gc.isenabled()
    gc.disable()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):  # handled like Ctrl-C: nothing half-written stays
            previous[signum] = signal.signal(signum, _on_signal)
    argv = list(sys.argv[1:] if argv is None else argv)
    replaced = _open_standard_streams()
    try:
        if argv[:1] == ["replay"]:
            return run_replay(parse_replay(argv[1:]), TerminalSafe(sys.stdout), TerminalSafe(sys.stderr))
        if argv[:1] == ["compare"]:
            return run_compare(parse_compare(argv[1:]), TerminalSafe(sys.stdout), TerminalSafe(sys.stderr))
        if argv[:1] == ["live"]:
            return run_live(parse_live(argv[1:]), TerminalSafe(sys.stdout), TerminalSafe(sys.stderr))
        if argv[:1] == ["schema"]:
            return run_schema(parse_schema(argv[1:]), sys.stdout)
        if argv[:1] == ["mcp"]:
            from .mcp_server import main as serve_mcp

            return serve_mcp(argv[1:])
        options = parse_options(argv, stderr_is_tty=sys.stderr.isatty())
        status = run(options, TerminalSafe(sys.stdout), TerminalSafe(sys.stderr))
        if "stdout" in replaced:
            _say("standard output is closed: the report was not printed (the exit status is the verdict's)")
        return status
    except FrtraceError as exc:
        _say(str(exc))
        return exc.exit_code
    except Interrupted as exc:
        signum = _signal_number(exc.__cause__)
        _say(f"interrupted by {signal.Signals(signum).name}{exc}")
        return 128 + signum
    except KeyboardInterrupt as exc:
        signum = _signal_number(exc)
        _say(f"interrupted by {signal.Signals(signum).name}; no output file was written or changed")
        return 128 + signum
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_CLEAN
    except BrokenPipeError:  # while printing --help
        silence_stdout()
        return EXIT_CLEAN
    except InternalError as exc:
        return _internal_error(exc.summary, f"while reading {exc.where}: ", exc.traceback_text)
    except Exception as exc:  # a bug of ours: one line and a file, never exit 1 (a verdict)
        return _internal_error(exc, f"{type(exc).__name__}: ", traceback.format_exc())
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if collecting:
            gc.enable()
        for name, stream in replaced.items():
            getattr(sys, name).flush()
            setattr(sys, name, stream)


def parse_live(argv: Sequence[str]) -> LiveOptions:
    parser = _Parser(prog="frtrace live",
                     description="Read a job that is running (or hanging) now from PyTorch's debug server: every rank's "
                                 "Flight Recorder and Python stacks, kept as a dump set and analysed.",
                     epilog="Exit status: 0 clean, 1 a desync or hang found, 2 usage, connection or output error, "
                            "3 internal error. The debug server is unauthenticated HTTP: use it on trusted networks only.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", metavar="HOST:PORT",
                       help="the job's store (MASTER_ADDR:MASTER_PORT), which holds each rank's worker address "
                            "(needs torch, as every training host has)")
    where.add_argument("--workers", nargs="+", metavar="URL",
                       help="each rank's debug-server worker, http://HOST:PORT, in rank order")
    where.add_argument("--workers-file", metavar="FILE",
                       help="a file of the workers' addresses, one per line in rank order ('#' starts a comment)")
    parser.add_argument("--world", type=int, metavar="N", help="the job's ranks (default: as many as the store holds)")
    parser.add_argument("-O", "--out-dir", metavar="DIR",
                        help="the new folder to keep the snapshot in (default: frtrace-live-<date>-<time>)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds each rank has to answer (default 10)")
    parser.add_argument("--interval", type=float, default=3.0, metavar="S",
                        help="seconds between the two snapshots that tell a moving job from a stuck one (default 3; "
                             "0: one snapshot)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON report here ('-' for stdout)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="read the snapshot in N processes")
    args = parser.parse_args(argv)
    if not 0 <= args.interval <= 3600:
        raise UsageError(f"--interval must be between 0 and 3600 seconds, not {args.interval}")
    if not 0 < args.timeout <= 3600:
        raise UsageError(f"--timeout must be above 0 and at most 3600 seconds, not {args.timeout}")
    jobs = _jobs(args.jobs)
    if args.world is not None and not 0 < args.world <= 1 << 20:
        raise UsageError(f"--world must be between 1 and {1 << 20}, not {args.world}")
    if args.workers_file:
        from .live.fetch import read_workers_file

        args.workers = read_workers_file(args.workers_file)
    if args.workers and args.world is not None and args.world != len(args.workers):
        raise UsageError(f"--world {args.world} but {len(args.workers)} --workers: give one address per rank")
    return LiveOptions(tuple(args.workers or ()), args.store, args.world, args.out_dir, args.timeout, args.interval,
                       args.json_path, jobs)


def parse_compare(argv: Sequence[str]) -> CompareOptions:
    parser = _Parser(prog="frtrace compare",
                     description="Compare two dump sets of one job, taken one after the other: which ranks moved, "
                                 "which froze, and (--timing) which ops got slower.",
                     epilog="Exit status: 0 progressing, 1 stuck or partly stuck, 2 usage, input or output error, "
                            "3 internal error.")
    parser.add_argument("earlier", metavar="A", help="the earlier dump set (folder or archive)")
    parser.add_argument("later", metavar="B", help="the later dump set of the same job")
    parser.add_argument("-p", "--prefix", help="file name prefix before the rank number, in both sets")
    parser.add_argument("--timing", action="store_true", help="per-op durations, A vs B, most slowed down first")
    parser.add_argument("--head", type=int, default=20, metavar="N", help="with --timing: the first N ops (default 20)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="write the comparison as JSON ('-' for stdout)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="read dump files in N processes")
    args = parser.parse_args(argv)
    if args.head < 1:
        raise UsageError(f"--head must be at least 1, not {args.head}")
    return CompareOptions(args.earlier, args.later, args.prefix, args.timing, args.head, args.json_path,
                          _jobs(args.jobs))


def parse_replay(argv: Sequence[str]) -> ReplayOptions:
    parser = _Parser(prog="frtrace replay",
                     description="Write a runnable replay of a dump set's communication: run it with "
                                 "python -m frtrace.replay OUT_DIR (needs torch: pip install 'frtrace[replay]').")
    parser.add_argument("trace_dir", metavar="DIR", help="the dump set (folder or archive)")
    parser.add_argument("-o", "--output", dest="out_dir", required=True, metavar="OUT_DIR",
                        help="a new (or empty) folder for the replay")
    parser.add_argument("-p", "--prefix", help="file name prefix before the rank number")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--as-recorded", dest="mode", action="store_const", const="as-recorded",
                       help="replay each rank's ops as recorded: reproduces the desync (default)")
    modes.add_argument("--majority", dest="mode", action="store_const", const="majority",
                       help="every rank runs a healthy rank's program on its own groups: the culprit's deviation is gone")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="read dump files in N processes")
    args = parser.parse_args(argv)
    return ReplayOptions(args.trace_dir, args.out_dir, args.mode or "as-recorded", args.prefix, _jobs(args.jobs))


def _signal_number(exc: BaseException | None) -> int:
    name = exc.args[0] if exc is not None and exc.args else ""
    return getattr(signal, name, signal.SIGINT) if isinstance(name, str) and name.startswith("SIG") else signal.SIGINT
