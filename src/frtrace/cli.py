"""Command line: argv -> Options -> run -> exit code. The only module that prints or exits."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from . import __version__
from .builder import build_database, write_database
from .discover import find_dump_files
from .errors import FrtraceError, UsageError
from .groups import resolve_groups
from .loader import load_dumps
from .matcher import analyze
from .output import atomic_path, check_writable, write_atomically
from .report import render_entries, render_text, report_dict
from .sqlite_out import write_sqlite
from .stats import compute_stats, render_stats
from .timeline import write_chrome_trace

EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


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
    sqlite: str | None = None
    stats: bool = False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line through main's error path, not usage + exit
        raise UsageError(f"{message}; see frtrace --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="frtrace",
        description="Find the rank that desynced a hung PyTorch job, from its Flight Recorder dumps.",
        epilog="Exit status: 0 clean, 1 desync, stuck or inconclusive, 2 usage or input error.",
    )
    parser.add_argument("trace_dir", nargs="?", help="directory holding one dump per rank (same as -d)")
    parser.add_argument("-d", "--dir", dest="dir_option", metavar="DIR", help="directory holding one dump per rank")
    parser.add_argument("-p", "--prefix", help="file name prefix before the rank number (default: inferred from the names)")
    parser.add_argument("-o", "--output", metavar="DB", help="write the flattened database here, as a pickle of (types, db)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON report here ('-' for stdout)")
    parser.add_argument("--chrome-trace", metavar="PATH", help="write a timeline for Perfetto UI / chrome://tracing")
    parser.add_argument("--sqlite", metavar="PATH", help="write the database and every raw entry as SQLite tables")
    parser.add_argument("--stats", action="store_true", help="print per-op statistics and the ranks that arrive last")
    parser.add_argument("-j", "--just-print-entries", "--just_print_entries", dest="just_print_entries", action="store_true",
                        help="print the entries side by side, one column per rank, and skip the analysis")
    parser.add_argument("--selected-ranks", "--selected_ranks", dest="selected_ranks", type=int, nargs="+", metavar="RANK",
                        help="with -j: only these ranks' columns")
    parser.add_argument("--pg-filters", "--pg_filters", dest="pg_filters", nargs="+", metavar="NAME",
                        help="with -j: only groups with this name or desc")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every note, not only the first five")
    parser.add_argument("--print-stack-trace", "--print_stack_trace", dest="print_stack_trace", action="store_true",
                        help="print the stack of every offending rank's op, not only the culprits'")
    parser.add_argument("--mismatch-cap", "--mismatch_cap", dest="mismatch_cap", type=int, default=10, metavar="N",
                        help="print at most N findings (default 10; 0 for all)")
    parser.add_argument("--allow-incomplete-ranks", "--allow_incomplete_ranks", dest="allow_incomplete_ranks", action="store_true",
                        help="accepted for torchfrtrace compatibility: missing ranks never stop frtrace")
    parser.add_argument("--transform-ft", "--transform_ft", dest="transform_ft", action="store_true",
                        help="torchft: shift each replica group's default-group ranks to global ranks")
    parser.add_argument("--group-world-size", "--group_world_size", dest="group_world_size", type=int, metavar="N",
                        help="ranks per torchft replica group (needed by --transform-ft)")
    parser.add_argument("--strict", action="store_true", help="exit 2 when any file was skipped (for CI)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="read dump files in N processes (default: the number of cores)")
    parser.add_argument("--version", action="version", version=f"frtrace {__version__}")
    return parser


def parse_options(argv: Sequence[str] | None, stderr_is_tty: bool = False) -> Options:
    """Options from argv; UsageError for arguments that cannot work together."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.trace_dir and args.dir_option and args.trace_dir != args.dir_option:
        raise UsageError(f"two dump directories given ({args.trace_dir} and -d {args.dir_option}); pass one")
    trace_dir = args.dir_option or args.trace_dir
    if not trace_dir:
        raise UsageError("no dump directory given; run as: frtrace -d DUMP_DIR [-o db.pkl]")
    if (args.selected_ranks or args.pg_filters) and not args.just_print_entries:
        raise UsageError("--selected-ranks and --pg-filters choose what -j/--just-print-entries prints; add -j")
    if args.transform_ft and not args.group_world_size:
        raise UsageError("--transform-ft needs --group-world-size N, the number of ranks in one replica group")
    if args.group_world_size is not None and args.group_world_size < 1:
        raise UsageError(f"--group-world-size must be a positive number of ranks, not {args.group_world_size}")
    outputs = [(flag, path) for flag, path in (("-o", args.output), ("--json", args.json_path),
                                               ("--chrome-trace", args.chrome_trace), ("--sqlite", args.sqlite)) if path]
    for i, (flag, path) in enumerate(outputs):
        for other_flag, other in outputs[i + 1:]:
            if path == other:
                raise UsageError(f"{flag} and {other_flag} both name {path}; give them different files")
    if args.sqlite == "-" or args.chrome_trace == "-":
        raise UsageError("--sqlite and --chrome-trace write files; give a file name, not '-'")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    if args.output == "-":
        raise UsageError("-o writes a binary pickle; give a file name, not '-'")
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
        jobs=args.jobs,
        chrome_trace=args.chrome_trace,
        sqlite=args.sqlite,
        stats=args.stats,
    )


def run(options: Options) -> int:
    """Analyze the dumps as the options say, write the outputs, return the exit code."""
    for path, what in ((options.output, "database"), (options.json_path, "JSON report"),
                       (options.chrome_trace, "Chrome trace"), (options.sqlite, "SQLite database")):
        if path:
            check_writable(path, what)

    discovery = find_dump_files(options.trace_dir, options.prefix)
    if not discovery.files:
        hint = f" starting with {options.prefix!r}" if options.prefix else ""
        dynamic = " (dumps written with TORCH_FR_DUMP_DYNAMIC_FILE_NAME=1 carry no rank: rename each to <prefix><rank>)" if discovery.ignored else ""
        raise UsageError(f"{options.trace_dir}: no dump files{hint}, that is, no names ending in a rank number{dynamic}; "
                         "check the directory and --prefix")
    loaded = load_dumps(discovery, progress=options.progress and len(discovery.files) > 8, workers=options.jobs)
    for item in loaded.skipped:
        print(f"frtrace: skipped {item.path}: {item.reason}", file=sys.stderr)
    if not loaded.dumps:
        raise UsageError(f"{options.trace_dir}: none of the {len(discovery.files)} dump file(s) could be read; see the messages above")

    table = resolve_groups(loaded.dumps, loaded.ranks_named, options.ft_group_world_size)
    if options.just_print_entries:
        render_entries(loaded.dumps, table, sys.stdout, selected_ranks=options.selected_ranks, pg_filters=options.pg_filters)
        return EXIT_CLEAN

    analysis = analyze(loaded.dumps, table, notes=loaded.notes)
    if options.output or options.sqlite:
        db = build_database(analysis, loaded.dumps, table)
        if options.output:
            write_atomically(options.output, "database", lambda f: write_database(db, f), binary=True)
        if options.sqlite:
            with atomic_path(options.sqlite, "SQLite database") as temp:
                write_sqlite(db, loaded.dumps, table, temp)
    if options.chrome_trace:
        write_atomically(options.chrome_trace, "Chrome trace", lambda f: write_chrome_trace(analysis, loaded.dumps, table, f))
    if options.json_path:
        payload = report_dict(analysis, loaded.skipped)
        write_atomically(options.json_path, "JSON report", lambda f: f.write(json.dumps(payload, indent=2) + "\n"))
    if options.json_path != "-":
        render_text(analysis, loaded.dumps, loaded.skipped, sys.stdout, mismatch_cap=options.mismatch_cap,
                    print_stack_trace=options.print_stack_trace, verbose=options.verbose)
        if options.stats:
            render_stats(compute_stats(analysis, loaded.dumps), sys.stdout)
    if options.strict and loaded.skipped:
        print(f"frtrace: --strict: {len(loaded.skipped)} file(s) skipped; failing", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_CLEAN if analysis.verdict == "clean" else EXIT_FOUND


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the frtrace command; returns the exit code."""
    # The records are millions of small tuples with no reference cycles: the cyclic garbage
    # collector would only rescan them again and again (it tripled the load time at 256 ranks).
    collecting = gc.isenabled()
    gc.disable()
    try:
        options = parse_options(argv, stderr_is_tty=sys.stderr.isatty())
        return run(options)
    except FrtraceError as exc:
        print(f"frtrace: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("frtrace: interrupted; no output file was written or changed", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_CLEAN
    except BrokenPipeError:
        # the reader of our stdout went away (| head): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLEAN
    finally:
        if collecting:
            gc.enable()
