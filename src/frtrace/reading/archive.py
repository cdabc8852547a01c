"""Read dumps straight from an archive (tar, tar.gz/.bz2/.xz, zip): one member at a time, never all in memory.

Members are taken with the same rules as files in a folder (a dump's name ends in a rank number,
its first bytes start a pickle or JSON document, the job's files are those named alike) and
more: only regular members are read (never links, devices or folders), none past the dump size
cap, no more than MAX_INFLATED_BYTES inflated in all (a small archive cannot unpack into the
machine), and an archive inside the archive is not opened. Each dump member is copied, in
chunks, into one file of a private temporary folder, one member after another (a file each cost
100,000 tiny members 8-15 s of the system's time), which the loader's workers read at each
member's offset; the folder is removed when the set has been read (unpacked). Nothing is
extracted anywhere else. A tar's headers are read by reading.tar, not Python's tarfile (a
million tiny members: 40 s and a GB in tarfile before a dump was read).
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import lzma
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import IO

from .discover import MARKED_BYTES, Discovery, Found, archive_kind, finish, placed, sniff, split_name
from ..errors import UsageError, display_path
from .limits import MAX_DUMP_BYTES, open_file, over_the_cap
from .remote import filesystem, identity, is_url, open_object
from .safe_read import short_reason
from . import tar
from ..types import SkippedFile

MAX_INFLATED_BYTES = 16 << 30  # inflated in all, members skipped over included: all dumps of a 32k-rank job with stacks
MAX_MEMBERS = 1 << 20
_CHUNK = 1 << 20  # bytes copied at a time: what one member costs in memory
_SPARE_DISK = 256 << 20  # left free in the temporary folder, beyond the member copied
_ROOM_TRUSTED = 64 << 20  # bytes copied on the strength of one look at the free space
_SUFFIXES = (".zip", ".tar", ".tgz", ".tar.gz", ".tbz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz")
_NESTED_SUFFIXES = (*_SUFFIXES, ".gz", ".bz2", ".xz", ".7z", ".rar")
# what a damaged member or stream raises, by module: none of it is frtrace's bug
_DAMAGED = (OSError, EOFError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, RuntimeError,
            NotImplementedError, ValueError)
_DECOMPRESSED = {"gzip": lambda raw: gzip.GzipFile(fileobj=raw), "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile}  # by archive_kind


def is_archive(path: str) -> bool:
    """Whether `path` is a regular file to read as an archive: its first bytes are a zip's, a
    tar's or a compressed stream's, or (a damaged one) its name says so. A URL is one where its
    name says so (reading it whole to look would cost the download)."""
    if is_url(path):
        return path.lower().endswith(_SUFFIXES)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with os.fdopen(open_file(path), "rb") as handle:
            head = handle.read(512)
    except OSError:
        return False
    return archive_kind(head) is not None or path.lower().endswith(_SUFFIXES)


@contextmanager
def unpacked(path: str, prefix: str | None = None) -> Iterator[Discovery]:
    """The Discovery of an archive's dumps, each copied into a private temporary folder (DumpFile.source)
    while the block runs; the folder is removed when it ends, whatever ends it."""
    try:
        spool = tempfile.mkdtemp(prefix="frtrace-archive-")
    except OSError as exc:  # no temporary folder this process may write: the machine's, said as such
        raise UsageError(f"{display_path(path)}: cannot unpack the archive: no writable temporary folder "
                         f"({exc.strerror or exc}); set TMPDIR to a folder you may write, or extract the archive "
                         "and pass the folder") from None
    try:
        yield read_archive(path, prefix, spool)
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def read_archive(path: str, prefix: str | None, spool: str) -> Discovery:
    """The dump files of an archive, known by `archive.tar.gz!node-a/nccl_trace_rank_3`, their
    bytes copied into `spool`. A damaged archive that cannot be opened is a UsageError; damage
    past its start costs the members from there on, said as skipped."""
    if prefix is not None:
        prefix = os.path.basename(prefix)
    found = Found()
    if is_url(path):
        found.identities.add(identity(*filesystem(path)))  # the archive itself is never an output
    else:
        try:
            info = os.stat(path)
            found.identities.add((info.st_dev, info.st_ino))  # the archive itself is never an output
        except OSError:
            pass
    read: list[tuple[str, tuple, str | bytes]] = []  # (name, name parts, its first bytes or why it was not read)
    not_files: list[tuple[str, tuple, str]] = []  # links, devices, FIFOs named like dumps: (name, name parts, what)
    copies: dict[int, tuple[int, int]] = {}  # index in `read` -> (offset, length) of the member's copy in `members`
    members = os.path.join(spool, "members")  # every member copied one after the other: no file of its own each
    shown_archive = display_path(path)
    inflated = 0
    room = 0  # bytes the temporary folder can still take, as last seen (seen again at least every _ROOM_TRUSTED)
    with open(members, "xb") as copy:
        for count, (name, size, kind, open_member) in enumerate(_members(path)):
            if open_member is None:  # a damaged or truncated archive: what was read before stays
                found.skipped.append(SkippedFile(shown_archive, f"{kind}: not read"))
                break
            if count >= MAX_MEMBERS:
                found.skipped.append(SkippedFile(shown_archive, f"more than {MAX_MEMBERS} members; the rest was not read"))
                break
            inflated += size
            if inflated > MAX_INFLATED_BYTES:
                found.skipped.append(SkippedFile(shown_archive, f"it inflates past the {MAX_INFLATED_BYTES >> 30} GiB frtrace "
                                                                "reads from one archive; the rest was not read"))
                break
            if kind == "dir":
                continue
            parts = split_name(os.path.basename(name), prefix)
            if isinstance(parts, str):
                nested = name.lower().endswith(_NESTED_SUFFIXES)
                found.ignored.append(SkippedFile(display_path(f"{path}!{name}"),
                                                 "an archive inside the archive: not opened (extract it and pass it on its own)"
                                                 if nested else parts))
                continue
            if kind != "file":
                not_files.append((name, parts, f"{kind} in the archive; not read"))
            elif size > MAX_DUMP_BYTES:
                read.append((name, parts, over_the_cap(MAX_DUMP_BYTES, size)))
            elif size > room and (room := min(shutil.disk_usage(spool).free - _SPARE_DISK, size + _ROOM_TRUSTED)) < size:
                found.skipped.append(SkippedFile(shown_archive, f"the temporary folder {display_path(spool)} has no room to copy "
                                                                "the rest of its dumps (set TMPDIR to a larger one); not read"))
                break
            else:
                offset = copy.tell()
                try:
                    read.append((name, parts, _copy_member(open_member, copy)))
                    copies[len(read) - 1] = (offset, copy.tell() - offset)
                    room -= copies[len(read) - 1][1]
                except _TooBig:
                    read.append((name, parts, f"more than the {MAX_DUMP_BYTES >> 20} MiB a dump can hold; not read"))
                    _cut(copy, offset)
                except _DAMAGED as exc:
                    read.append((name, parts, f"cannot read it from the archive ({short_reason(exc)}); not read"))
                    _cut(copy, offset)
    top = _common_top(name for name, _, _ in read)  # one folder around everything says nothing about hosts
    for name, parts, what in not_files:
        found.not_files.append((placed(f"{path}!{name}", name[len(top):] if name.startswith(top) else name, parts), what))
    for index, (name, parts, outcome) in enumerate(read):
        dump_file = replace(placed(f"{path}!{name}", name[len(top):], parts), source=members if index in copies else "",
                            span=copies.get(index))
        if isinstance(outcome, str):
            found.unreadable.append((dump_file, outcome))
        elif not outcome:
            found.empty.append(dump_file)
        else:
            found.sniffed(dump_file, outcome)
    return finish(found, prefix is not None)


def _cut(copy: IO[bytes], offset: int) -> None:
    """The copy of a member that could not be read whole taken back: the next one starts there."""
    copy.seek(offset)
    copy.truncate()


class _TooBig(Exception):
    pass


def _copy_member(open_member, copy: IO[bytes]) -> bytes:
    """Append one member to `copy`, _CHUNK bytes at a time and never past the dump size cap;
    return its first bytes. A member whose first bytes cannot start a dump is not read past them."""
    with open_member() as member:
        head = member.read(MARKED_BYTES)
        copy.write(head)
        if sniff(head) is not None:
            written = len(head)
            while chunk := member.read(_CHUNK):
                written += len(chunk)
                if written > MAX_DUMP_BYTES:
                    raise _TooBig
                copy.write(chunk)
    return head


def _members(path: str) -> Iterator[tuple[str, int, str, object]]:
    """(name, size, kind, opener) of every member: kind "file", "dir", "a link", "a device"...; a
    damaged archive ends with ("", 0, why, None)."""
    try:  # opened once, and read from that descriptor: the file checked is the file read
        handle = open_object(path) if is_url(path) else os.fdopen(open_file(path), "rb")
        head = handle.read(512)
        handle.seek(0)
    except OSError as exc:
        raise UsageError(f"{display_path(path)}: cannot read the archive ({exc.strerror}); check the file") from None
    with handle:
        if archive_kind(head) == "zip" or (archive_kind(head) is None and path.lower().endswith(".zip")):
            yield from _zip_members(path, handle)
        else:
            yield from _tar_members(path, handle, archive_kind(head))


def _zip_members(path: str, handle) -> Iterator[tuple[str, int, str, object]]:
    try:
        archive = zipfile.ZipFile(handle)
    except _DAMAGED as exc:
        raise UsageError(f"{display_path(path)}: not a readable zip archive ({short_reason(exc)}); the file is damaged "
                         "or not a zip: check it, or extract what can be and pass the folder") from None
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


def _tar_members(path: str, handle, kind: str | None) -> Iterator[tuple[str, int, str, object]]:
    try:
        if kind in _DECOMPRESSED:
            stream, length = _DECOMPRESSED[kind](handle), None
        else:  # read as it lies: what is not read of a member is sought past
            stream = handle
            length = handle.size if is_url(path) else os.fstat(handle.fileno()).st_size
        found = tar.members(stream, length)
        first = next(found, None)
    except (*_DAMAGED, tar.Damaged) as exc:
        raise UsageError(f"{display_path(path)}: not a readable tar archive ({short_reason(exc)}); the file is damaged "
                         "or not a tar: check it, or extract what can be and pass the folder") from None
    if first is None:
        return
    try:
        for name, size, what, member in itertools.chain((first,), found):
            yield _clean(name), size, what, lambda member=member: member  # opened only where it is a file: a Member
    except (*_DAMAGED, tar.Damaged) as exc:  # truncated or damaged: what was read stays
        yield "", 0, f"the archive is damaged past this point ({short_reason(exc)})", None


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
