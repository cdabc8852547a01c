"""Find the per-rank dump files in a directory, without opening anything that is not a file.

A file is a dump candidate only when its name ends in a plausible rank number and its first
bytes look like a pickle or JSON document: a stray `core.100` or `notes_20240521` beside the dumps
must not stretch the job to a hundred or twenty million ranks.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter

from ..errors import UsageError, display_path, printable
from .limits import MAX_DUMP_BYTES, MAX_RANK, open_file, over_the_cap, read_small
from ..types import SkippedFile

HEAD_BYTES = 64
MARKED_BYTES = 4096  # read from each dump-like file to look for a Flight Recorder key
# Keys only a Flight Recorder dump starts with (a pickle's or a JSON's first few hundred bytes):
# between two sets of files in one folder, the one that holds them is the job's.
_MARKERS = (b"pg_config", b"entries", b"profiling_name", b"collective_seq_id", b"record_id", b"pg_status",
            b"comm_lib_version", b"nccl_version")

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
    source: str = ""  # the file to read where it is not `path`: the copy of an archive's members
    span: tuple[int, int] | None = None  # (offset, length) of this member's bytes in `source`

    def __reduce__(self):
        """Pickled as its fields in order (a node's listing crosses to the caller, --node-local):
        unpickled by one call of the class, half the caller's CPU of a frozen dataclass's own way,
        which sets each field from Python."""
        return DumpFile, tuple(getattr(self, f.name) for f in fields(self))


@dataclass(frozen=True, slots=True)
class Discovery:
    files: tuple[DumpFile, ...]  # in rank order; per rank the pickle before its JSON twin
    skipped: tuple[SkippedFile, ...]  # what could not be read that claims no rank: an archive's damaged end
    ignored: tuple[SkippedFile, ...] = ()  # not dumps of this job (README, expected.json, core.100, rng_state_7), with why
    unread: tuple[tuple[DumpFile, str], ...] = ()  # files of the job's ranks that cannot be read (and why): ranks named
    identities: frozenset[tuple[int, int]] = frozenset()  # (device, inode) of every file looked at: never an output
    stacks: tuple[tuple[int, str], ...] = ()  # (rank, path) of the Python stack files beside the dumps (stack_rank)


@dataclass
class Found:
    """What a folder or an archive holds, sorted as it is walked; finish() makes it a Discovery."""

    candidates: list[DumpFile] = field(default_factory=list)  # dump-like: named with a rank, starting like a dump
    empty: list[DumpFile] = field(default_factory=list)  # named with a rank, and empty
    unreadable: list[tuple[DumpFile, str]] = field(default_factory=list)  # regular files named with a rank, unusable: why
    not_files: list[tuple[DumpFile, str]] = field(default_factory=list)  # named with a rank, not a regular file: what it is
    ignored: list[SkippedFile] = field(default_factory=list)  # not named like a dump
    skipped: list[SkippedFile] = field(default_factory=list)  # not read, and claiming no rank
    marked: set[str] = field(default_factory=set)  # paths of candidates that hold a Flight Recorder key near their start
    stacks: list[tuple[int, str]] = field(default_factory=list)  # (rank, path) of stack files
    identities: set[tuple[int, int]] = field(default_factory=set)

    def sniffed(self, dump_file: DumpFile, head: bytes) -> None:
        """Sort a dump-named file by its first bytes: a candidate, or unreadable with the reason."""
        file_format = sniff(head)
        if file_format is None:
            self.unreadable.append((dump_file, f"its first bytes are not those of a pickle or JSON dump{_archive_hint(head)}"))
            return
        if file_format != dump_file.file_format:  # else it is the one its name said
            dump_file = replace(dump_file, file_format=file_format)
        self.candidates.append(dump_file)
        if any(marker in head for marker in _MARKERS):
            self.marked.add(dump_file.path)


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


_ARCHIVE_STARTS = ((b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"),
                   (b"\xfd7zXZ\x00", "xz"))


def archive_kind(head: bytes) -> str | None:
    """"zip", "tar", "gzip", "bzip2" or "xz" when the first bytes are an archive's (a tar's
    "ustar" at byte 257), else None. By content from the first byte: a zip's directory at the
    end of a file (what zipfile.is_zipfile looks for) is also at the end of a tar holding a zip."""
    for start, kind in _ARCHIVE_STARTS:
        if head.startswith(start):
            return kind
    return "tar" if head[257:262] == b"ustar" else None


def _archive_hint(head: bytes) -> str:
    kind = archive_kind(head)
    return f" (it is a {kind} archive: extract it, or pass it to frtrace on its own)" if kind else ""


def _read_head(path: str) -> tuple[os.stat_result, bytes]:
    """stat and first bytes of a regular file, opened non-blocking and checked again: a FIFO
    that replaced the file since it was listed never blocks."""
    fd = open_file(path)
    try:
        info = os.fstat(fd)
        return info, os.read(fd, MARKED_BYTES) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)


def find_dump_files(directory: str, prefix: str | None = None) -> Discovery:
    """List the dump files of `directory` and its subfolders: rank from the trailing digits of
    each name, host from the subfolder (node-a/nccl_trace_rank_3) or from the names.

    `prefix` (a bare name or a path prefix such as /tmp/nccl_trace_rank_) restricts the names to
    those holding it. Only regular files whose first bytes can start a dump are returned, and of
    those only the job's (job_files); files named like the job's dumps that cannot be read (other
    first bytes, too big, FIFOs, sockets, linked folders, broken links) are skipped with a reason,
    their ranks named where they are regular files; other files are ignored with one. Two
    different files claiming one rank (in two folders, or rank_3 and rank_03) is a UsageError
    naming both, unless they are the pickle and the JSON of one dump.
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
    if (pair := _live_pair(directory)) is not None:  # frtrace live's two snapshots: the later is the set
        earlier, later = pair
        read = find_dump_files(later, prefix)
        said = (f"frtrace live's earlier snapshot; the later one, {display_path(later)}, is read (frtrace compare "
                f"{display_path(earlier)} {display_path(later)} compares them)")
        return replace(read, ignored=(*read.ignored, SkippedFile(display_path(earlier) + os.sep, said)))

    found = walked(directory, prefix)
    live_snapshot_in(directory, found)
    return finish(found, prefix is not None)


def walked(directory: str, prefix: str | None = None) -> Found:
    """What the folder `directory` holds, sorted as find_dump_files sorts it (`prefix` a bare
    name), before the job's files are chosen (finish)."""
    found = Found()
    for path, where, regular in _walk(directory):
        if (rank := stack_rank(where)) is not None:
            found.stacks.append((rank, path))
            continue
        parts = split_name(os.path.basename(path), prefix)
        if isinstance(parts, str):
            found.ignored.append(SkippedFile(display_path(path), parts))
            continue
        dump_file = placed(path, where, parts)
        kind = None
        if not regular:  # a link, or what the listing did not say: stat'ed first, never opened where it is no file
            try:
                info = os.stat(path)  # follows links; a loop or dangling link raises
            except OSError as exc:
                found.not_files.append((dump_file, f"cannot stat it ({exc.strerror})"))
                continue
            kind = _kind_of(info.st_mode)
        if kind is None:  # opened non-blocking and checked again (_read_head): a FIFO put there since never blocks
            try:
                info, head = _read_head(path)
            except OSError as exc:
                found.unreadable.append((dump_file, f"cannot open it ({exc.strerror}); check its permissions"))
                continue
            kind = _kind_of(info.st_mode)
        found.identities.add((info.st_dev, info.st_ino))
        if kind is not None:
            found.not_files.append((dump_file, f"{kind}; not read"))
        elif info.st_size > MAX_DUMP_BYTES:
            found.unreadable.append((dump_file, over_the_cap(MAX_DUMP_BYTES, info.st_size)))
        elif not head:
            found.empty.append(dump_file)
        else:
            found.sniffed(dump_file, head)
    return found


MAX_MANIFEST_BYTES = 16 << 20  # a snapshot of a million ranks' addresses and times
UNANSWERED = "did not answer frtrace live"  # the reason a snapshot's silent rank is unread (api.analyzed reads it)
UNASKED = "had no address for frtrace live to ask"  # ... and of a rank with no debug server in the store (likewise)
# a snapshot folder as frtrace live writes it (live/fetch.py) and this module reads it back
SNAPSHOT_MANIFEST = "manifest.json"
SNAPSHOT_STACKS = "stacks"
SNAPSHOT_OTHER_RECORDER = "fr_trace_json"  # the backend-neutral recorder where NCCL's is the dump set


STACK_SUFFIXES = (".stacks", ".stacks.txt", ".stacks.json")
_TRAILING_RANK = re.compile(r"(\d{1,7})$")


def stack_rank(where: str) -> int | None:
    """The rank of a Python stack file, from its path under the dump folder: a file in a folder
    named `stacks` whose name ends in the rank (`stacks/rank_3.txt`, as frtrace live writes, or
    `stacks/3.json`), or one named like a dump with `.stacks` after it (`nccl_trace_rank_3.stacks`,
    `.stacks.txt`, `.stacks.json`); None for any other file."""
    parts = where.replace(os.sep, "/").split("/")
    name = parts[-1]
    if len(parts) > 1 and parts[-2] == SNAPSHOT_STACKS:
        stem = name.split(".", 1)[0]
    elif name.endswith(STACK_SUFFIXES):
        stem = name[: -len(next(s for s in STACK_SUFFIXES[::-1] if name.endswith(s)))]
    else:
        return None
    match = _TRAILING_RANK.search(stem)
    return int(match.group(1)) if match and int(match.group(1)) < MAX_RANK else None


def snapshot_dump_name(rank: int) -> str:
    return f"trace_rank_{rank}.json"


def _live_pair(directory: str) -> tuple[str, str] | None:
    """(a/, b/) where `directory` is what frtrace live keeps of two snapshots: no manifest of its
    own, and a/ and b/ each a snapshot folder (a manifest, not through a link)."""
    if os.path.lexists(os.path.join(directory, SNAPSHOT_MANIFEST)):
        return None
    halves = tuple(os.path.join(directory, name) for name in ("a", "b"))
    for half in halves:
        if os.path.islink(half) or not os.path.isdir(half):
            return None
        try:
            read_small(os.path.join(half, SNAPSHOT_MANIFEST), MAX_MANIFEST_BYTES, follow_links=False)
        except (OSError, ValueError):
            return None
    return halves


def live_snapshot_in(directory: str, found: Found, read=None) -> None:
    """A folder `frtrace live` wrote (its manifest.json lists the ranks it asked): the manifest and
    the stacks/ folder are its own, not stray files, and a rank that did not answer is a rank of the
    job whose dump could not be read, with why. `read(path, cap)` reads the manifest where it is
    not a local file (a store's object)."""
    path = os.path.join(directory, SNAPSHOT_MANIFEST)
    try:  # never through a link: a manifest elsewhere does not speak for this folder
        raw = read(path, MAX_MANIFEST_BYTES) if read else read_small(path, MAX_MANIFEST_BYTES, follow_links=False)
        manifest = json.loads(raw)
    except (OSError, ValueError, RecursionError):  # no manifest, or none to trust: not a snapshot
        return
    ranks = manifest.get("ranks") if isinstance(manifest, dict) else None
    if not isinstance(ranks, list) or not ranks or not all(
            isinstance(r, dict) and type(r.get("rank")) is int and 0 <= r["rank"] <= MAX_RANK and type(r.get("answered")) is bool
            for r in ranks):
        return
    own = display_path(path), display_path(os.path.join(directory, SNAPSHOT_STACKS)) + os.sep
    found.ignored = [item for item in found.ignored if item.path != own[0] and not item.path.startswith(own[1])]
    other = os.path.join(directory, SNAPSHOT_OTHER_RECORDER) + os.sep
    if any(f.path.startswith(other) for f in found.candidates):  # another buffer of the same ranks: never mixed in
        found.candidates = [f for f in found.candidates if not f.path.startswith(other)]
        found.empty = [f for f in found.empty if not f.path.startswith(other)]
        found.unreadable = [(f, why) for f, why in found.unreadable if not f.path.startswith(other)]
        found.not_files = [(f, why) for f, why in found.not_files if not f.path.startswith(other)]
        found.ignored.append(SkippedFile(display_path(other), "the ranks' backend-neutral recorder (gloo's ops), beside "
                                         "their NCCL recorder read here: frtrace -d on that folder analyses it"))
    for entry in ranks:
        if not entry["answered"]:
            rank, why = entry["rank"], printable(str(entry.get("error") or "no answer"))[:200]
            name = snapshot_dump_name(rank)
            if entry.get("asked") is False:  # never asked: nothing is known of its process
                said = f"rank {rank} {UNASKED} ({why}); whether its process is alive cannot be told"
            else:
                guess = ("its answer was another's: check its address" if entry.get("refused") is True else
                         "its process may be gone or its host unreachable")
                said = f"rank {rank} {UNANSWERED} ({why}); {guess}"
            found.unreadable.append((placed(os.path.join(directory, name), name, split_name(name, None)), said))


def finish(found: Found, prefix_given: bool = False) -> Discovery:
    """The Discovery of the dump-like files found (in a folder or an archive): the job's files
    (job_files), empty files kept only beside dumps of their name, hosts from the names, files
    in rank order, and a UsageError where two files claim one rank."""
    candidates, empty, unread, skipped, ignored = job_files(found, prefix_given)
    # An empty file is a rank killed before it dumped when its name is that of the dumps beside it.
    if candidates:
        candidates.extend(empty)
    else:
        ignored.extend(SkippedFile(display_path(f.path), "empty, and no dump beside it shares its name") for f in empty)

    candidates = _with_hosts_from_names(candidates)
    candidates.sort(key=lambda f: (f.rank, f.file_format != "pickle", f.path))
    by_rank: dict[int, DumpFile] = {}
    for dump_file in candidates:
        first = by_rank.setdefault(dump_file.rank, dump_file)
        if first is not dump_file and first.path == dump_file.path:  # one archive member's name twice (tar -r)
            raise UsageError(f"two dump files claim rank {dump_file.rank}: {display_path(first.path)} is in the archive "
                             "twice (appended again?); keep one copy, e.g. extract it and pass the folder")
        if first.stem != dump_file.stem:
            raise UsageError(
                f"two dump files claim rank {dump_file.rank}: {display_path(first.path)} and {display_path(dump_file.path)}; "
                "move the one that does not belong out of the folder, or choose one name with --prefix")
    return Discovery(tuple(candidates), tuple(skipped), tuple(ignored), tuple(unread), frozenset(found.identities),
                     tuple(found.stacks))


def family_key(prefix: str) -> str:
    """What the names of one job's files share: their prefix with each run of digits as one 0, so
    that numbered hosts and pids inside names (trace_host-node01_5, trace_host-node02_9) are one job."""
    return _DIGITS.sub("0", prefix)


_DIGITS = re.compile(r"\d+")
_FIELDS = re.compile(r"[_\-./]")


def families_of(files: list[DumpFile]) -> dict[str, list[DumpFile]]:
    """The files by job family: by family_key, then keys that differ in one field only (between
    `_ - . /`) joined where their ranks do not overlap: the host field of `trace_host-a5_0` and
    `trace_host-b7_1`. A stray `rng_state_7` or `metrics_3.json` shares no such shape with
    `nccl_trace_rank_<rank>`, and `gloo_trace_rank_3` overlaps its ranks."""
    by_key: dict[str, list[DumpFile]] = {}
    for dump_file in files:
        by_key.setdefault(family_key(dump_file.prefix), []).append(dump_file)
    keys = sorted(by_key, key=lambda k: (-len({f.rank for f in by_key[k]}), k))  # the biggest take the others in
    root = {key: key for key in keys}
    ranks = {key: {f.rank for f in by_key[key]} for key in keys}

    def find(key: str) -> str:
        while root[key] != key:
            key = root[key]
        return key

    shapes: dict[tuple, str] = {}  # the key with one field blanked -> the first key of that shape
    for key in keys:
        fields = _FIELDS.split(key)
        for i in range(len(fields)):
            shape = (len(fields), i, *fields[:i], *fields[i + 1:], *_FIELDS.findall(key))
            first = shapes.setdefault(shape, key)
            a, b = find(first), find(key)
            if a != b and not ranks[a] & ranks[b]:
                root[b] = a
                ranks[a] |= ranks.pop(b)
    joined: dict[str, list[DumpFile]] = {}
    for key in keys:
        joined.setdefault(find(key), []).extend(by_key[key])
    return joined


def job_files(found: Found, prefix_given: bool) -> tuple[list[DumpFile], list[DumpFile], list[tuple[DumpFile, str]],
                                                         list[SkippedFile], list[SkippedFile]]:
    """(candidates, empty files, unreadable files, skipped files, ignored files) of the job: the
    skipped are found.skipped and the job's names that are no regular file.

    The job is the set of files named alike (family_key) that most looks like one: whose first
    bytes hold a Flight Recorder key, then with the most ranks. Files named otherwise are ignored
    with the reason, and never count into the world or claim a rank: a stray `rng_state_7` or
    `metrics_3.json`. Where another set also looks like a whole job (Flight Recorder keys, at
    least two ranks, at least half as many), that is a UsageError naming both. With --prefix the
    user chose: every file holding it is the job's. Unreadable files of the job's name are
    skipped (said, and their ranks named); without any candidate, no set is the job.
    """
    ignored, skipped = list(found.ignored), list(found.skipped)
    if not found.candidates:
        ignored.extend(SkippedFile(display_path(f.path), reason) for f, reason in [*found.unreadable, *found.not_files])
        return [], list(found.empty), [], skipped, ignored
    if prefix_given:
        skipped.extend(SkippedFile(display_path(f.path), reason) for f, reason in found.not_files)
        return list(found.candidates), list(found.empty), list(found.unreadable), skipped, ignored
    unreadable = [f for f, _ in found.unreadable]
    not_files = [f for f, _ in found.not_files]
    families = families_of([*found.candidates, *found.empty, *unreadable, *not_files])
    family_of = {f.path: key for key, files in families.items() for f in files}
    readable = {id(f) for f in found.candidates}

    def score(key: str) -> tuple[bool, int]:
        files = [f for f in families[key] if id(f) in readable]
        return any(f.path in found.marked for f in files), len({f.rank for f in files})

    ranked = sorted(families, key=score, reverse=True)
    job = ranked[0]
    marked, ranks = score(job)
    for other in ranked[1:]:
        other_marked, other_ranks = score(other)
        if other_marked and other_ranks >= 2 and 2 * other_ranks >= ranks:
            raise UsageError(f"two sets of dumps in one folder: {_example(families[job])} ({ranks} ranks) and "
                             f"{_example(families[other])} ({other_ranks} ranks); pass -p with the prefix of the one to read "
                             "(or a prefix both hold, if they are one job)")
    unlike = f"named unlike the job's {ranks} dump(s) ({_example(families[job])}): not part of the job, not read"
    kept = [f for f in found.candidates if family_of[f.path] == job]
    ignored.extend(SkippedFile(display_path(f.path), unlike) for f in found.candidates if family_of[f.path] != job)
    empty = [f for f in found.empty if family_of[f.path] == job]
    ignored.extend(SkippedFile(display_path(f.path), "empty, and no dump beside it shares its name")
                   for f in found.empty if family_of[f.path] != job)
    unread = [(f, why) for f, why in found.unreadable if family_of[f.path] == job]
    ignored.extend(SkippedFile(display_path(f.path), why) for f, why in found.unreadable if family_of[f.path] != job)
    for dump_file, why in found.not_files:  # said when named like the job's dumps, but no dump: no rank named
        (skipped if family_of[dump_file.path] == job else ignored).append(SkippedFile(display_path(dump_file.path), why))
    return kept, empty, unread, skipped, ignored


def _example(files: list[DumpFile]) -> str:
    return display_path(f"{min(files, key=lambda f: f.rank).prefix}<rank>")


_MAX_DEPTH = 8  # folders below the dump folder that are searched (host/job/attempt/... is deep enough)


def _walk(directory: str):
    """(path, path under `directory`, whether the listing says it is a regular file and no link)
    of every entry below it, in name order: files of every subfolder (one per host is how people
    gather dumps), never through a linked folder (no loops), not into hidden folders, at most
    _MAX_DEPTH deep. The listing's own file types (d_type) answer without a stat where the
    filesystem gives them."""
    pending = [("", 0)]
    while pending:
        relative, depth = pending.pop()
        here = os.path.join(directory, relative) if relative else directory
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=_name, reverse=True)
        except OSError as exc:
            if not relative:
                raise UsageError(f"{display_path(directory)}: cannot list the directory ({exc.strerror}); check its permissions") from None
            continue
        files = []
        for entry in entries:
            if entry.name.startswith("."):  # hidden: editors' and frtrace's own temporary files
                continue
            below = os.path.join(relative, entry.name) if relative else entry.name
            path = entry.path  # os.path.join(directory, below), joined by the listing itself
            try:
                folder, regular = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
            except OSError:  # gone since listed: said when read
                folder = regular = False
            if folder:
                if depth < _MAX_DEPTH:
                    pending.append((below, depth + 1))
                continue
            files.append((path, below, regular))
        yield from reversed(files)


_name = attrgetter("name")


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
