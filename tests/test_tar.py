"""frtrace's own reading of tar headers (reading/tar.py) against Python's tarfile on the same
archives: every format tarfile writes, names long and short, every member kind, compressed or
not, and damage at every place a stream can end."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import tarfile

import pytest

from frtrace.reading import tar

_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}
_KINDS = {tarfile.REGTYPE: "file", tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "a link", tarfile.LNKTYPE: "a link",
          tarfile.FIFOTYPE: "a device or FIFO", tarfile.CHRTYPE: "a device or FIFO"}


def _archive(seed: int, tar_format: int) -> bytes:
    rng = random.Random(seed)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for index in range(rng.randint(1, 30)):
            depth = rng.choice([0, 1, 3, 12])
            folders = "/".join(rng.choice(["node-a", "host" * rng.randint(1, 9), "d", "é"]) for _ in range(depth))
            name = f"{folders}/nccl_trace_rank_{index}" if folders else f"nccl_trace_rank_{index}"
            if tar_format == tarfile.USTAR_FORMAT and (len(name) > 255 or not name.isascii()):
                name = f"short/nccl_trace_rank_{index}"
            info = tarfile.TarInfo(name)
            info.type = rng.choice([tarfile.REGTYPE] * 5 + list(_KINDS))
            data = b""
            if info.type == tarfile.REGTYPE:
                data = rng.randbytes(rng.choice([0, 1, 511, 512, 513, 5000]))
                info.size = len(data)
            elif info.type in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = "x" * rng.choice([3, 99]) if tar_format == tarfile.USTAR_FORMAT else "y" * rng.choice([3, 300])
            archive.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def _as_tarfile_reads(data: bytes) -> list[tuple[str, int, str, bytes]]:
    found = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for info in archive:
            kind = _KINDS.get(info.type, "file" if info.isreg() else "?")
            content = archive.extractfile(info).read() if info.isreg() else b""
            found.append((info.name, info.size if info.isreg() else 0, kind, content))
    return found


def _as_frtrace_reads(stream, length: int | None) -> list[tuple[str, int, str, bytes]]:
    found = []
    for name, size, kind, member in tar.members(stream, length):
        content = member.read(size + 1) if member is not None else b""
        found.append((name, size if kind == "file" else 0, kind, content))
    return found


@pytest.mark.parametrize("tar_format", list(_FORMATS.values()), ids=list(_FORMATS))
@pytest.mark.parametrize("seed", range(12))
def test_members_are_read_as_tarfile_reads_them(seed, tar_format):
    data = _archive(seed, tar_format)
    assert _as_frtrace_reads(io.BytesIO(data), len(data)) == _as_tarfile_reads(data)


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bzip2", "xz"])
def test_a_compressed_stream_is_read_through(compress):
    data = _archive(3, tarfile.PAX_FORMAT)
    stream = {gzip.compress: lambda raw: gzip.GzipFile(fileobj=raw), bz2.compress: bz2.BZ2File,
              lzma.compress: lzma.LZMAFile}[compress](io.BytesIO(compress(data)))
    assert _as_frtrace_reads(stream, None) == _as_tarfile_reads(data)


def test_members_left_unread_are_passed_over():
    data = _archive(5, tarfile.GNU_FORMAT)
    names = [name for name, _, _, _ in tar.members(io.BytesIO(data), len(data))]  # no member read at all
    assert names == [name for name, _, _, _ in _as_tarfile_reads(data)]


def test_an_old_v7_folder_and_a_ustar_prefix_are_named_as_tarfile_names_them():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        long_folder = "/".join(["f" * 40] * 4)  # past the 100-byte name field: split into prefix and name
        info = tarfile.TarInfo(f"{long_folder}/nccl_trace_rank_1")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    data = bytearray(buffer.getvalue())
    assert _as_frtrace_reads(io.BytesIO(bytes(data)), len(data))[0][0] == f"{long_folder}/nccl_trace_rank_1"
    v7 = bytearray(512)
    v7[:6] = b"dumps/"
    v7[124:136] = b"00000000000\0"
    v7[148:156] = b"        "
    v7[148:156] = b"%06o\0 " % sum(v7)
    assert list(tar.members(io.BytesIO(bytes(v7) + bytes(1024)), 1536)) == [("dumps", 0, "dir", None)]


def test_sizes_in_base_256_are_read():
    assert tar._number(b"\x80" + (10 << 30).to_bytes(11, "big")) == 10 << 30
    assert tar._number(b"00000000012\0") == 10
    assert tar._number(b"     12 \0   ") == 10


def test_a_sparse_member_is_named_not_read():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("nccl_trace_rank_0")
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}
        info.size = 4
        archive.addfile(info, io.BytesIO(b"abcd"))
    data = buffer.getvalue()
    assert [(name, kind, member) for name, _, kind, member in tar.members(io.BytesIO(data), len(data))] == [
        ("nccl_trace_rank_0", "a sparse member", None)]


def test_the_first_header_must_be_a_tars():
    with pytest.raises(ValueError, match="empty file"):
        list(tar.members(io.BytesIO(b""), 0))
    with pytest.raises(ValueError, match="bad checksum"):
        list(tar.members(io.BytesIO(bytes(range(256)) * 2), 512))
    assert list(tar.members(io.BytesIO(bytes(1024)), 1024)) == []  # an empty archive: its end, and nothing more


@pytest.mark.parametrize("compressed", [False, True], ids=["as it lies", "read through"])
def test_damage_at_any_place_ends_the_members_with_its_reason(compressed):
    data = _archive(7, tarfile.PAX_FORMAT)
    whole = _as_tarfile_reads(data)
    for cut in range(513, len(data.rstrip(b"\0")), 97):  # inside a header or a member's bytes
        damaged = bytearray(data[:cut])
        stream = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(bytes(damaged)))) if compressed else io.BytesIO(damaged)
        found = []
        with pytest.raises((tar.Damaged, EOFError)):  # somewhere before the end it cannot read on
            for name, size, kind, member in tar.members(stream, None if compressed else len(damaged)):
                content = member.read(size + 1) if member is not None else b""
                found.append((name, size if kind == "file" else 0, kind, content))
            if len(found) < len(whole):
                raise tar.Damaged("fewer members, without a word")
        assert found == whole[:len(found)]  # what was read before the damage is read right
    flipped = bytearray(data)
    second = len(data) - 1024 - 512 * 2  # a header or data block near the end
    flipped[second:second + 512] = bytes(range(256)) * 2
    with pytest.raises((tar.Damaged, EOFError)):
        for _, size, _, member in tar.members(io.BytesIO(bytes(flipped)), len(flipped)):
            if member is not None:
                member.read(size + 1)
        raise tar.Damaged("read to the end without a word")
