"""Find the per-rank dump files in a directory, without opening anything that is not a file.

A file is a dump candidate only when its name ends in a plausible rank number and its first
bytes look like a pickle or JSON document: a stray `core.100` or `notes_20240521` beside the dumps
must not stretch the job to a hundred or twenty million ranks.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace

from .errors import UsageError, display_path
from .limits import MAX_DUMP_BYTES, MAX_RANK
from .types import SkippedFile

HEAD_BYTES = 64

_FORMAT_SUFFIXES = {".json": "json", ".pkl": "pickle", ".pickle": "pickle"}
_RANK_AT_END = re.compile(r"^(.*?)(\d+)$", re.DOTALL)
_MAX_RANK_DIGITS = len(str(MAX_RANK))
BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark, which some JSON writers put first
# A pickle starts with PROTO (protocol 2 and later), or, in protocols 0 and 1, with the opening
# of the top-level dict or list: MARK, EMPTY_DICT or EMPTY_LIST.
_PICKLE_STARTS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05", b"(", b"}", b"]")


def sniff(head: bytes) -> str | None:
    """"pickle" or "json" when the first bytes of a file can start a dump; None when they cannot."""
    if head.startswith(_PICKLE_STARTS):
        return "pickle"
    text = head.removeprefix(BOM)
    if text.lstrip()[:1] in (b"{", b"["):
        return "json"
    return None


@dataclass(frozen=True, slots=True)
class DumpFile:
    path: str
    rank: int
    prefix: str  # the name before the rank digits
    file_format: str  # "pickle" or "json", sniffed from the first bytes (from the name when empty)
    stem: str = ""  # the path without a format suffix: a pickle and a JSON of one dump share it
    where: str = ""  # the path under the dump folder, as a person names the file
    host: str | None = None  # the host the folder or the name shows, where one does


@dataclass(frozen=True, slots=True)
class Discovery:
    files: tuple[DumpFile, ...]  # in rank order; per rank the pickle before its JSON twin
    skipped: tuple[SkippedFile, ...]  # named like a dump but not a regular file, or too big
    ignored: tuple[SkippedFile, ...] = ()  # not dumps (README, expected.json, core.100), with why


def _kind_of(mode: int) -> str | None:
    """A human name for what is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (reading it would block forever)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def placed(path: str, where: str, parts: tuple[str, int, str, str], file_format: str | None = None) -> DumpFile:
    """The DumpFile known as `path` that sits at `where` under the dump folder or archive, with
    `parts` from split_name: its stem keeps its folder (a pickle and its JSON twin share both), its
    host is its first folder (node-a/nccl_trace_rank_3)."""
    prefix, rank, guessed, stem = parts
    folder = os.path.dirname(where)
    return DumpFile(path, rank, prefix, file_format or guessed, os.path.join(folder, stem), where,
                    folder.replace(os.sep, "/").split("/")[0] or None)


def split_name(name: str, prefix: str | None) -> tuple[str, int, str, str] | str:
    """(prefix, rank, format guessed from the suffix, stem) of a dump-like name, else the reason
    the name is not one. The rank is the name's trailing number; `prefix` must occur somewhere in
    the name before it (as torchfrtrace matches it: host names often come first or in between)."""
    stem, suffix = os.path.splitext(name)
    file_format = _FORMAT_SUFFIXES.get(suffix.lower())
    if file_format is None:
        stem, file_format = name, "pickle"
    match = _RANK_AT_END.match(stem)
    if match is None:
        return "the name does not end in a rank number"
    head, digits = match.group(1), match.group(2)
    if prefix is not None and prefix not in head:
        return f"the name does not hold --prefix {prefix!r} before its rank number"
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_RANK_DIGITS or int(digits) >= MAX_RANK:
        return f"its number {digits[:24]} is too large for a rank (at most {MAX_RANK - 1})"
    return head, int(digits), file_format, stem


def _read_head(path: str) -> tuple[os.stat_result, bytes]:
    """stat and first bytes of a regular file, opened non-blocking and checked again: a FIFO
    that replaced the file since it was listed never blocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        return info, os.read(fd, HEAD_BYTES) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)


def find_dump_files(directory: str, prefix: str | None = None) -> Discovery:
    """List the dump files of `directory` and its subfolders: rank from the trailing digits of
    each name, host from the subfolder (node-a/nccl_trace_rank_3) or from the names.

    `prefix` (a bare name or a path prefix such as /tmp/nccl_trace_rank_) restricts the names to
    those holding it. Only regular files whose first bytes can start a dump are returned; FIFOs,
    sockets, linked folders and broken links are skipped with a reason; other files are ignored
    with one. Two different files claiming one rank (in two folders, or rank_3 and rank_03) is a
    UsageError naming both, unless they are the pickle and the JSON of one dump.
    """
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise UsageError(f"{display_path(directory)}: cannot read the dump directory ({exc.strerror}); "
                         "pass the directory that holds the per-rank dumps") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{display_path(directory)}: not a directory; pass the directory that holds the per-rank dumps")
    if prefix is not None:
        prefix = os.path.basename(prefix)

    candidates: list[DumpFile] = []
    empty: list[DumpFile] = []
    skipped: list[SkippedFile] = []
    ignored: list[SkippedFile] = []
    for path, where in _walk(directory):
        name = os.path.basename(path)
        printable = display_path(path)
        parts = split_name(name, prefix)
        if isinstance(parts, str):
            ignored.append(SkippedFile(printable, parts))
            continue
        try:
            info = os.stat(path)  # follows links; a loop or dangling link raises
        except OSError as exc:
            skipped.append(SkippedFile(printable, f"cannot stat it ({exc.strerror})"))
            continue
        kind = _kind_of(info.st_mode)
        if kind is None:
            try:
                info, head = _read_head(path)
            except OSError as exc:
                skipped.append(SkippedFile(printable, f"cannot open it ({exc.strerror}); check its permissions"))
                continue
            kind = _kind_of(info.st_mode)
        if kind is not None:
            skipped.append(SkippedFile(printable, f"{kind}; not read"))
            continue
        dump_file = placed(path, where, parts)
        if not head:
            empty.append(dump_file)
            continue
        file_format = sniff(head)
        if file_format is None:
            ignored.append(SkippedFile(printable, "its first bytes are not those of a pickle or JSON dump"))
            continue
        if info.st_size > MAX_DUMP_BYTES:
            skipped.append(SkippedFile(printable, f"{info.st_size >> 20} MiB, more than the {MAX_DUMP_BYTES >> 20} MiB "
                                                  "a Flight Recorder dump can hold; not read"))
            continue
        candidates.append(replace(dump_file, file_format=file_format))

    return finish(candidates, empty, skipped, ignored)


def finish(candidates: list[DumpFile], empty: list[DumpFile], skipped: list[SkippedFile], ignored: list[SkippedFile]) -> Discovery:
    """The Discovery of the dump-like files found (in a folder or an archive): empty files kept
    only beside dumps of their name, hosts from the names, files in rank order, and a UsageError
    where two files claim one rank."""
    # An empty file is a rank killed before it dumped when its name is that of the dumps beside it.
    dump_prefixes = {f.prefix for f in candidates}
    for dump_file in empty:
        if dump_file.prefix in dump_prefixes:
            candidates.append(dump_file)
        else:
            ignored.append(SkippedFile(display_path(dump_file.path), "empty, and no dump beside it shares its name"))

    candidates = _with_hosts_from_names(candidates)
    candidates.sort(key=lambda f: (f.rank, f.file_format != "pickle", f.path))
    by_rank: dict[int, DumpFile] = {}
    for dump_file in candidates:
        first = by_rank.setdefault(dump_file.rank, dump_file)
        if first.stem != dump_file.stem:
            raise UsageError(
                f"two dump files claim rank {dump_file.rank}: {display_path(first.path)} and {display_path(dump_file.path)}; "
                "move the one that does not belong out of the folder, or choose one name with --prefix")
    return Discovery(tuple(candidates), tuple(skipped), tuple(ignored))


_MAX_DEPTH = 8  # folders below the dump folder that are searched (host/job/attempt/... is deep enough)


def _walk(directory: str):
    """(path, path under `directory`) of every entry below it, in name order: files of every
    subfolder (one per host is how people gather dumps), never through a linked folder (no loops),
    not into hidden folders, at most _MAX_DEPTH deep."""
    pending = [("", 0)]
    while pending:
        relative, depth = pending.pop()
        here = os.path.join(directory, relative) if relative else directory
        try:
            names = sorted(os.listdir(here), reverse=True)
        except OSError as exc:
            if not relative:
                raise UsageError(f"{display_path(directory)}: cannot list the directory ({exc.strerror}); check its permissions") from None
            continue
        files = []
        for name in names:
            if name.startswith("."):  # hidden: editors' and frtrace's own temporary files
                continue
            below = os.path.join(relative, name)
            path = os.path.join(directory, below)
            if os.path.isdir(path) and not os.path.islink(path):
                if depth < _MAX_DEPTH:
                    pending.append((below, depth + 1))
                continue
            files.append((path, below))
        yield from reversed(files)


def _with_hosts_from_names(files: list[DumpFile]) -> list[DumpFile]:
    """Hosts for the files whose folder shows none, from their names: what differs between the
    names before the rank (trace_host-node01_5 and trace_host-node02_9: host-node01, host-node02)."""
    heads = sorted({f.prefix for f in files if f.host is None})
    if len(heads) < 2:
        return files
    common = os.path.commonprefix(heads)
    cut = max(common.rfind("_"), common.rfind("/")) + 1  # host names hold hyphens and dots: fields end at "_"
    hosts = {head: head[cut:].strip("_-.") or None for head in heads}
    return [f if f.host is not None else replace(f, host=hosts[f.prefix]) for f in files]
