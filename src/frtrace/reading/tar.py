"""A tar stream's members, header by header, for archive.py: what Python's tarfile reads of them,
at a tenth of its cost and none of its memory.

tarfile builds a TarInfo of thirty fields for every member and keeps them all (a million tiny
members: ~40 us and ~1 KB each, 40 s and 1 GB before a byte of a dump is read). frtrace needs a
member's name, size and kind, and its bytes once, in order; so this reads the 512-byte headers
itself, by the rules tarfile reads them (POSIX ustar and pax, GNU long names, old V7), and
refuses what it does not read (sparse members) by name. Past the first header, a header that
does not check out, or a stream that ends inside a member, ends the members read with the
reason (tarfile ends there without a word).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_SIGNED = struct.Struct("148b8x356b")  # the checksum as some old tars summed it: bytes as signed
_FILE_TYPES = (b"0", b"\0", b"7")  # regular, old regular, contiguous
_KINDS = {b"5": "dir", b"1": "a link", b"2": "a link", b"3": "a device or FIFO", b"4": "a device or FIFO",
          b"6": "a device or FIFO"}  # the types whose size says nothing of data after them (tarfile's SUPPORTED_TYPES)
_EXTENDED = (b"x", b"g", b"L", b"K")  # a header whose data names or sizes the next member
_MAX_EXTENDED = 1 << 20  # bytes of a pax header or GNU long name: a name, never a dump


class Damaged(Exception):
    """The stream holds no member past here: a bad header, or the end inside a member."""


class Member:
    """A member's bytes, read from the stream where its header left it; never past its size."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        self._stream, self.left = stream, size

    def read(self, count: int) -> bytes:
        data = _read(self._stream, min(count, self.left))
        self.left -= len(data)
        if len(data) < count and self.left:
            raise EOFError("the archive ends inside this member")
        return data

    def __enter__(self) -> Member:
        return self

    def __exit__(self, *_) -> None:
        pass


def members(stream: IO[bytes], length: int | None) -> Iterator[tuple[str, int, str, Member | None]]:
    """(name, size, kind, member) of each member in order: kind "file" (with its Member, to be
    read before the next is asked for, or not at all), "dir", "a link", "a device or FIFO", "a
    sparse member" or "a special member". `length`: the stream's bytes where it is a file read
    as it lies (what is not read of a member is sought past), None where it is decompressed
    (read through). Damaged past the first member: the Damaged exception ends the iteration. A
    first header that is not a tar's is a ValueError."""
    first, pax_global, pax, long_name = True, {}, {}, None
    position = 0  # where the stream stands, for a file read as it lies
    while True:
        block = _read(stream, BLOCK)
        if len(block) < BLOCK:
            if first:
                raise ValueError("empty file" if not block else "too short for a tar header")
            if block:
                raise Damaged("the archive ends inside a header")
            return  # the end without the two zero blocks: what GNU tar calls a lone end, accepted as tarfile does
        if block == _ZERO_BLOCK:
            return
        position += BLOCK
        size, kind = _checked(block, first)
        first = False
        if kind in _EXTENDED:
            if size > _MAX_EXTENDED:
                raise Damaged(f"a header of {size} bytes where a name is expected")
            data = _read(stream, _padded(size))
            if len(data) < _padded(size):
                raise Damaged("the archive ends inside a header")
            position += len(data)
            data = data[:size]
            if kind == b"L":
                long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind == b"x":
                pax.update(_pax_records(data))
            elif kind == b"g":
                pax_global.update(_pax_records(data))
            continue
        fields = {**pax_global, **pax}
        name = fields.get("path") or long_name or _name(block, kind)
        if "size" in fields:
            try:
                size = int(fields["size"])
            except ValueError:
                raise Damaged("a pax header with a size that is not a number") from None
        pax, long_name = {}, None
        if kind in _FILE_TYPES and name.endswith("/"):
            kind_name = "dir"  # old V7: a folder is a regular member named with a slash
        elif kind in _FILE_TYPES:
            kind_name = "a sparse member" if any(key.startswith("GNU.sparse.") for key in fields) else "file"
        elif kind == b"S":
            kind_name = "a sparse member"
        else:
            kind_name = _KINDS.get(kind, "a special member")
        name = name.rstrip("/") if kind_name == "dir" else name
        if kind in _KINDS:
            yield name, size, kind_name, None
            continue
        member = Member(stream, size)
        yield name, size, kind_name, member if kind_name == "file" else None
        position += _padded(size)
        if length is not None:
            if position > length:
                raise Damaged("the archive ends inside a member")
            stream.seek(position)
        else:
            _drop(stream, member.left + _padded(size) - size)


def _checked(block: bytes, first: bool) -> tuple[int, bytes]:
    """The size and type of a header whose checksum holds."""
    try:
        stored = _number(block[148:156])
        size = _number(block[124:136])
    except ValueError:
        stored = size = -1
    unsigned = sum(block) - sum(block[148:156]) + 8 * 32
    if stored < 0 or size < 0 or (stored != unsigned and stored != sum(_SIGNED.unpack(block)) + 8 * 32):
        if first:
            raise ValueError("not a tar header (bad checksum)")
        raise Damaged("a header that does not check out (bad checksum)")
    return size, block[156:157]


def _number(field: bytes) -> int:
    """A header's number: octal text, or GNU's base-256 (a first byte of 0x80 or 0xff)."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (256 ** (len(field) - 1)) if field[0] == 0xff else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _name(block: bytes, kind: bytes) -> str:
    """The name a header holds: ustar's prefix and name, as tarfile joins them."""
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]
    if prefix and kind not in (b"L", b"K", b"S"):
        name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax_records(data: bytes) -> dict[str, str]:
    """A pax header's "LENGTH KEY=VALUE\\n" records; Damaged where they do not parse."""
    fields, at = {}, 0
    while at < len(data) and data[at:at + 1] != b"\0":
        space = data.find(b" ", at, at + 24)
        try:
            length = int(data[at:space]) if space > at else 0
        except ValueError:
            length = 0
        record = data[space + 1:at + length]
        if length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise Damaged("a pax header that does not parse")
        key, value = record[:-1].split(b"=", 1)
        fields[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        at += length
    return fields


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _read(stream: IO[bytes], count: int) -> bytes:
    """`count` bytes, or fewer only at the end: a stream may give less than asked and more later."""
    data = stream.read(count)
    if len(data) >= count or not data:
        return data
    parts = [data]
    got = len(data)
    while got < count and (more := stream.read(count - got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _drop(stream: IO[bytes], count: int) -> None:
    """Past `count` bytes of a stream read through."""
    while count > 0:
        data = stream.read(min(count, 1 << 20))
        if not data:
            raise Damaged("the archive ends inside a member")
        count -= len(data)
