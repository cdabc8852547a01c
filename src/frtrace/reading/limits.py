"""What one dump file may cost: the caps the loader holds every file to (docs/reliability.md).

A dump is data from a cluster, possibly damaged, possibly hostile. A few KB of pickle can ask
for gigabytes (a huge memo index) or, through shared references, describe values whose text or
hash would take forever. The loader checks values against these caps before it hashes or prints
anything (its fast path marshals them first, within a byte budget per entry), and parses each
file under a memory ceiling.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

MAX_RANK = 1 << 20  # about a million ranks; larger trailing numbers are dates, pids or sizes
MAX_DUMP_BYTES = 1 << 30  # a 2000-entry dump with stacks is a few MB
MAX_TEXT = 4096  # characters in one name, dtype, state or frame field; longer ones are cut
MAX_SHAPES = 1 << 16  # tensors in one entry's input or output list (all_to_all lists one per rank)
MAX_DIMS = 64  # dimensions of one tensor
MAX_FRAMES = 1024  # frames in one stack
MAX_INT = (1 << 63) - 1  # numbers a dump writes are C++ int64s
MAX_ENTRIES = 1_000_000  # entries in one dump; a recorder keeps 2,000 by default (TORCH_FR_BUFFER_SIZE)

# Parsing a file may use this much memory beyond what the process already has: a pickle's
# objects take about 11x its bytes (27x of address space at small sizes), so 32x plus a floor,
# and never so much that the file's bytes and its objects together pass PARSE_CAP: a 530 MB file
# of 5 million tiny entries would take 6 GB. The cap holds about 800,000 tiny entries (1.2 KB
# each once parsed), far more than a recorder keeps with stacks.
_PARSE_FLOOR = 64 << 20
_PARSE_FACTOR = 32
PARSE_CAP = 1 << 30


def over_the_cap(cap: int, size: int | None = None) -> str:
    """Why a dump of `size` bytes, or of a size found past the cap while read (None), is not read;
    `cap` the reader's (MAX_DUMP_BYTES)."""
    said = f"more than the {cap >> 20} MiB a Flight Recorder dump can hold; not read"
    return said if size is None else f"{size >> 20} MiB, {said}"


# Folders every file read must lie in, reached through no link (frtrace mcp's roots, set once
# when its server starts; inherited by the reading workers it forks). Empty: no confinement.
_confined: tuple[str, ...] = ()


def confine(roots: tuple[str, ...]) -> None:
    """From now on, open_file opens only files under `roots` (links resolved), through no link;
    with no root (a server given only stores' URLs), none."""
    global _confined
    _confined = tuple(os.path.realpath(root) for root in roots) or ("\x00",)  # no path lies under it


def confined() -> bool:
    """Whether this process reads only under frtrace mcp's roots (confine)."""
    return bool(_confined)


def under(real: str, roots: tuple[str, ...]) -> bool:
    """Whether the resolved path `real` is one of `roots` or lies inside one."""
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def open_file(path: str, *, follow_links: bool = True, own: bool = False) -> int:
    """A descriptor of `path` opened to read, without waiting (a FIFO never blocks). Confined
    (frtrace mcp): never through a link in its last part, and the file the descriptor holds, not
    the path, must lie under the roots: a link in a folder above it, or one swapped in after the
    path was checked, is refused (OSError EACCES) and nothing of it is read. `own`: a file frtrace
    made itself (an archive member's copy, in its private folder), read where it is."""
    confined = () if own else _confined
    nofollow = getattr(os, "O_NOFOLLOW", 0) if confined or not follow_links else 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | nofollow)
    except OSError as exc:
        if exc.errno == errno.ELOOP and nofollow:
            raise OSError(errno.ELOOP, "a link, which frtrace does not follow here") from None
        raise
    if confined and not under(_real_path(fd, path), confined):
        os.close(fd)
        raise OSError(errno.EACCES, "outside the folders this server may read (reached through a link)")
    return fd


def _real_path(fd: int, path: str) -> str:
    """Where the open file `fd` really is: the kernel's name for it, else (no /proc) the path
    resolved, where it is still the same file."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = os.path.realpath(path)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(real))
        except OSError:
            same = False
        return real if same else ""


def read_small(path: str, cap: int, *, follow_links: bool = True) -> bytes:
    """The bytes of a small file beside the dumps (a manifest, a stack file, a list of addresses):
    a regular file only, opened without waiting (never a FIFO or a device; never through a link
    unless `follow_links`), read up to `cap` bytes. OSError where it cannot be opened or read;
    ValueError, with the reason, where it is not a regular file or is over the cap."""
    with os.fdopen(open_file(path, follow_links=follow_links), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError("not a regular file; not read")
        raw = handle.read(cap + 1)
    if len(raw) > cap:
        raise ValueError(f"over {cap >> 20} MiB; not read")
    return raw


def parse_allowance(file_size: int) -> int:
    """The memory parsing a `file_size`-byte file (already read) may take beyond what the process has."""
    return _PARSE_FLOOR + min(_PARSE_FACTOR * file_size, max(0, PARSE_CAP - file_size))


def parse_is_capped(file_size: int) -> bool:
    """Whether PARSE_CAP, not the file's size, bounds its parsing: a file that big failing is one of
    far too many entries, not a small hostile one."""
    return _PARSE_FACTOR * file_size > PARSE_CAP - file_size


def _address_space_in_use() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MachineMemory(MemoryError):
    """Memory ran out under the process's own address-space limit (ulimit -v), below what frtrace
    gives a file: the machine's limit, not the file's fault."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def _address_limit() -> int | None:
    """This process's own soft address-space limit (ulimit -v) in bytes; None where it has none."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        return None if soft == resource.RLIM_INFINITY else soft
    except (ImportError, OSError, ValueError):
        return None


def memory_limited() -> bool:
    """Whether this process runs under an address-space limit of its own (ulimit -v)."""
    return _address_limit() is not None


def memory_limit_text(limit: int | None = None) -> str:
    """'the address-space limit of 512 MiB (ulimit -v)' for a message, read now where not given."""
    limit = limit if limit is not None else _address_limit()
    if limit is None:
        return "the memory this machine has"
    return f"the address-space limit of {limit >> 20} MiB (ulimit -v)"


@contextmanager
def bounded_memory(file_size: int) -> Iterator[None]:
    """Make allocations past what parsing a `file_size`-byte file can honestly need fail with
    MemoryError instead of exhausting the machine (a 9-byte pickle can ask for 8 GB).

    Lowers the soft address-space limit for the block and restores it after; any process may
    raise its soft limit back up to the hard one. Where there is no such limit (not Linux), the
    block runs unbounded.
    """
    try:
        import resource
    except ImportError:
        yield
        return
    in_use = _address_space_in_use()
    if in_use is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    ceiling = in_use + parse_allowance(file_size)
    if hard != resource.RLIM_INFINITY:
        ceiling = min(ceiling, hard)
    if soft != resource.RLIM_INFINITY and soft <= ceiling:
        try:  # the process's own limit is the lower: running out is the machine's doing, not the file's
            yield
        except MemoryError:
            raise MachineMemory(soft) from None
        return
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
