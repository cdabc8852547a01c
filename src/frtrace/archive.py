"""Read dumps straight from an archive (tar, tar.gz/.bz2/.xz, zip) without extracting anything.

Members are read in one pass, in memory, with the same rules as files in a folder (a dump's name
ends in a rank number, its first bytes start a pickle or JSON document) and more: only regular
members are read (never links, devices or folders), no member past the dump size cap, and no more
than MAX_ARCHIVE_BYTES in all, so a small archive cannot unpack into the machine's memory.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from zlib import error as zlib_error
from typing import IO

from .discover import HEAD_BYTES, Discovery, DumpFile, finish, placed, sniff, split_name
from .errors import UsageError, display_path
from .limits import MAX_DUMP_BYTES
from .types import SkippedFile

MAX_ARCHIVE_BYTES = 64 << 30  # all dumps of a 32k-rank job with stacks; past it the rest is not read
MAX_MEMBERS = 1 << 20


def is_archive(path: str) -> bool:
    """Whether `path` is a regular file that tar or zip can read (checked by content, not name)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        return zipfile.is_zipfile(path) or tarfile.is_tarfile(path)
    except OSError:
        return False


def read_archive(path: str, prefix: str | None = None) -> tuple[Discovery, dict[str, bytes]]:
    """The dump files of an archive and their bytes, by the path each is known by
    (`archive.tar.gz!node-a/nccl_trace_rank_3`)."""
    if prefix is not None:
        prefix = os.path.basename(prefix)
    candidates: list[DumpFile] = []
    empty: list[DumpFile] = []
    skipped: list[SkippedFile] = []
    ignored: list[SkippedFile] = []
    contents: dict[str, bytes] = {}
    found: list[tuple[str, str, tuple, str | None, bool]] = []  # placed once the common top folder is known
    total = 0
    for count, (name, size, kind, open_member) in enumerate(_members(path)):
        printable = display_path(f"{path}!{name}")
        if open_member is None:  # a damaged or truncated archive: what was read before stays
            skipped.append(SkippedFile(display_path(path), f"{kind}: not read"))
            break
        if count >= MAX_MEMBERS:
            skipped.append(SkippedFile(display_path(path), f"more than {MAX_MEMBERS} members; the rest was not read"))
            break
        if kind == "dir":
            continue
        parts = split_name(os.path.basename(name), prefix)
        if isinstance(parts, str):
            ignored.append(SkippedFile(printable, parts))
            continue
        if kind != "file":
            skipped.append(SkippedFile(printable, f"{kind} in the archive; not read"))
            continue
        if size > MAX_DUMP_BYTES:
            skipped.append(SkippedFile(printable, f"{size >> 20} MiB, more than the {MAX_DUMP_BYTES >> 20} MiB "
                                                  "a Flight Recorder dump can hold; not read"))
            continue
        if total + size > MAX_ARCHIVE_BYTES:
            skipped.append(SkippedFile(printable, f"past the {MAX_ARCHIVE_BYTES >> 30} GiB frtrace reads from one archive; not read"))
            continue
        try:
            with open_member() as handle:
                head = handle.read(HEAD_BYTES)
                file_format = sniff(head) if head else None
                if head and file_format is None:
                    ignored.append(SkippedFile(printable, "its first bytes are not those of a pickle or JSON dump"))
                    continue
                data = head + handle.read(MAX_DUMP_BYTES + 1 - len(head))
        except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError, RuntimeError, NotImplementedError) as exc:
            skipped.append(SkippedFile(printable, f"cannot read it from the archive ({exc}); not read"))
            continue
        if len(data) > MAX_DUMP_BYTES:
            skipped.append(SkippedFile(printable, f"more than the {MAX_DUMP_BYTES >> 20} MiB a dump can hold; not read"))
            continue
        total += len(data)
        shown = f"{path}!{name}"
        contents[shown] = data
        found.append((shown, name, parts, file_format, bool(data)))
    top = _common_top(name for _, name, _, _, _ in found)  # one folder around everything says nothing about hosts
    for shown, name, parts, file_format, has_data in found:
        (candidates if has_data else empty).append(placed(shown, name[len(top):], parts, file_format))
    return finish(candidates, empty, skipped, ignored), contents


def _members(path: str) -> Iterator[tuple[str, int, str, object]]:
    """(name, size, kind, opener) of every member: kind "file", "dir", "a link", "a device"..."""
    if zipfile.is_zipfile(path):
        try:
            archive = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise UsageError(f"{display_path(path)}: not a readable zip archive ({exc}); check the file") from None
        with archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                if info.is_dir():
                    kind = "dir"
                elif stat.S_ISLNK(mode):
                    kind = "a link"
                elif info.flag_bits & 0x1:
                    kind = "an encrypted member"
                else:
                    kind = "file"
                yield _clean(info.filename), info.file_size, kind, _opener(archive.open, info)
        return
    try:
        archive = tarfile.open(path, mode="r:*")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise UsageError(f"{display_path(path)}: not a readable tar archive ({exc}); check the file") from None
    with archive:
        try:
            for info in archive:
                kind = ("file" if info.isreg() else "dir" if info.isdir() else "a link" if info.issym() or info.islnk()
                        else "a device or FIFO")
                yield _clean(info.name), info.size, kind, _opener(archive.extractfile, info)
        except (tarfile.TarError, EOFError, OSError, zlib_error) as exc:  # truncated or damaged: what was read stays
            yield "", 0, f"the archive is damaged past this point ({exc})", None


def _opener(open_member, info):
    def opened() -> IO[bytes]:
        handle = open_member(info)
        if handle is None:
            raise OSError(0, "not a file")
        return handle
    return opened


def _clean(name: str) -> str:
    """A member's name as a path under the archive: no leading '/', no '.' or '..' parts (nothing
    is extracted, but the name is shown and used for hosts)."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return "/".join(parts)


def _common_top(names) -> str:
    """The one folder every dump sits in ("dumps/"), which says nothing about hosts."""
    tops = {name.split("/", 1)[0] + "/" if "/" in name else "" for name in names}
    return tops.pop() if len(tops) == 1 else ""
