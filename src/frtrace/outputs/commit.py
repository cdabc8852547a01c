"""Write a run's output files all together or not at all, never over anything we were given.

Every output is checked before the analysis starts (plan_outputs): it must not be the dump
folder's file or another output's, and what it names must be a regular file (replaced), a
place for a new one (created), or a stream (standard output, a character device, a FIFO:
written through, never replaced). Each output is then written to an unnamed file (Outputs.stage)
and, only when all were written, the files are named and renamed over their targets one after
the other with signals held off, so an interrupted run changes no output, or all of them, and
leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from ..reading.discover import split_name
from ..reading.remote import filesystem, identity, is_http, is_url, reason
from ..errors import OutputError, UsageError, display_path

_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass(frozen=True, slots=True)
class PlannedOutput:
    flag: str  # the option that asked for it: "-o", "--json", ...
    path: str  # as given
    what: str  # "database", "JSON report", ...
    binary: bool
    target: str  # the file to create or replace (links resolved); "" for a stream
    mode: int | None  # the replaced file's permission bits, None for a new file or a stream
    owner: tuple[int, int] | None  # the replaced file's (uid, gid)
    url: str = ""  # an object in a store (reading.remote), written whole on commit

    @property
    def stream(self) -> bool:
        return not self.target and not self.url


def resolved(path: str) -> str:
    """os.path.realpath, or a UsageError where a relative path cannot be resolved: the working
    directory was deleted (a job's scratch folder cleaned up under a shell still in it)."""
    try:
        return os.path.realpath(path)
    except FileNotFoundError:
        raise UsageError(f"{display_path(path)}: a relative path, but the working directory no longer exists; "
                         "cd to an existing folder or give an absolute path") from None


def plan_outputs(requested: list[tuple[str, str, str, bool]], dump_dir: str,
                 inputs: frozenset[tuple[int, int]] = frozenset()) -> list[PlannedOutput]:
    """Check every (flag, path, what, binary) before any work: UsageError (exit 2) for an output
    that is the same file as another output, as any input file (`inputs`: the (device, inode) of
    every file discovery looked at; the archive itself), or as any file already under `dump_dir`,
    or that would land in the dump folder under a dump's name; OutputError for one that cannot be
    written. Nothing under the folder is walked: what exists there is found by its resolved path."""
    plans: list[PlannedOutput] = []
    identities: dict[object, str] = {}  # (dev, ino) or resolved path -> the flag that claimed it
    out = _stdout_status()
    stdout = None if out is None else (out.st_dev, out.st_ino)
    real_dump_dir = resolved(dump_dir)
    for flag, path, what, binary in requested:
        shown = display_path(path)
        if path == "-":
            plan, identity = PlannedOutput(flag, path, what, binary, "", None, None), "<stdout>"
        elif is_url(path):
            plan, identity = _planned_url(flag, path, what, binary, dump_dir, inputs)
        else:
            try:
                info = os.stat(path)  # follows links: /dev/stdout is a link to a pipe or a terminal
            except FileNotFoundError:
                info = None
            except OSError as exc:
                raise OutputError(f"{shown}: cannot use it for the {what} ({exc.strerror}); choose another path") from None
            if info is None:
                target = resolved(path)
                parent = os.path.dirname(target)
                if not os.path.isdir(parent):
                    raise OutputError(f"{shown}: the folder {display_path(parent)} does not exist; create it or choose another path for the {what}")
                if not os.access(parent, os.W_OK):
                    raise OutputError(f"{shown}: cannot write in {display_path(parent)}; choose another path for the {what}")
                inside = parent == real_dump_dir or parent.startswith(real_dump_dir + os.sep)
                if inside and not isinstance(split_name(os.path.basename(target), None), str):
                    raise UsageError(f"{flag} {shown}: a new file named like a dump in the dump folder would be read as one "
                                     "next time; choose another name or folder")
                plan, identity = PlannedOutput(flag, path, what, binary, target, None, None), target
            else:
                identity = (info.st_dev, info.st_ino)
                target = resolved(path)
                inside = target.startswith(real_dump_dir + os.sep) or (target == real_dump_dir and not stat.S_ISDIR(info.st_mode))
                if identity in inputs or inside:
                    raise UsageError(f"{flag} {shown}: that is a file of the dump folder {display_path(dump_dir)}; "
                                     f"frtrace never writes over its input, choose another path for the {what}")
                if stat.S_ISREG(info.st_mode):
                    if identity == stdout:  # redirected to it (`> F`): F replaced by rename, what is printed after is lost
                        raise UsageError(f"{flag} {shown}: standard output is redirected to that file, and what is printed "
                                         f"there would be lost; give the {what} another file, or redirect elsewhere")
                    if not os.access(os.path.dirname(target), os.W_OK):
                        raise OutputError(f"{shown}: cannot write in {display_path(os.path.dirname(target))}; "
                                          f"choose another path for the {what}")
                    plan = PlannedOutput(flag, path, what, binary, target, stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid))
                elif stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode):
                    plan = PlannedOutput(flag, path, what, binary, "", None, None)
                elif stat.S_ISDIR(info.st_mode):
                    raise OutputError(f"{shown}: is a directory; give a file name for the {what}")
                else:
                    raise OutputError(f"{shown}: not a regular file, a terminal or a pipe; frtrace will not replace it, "
                                      f"choose another path for the {what}")
        if plan.stream and path != "-" and identity == stdout and not stat.S_ISCHR(out.st_mode):
            identity = "<stdout>"  # a stream named by path that is our standard output itself (/dev/stdout, /proc/self/fd/1)
        plans.append(plan)
        if plan.stream and path != "-" and _is_null(path):  # /dev/null takes any number of outputs
            continue
        other = identities.get(identity)
        if other is not None:
            raise UsageError(f"{other} and {flag} both name {shown}; give them different files")
        identities[identity] = f"{flag} {shown}"
    return plans


def _stdout_status() -> os.stat_result | None:
    """Standard output's status, None where it has no descriptor (a stream of a test's or of a
    program that embeds frtrace)."""
    try:
        return os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return None


def _is_null(path: str) -> bool:
    try:
        return os.path.samefile(path, os.devnull)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _planned_url(flag: str, url: str, what: str, binary: bool, dump_dir: str,
                 inputs: frozenset) -> tuple[PlannedOutput, object]:
    """An output in a store: never an object read as input, never a dump-named one under the dump
    URL, never over HTTP (nothing there takes a whole write)."""
    fs, path = filesystem(url)
    named = identity(fs, path)
    full = named[1]
    if is_http(fs):
        raise OutputError(f"{display_path(url)}: frtrace cannot write over HTTP; give a local path or a store URL "
                          f"(s3://, gs://, ...) for the {what}")
    under = dump_dir.rstrip("/") + "/"
    if named in inputs or (full.startswith(under) and not isinstance(split_name(full.rsplit("/", 1)[-1], None), str)):
        raise UsageError(f"{flag} {display_path(url)}: that is an object of the dump set {display_path(dump_dir)}; "
                         f"frtrace never writes over its input, choose another URL for the {what}")
    return PlannedOutput(flag, url, what, binary, "", None, None, url=full), named


class Outputs:
    """The outputs of one run: staged into unnamed files, then committed together.

    Each output is written into a file with no name (O_TMPFILE where the system has it, else a
    temporary file unlinked as soon as it is open), so that nothing is left behind by any stop,
    SIGKILL included; commit() names each one beside its target and renames it over the target.
    Use as a context manager: leaving it without commit() (an error, Ctrl-C, SIGTERM) closes every
    staged file and replaces nothing. `replaced` lists what commit() has replaced so far, for the
    message of a run stopped while committing.
    """

    def __init__(self, plans: list[PlannedOutput]) -> None:
        self.plans = {plan.flag: plan for plan in plans}
        self.staged: list[tuple[PlannedOutput, int]] = []  # (plan, descriptor of its unnamed file)
        self.replaced: list[str] = []
        self.written: list[tuple[PlannedOutput, int]] = []  # each file written, with its size in bytes
        self._new_mode = 0o666 & ~_umask()

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, *exc_info) -> None:
        self.discard()

    def discard(self) -> None:
        """Close every staged file: having no name, it is gone."""
        held = _hold_signals()
        try:
            for _, fd in self.staged:
                os.close(fd)
            self.staged.clear()
        finally:
            _release_signals(held)

    def _failed(self, plan: PlannedOutput, exc: OSError, fix: str = "choose another path") -> OutputError:
        return OutputError(f"{display_path(plan.path)}: cannot write the {plan.what} ({exc.strerror or exc}); {fix}")

    def _unnamed(self, plan: PlannedOutput) -> int:
        """A new unnamed file beside the target (streams: in the system's temporary folder), open
        for reading and writing, recorded before any signal can leave it behind."""
        directory = _staging_folder(plan)
        held = _hold_signals()
        try:
            try:
                fd = os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
            except (AttributeError, OSError):  # no O_TMPFILE here, or not on this file system
                fd, temp = tempfile.mkstemp(prefix=_temp_prefix(directory, plan), suffix=".tmp", dir=directory)
                os.unlink(temp)
            self.staged.append((plan, fd))
        except OSError as exc:
            raise self._failed(plan, exc) from None
        finally:
            _release_signals(held)
        return fd

    def stage(self, flag: str, write: Callable[[IO], None]) -> None:
        """Write one output into its unnamed file."""
        plan = self.plans[flag]
        fd = self._unnamed(plan)
        try:
            with open(os.dup(fd), "wb" if plan.binary else "w", encoding=None if plan.binary else "utf-8") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise self._failed(plan, exc, "choose another path or free some space") from None

    @contextmanager
    def stage_path(self, flag: str) -> Iterator[tuple[str, Callable[[], None]]]:
        """A temporary path for a writer that wants a file name (SQLite), and what to call once the
        writer has opened it: the name is then taken away, the file kept open here, so that from
        then on no stop leaves it behind."""
        plan = self.plans[flag]
        directory = _staging_folder(plan)
        held = _hold_signals()
        try:
            fd, temp = tempfile.mkstemp(prefix=_temp_prefix(directory, plan), suffix=".tmp", dir=directory)
            os.close(fd)
            os.unlink(temp)  # the writer creates it afresh
        except OSError as exc:
            raise self._failed(plan, exc) from None
        finally:
            _release_signals(held)

        def opened() -> None:
            held = _hold_signals()
            try:
                self.staged.append((plan, os.open(temp, os.O_RDONLY | os.O_CLOEXEC)))
                os.unlink(temp)
            finally:
                _release_signals(held)

        try:
            yield temp, opened
        except OSError as exc:
            raise self._failed(plan, exc, "choose another path or free some space") from None
        finally:
            for leftover in (temp, temp + "-journal"):  # a writer that failed before opened(), or left a journal
                try:
                    os.unlink(leftover)
                except OSError:
                    pass

    def commit(self) -> None:
        """Copy each staged stream out, then name each staged file beside its target and rename it
        over the target. Streams go first: they cannot be taken back, and they are what fails at
        this point (a full device, a pipe nobody reads). Signals are held off meanwhile, so a stop
        lands before or after."""
        held = _hold_signals()
        try:
            for plan, fd in sorted(self.staged, key=lambda staged: (not staged[0].stream, not staged[0].url)):
                try:
                    if plan.url:
                        _put(fd, plan)
                        self.written.append((plan, os.fstat(fd).st_size))
                    elif plan.stream:
                        try:
                            _copy_to_stream(fd, plan)
                        except BrokenPipeError:
                            if plan.path != "-":
                                raise
                            # standard output's reader went away (| head): as with the text
                            # report, it ends the printing quietly, and the files are still written
                            _stdout_to_null()
                    else:
                        temp = _named(fd, plan)
                        try:
                            _settle_mode(temp, plan, self._new_mode)
                            os.replace(temp, plan.target)
                        except OSError:
                            _unlink_quietly(temp)
                            raise
                        self.written.append((plan, os.fstat(fd).st_size))
                except OSError as exc:
                    raise OutputError(f"{display_path(plan.path)}: cannot write the {plan.what} ({exc.strerror})"
                                      + self.written_note()) from None
                self.replaced.append(f"{plan.flag} {display_path(plan.path)}")
            self.discard()
        finally:
            _release_signals(held)

    def confirm(self, err) -> None:
        """One line on `err` for each file written: "frtrace: wrote db.pkl (9.7 MB, the database)"."""
        for plan, size in self.written:
            print(f"frtrace: wrote {display_path(plan.path)} ({_size_text(size)}, the {plan.what})", file=err)

    def written_note(self) -> str:
        """'; X was written, Y was not' for a message, or '; no output file was written or changed'."""
        pending = [f"{plan.flag} {display_path(plan.path)}" for plan in self.plans.values()
                   if f"{plan.flag} {display_path(plan.path)}" not in self.replaced]
        if not self.replaced:
            return "; no output file was written or changed"
        return f"; written: {', '.join(self.replaced)}" + (f"; not written: {', '.join(pending)}" if pending else "")


def _size_text(size: int) -> str:
    """1234 -> '1.2 kB', 9_700_000 -> '9.7 MB' (decimal units, as ls -h --si and file managers)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _staging_folder(plan: PlannedOutput) -> str:
    """Beside the target (a rename is then atomic); a stream's in the system's temporary folder,
    never the working directory, which may be the dump folder."""
    return os.path.dirname(plan.target) if plan.target else tempfile.gettempdir()


def _temp_prefix(directory: str, plan: PlannedOutput) -> str:
    """`.<target's name>.` for a temporary name that says what it was, cut so that the whole name
    (with mkstemp's 8 characters and .tmp) fits the folder's limit: a 250-character target name
    is legal, and its temporary name must be too. The target's name is never shortened."""
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    base = os.path.basename(plan.target or "frtrace")
    room = max(1, limit - len(".") - len(".") - 8 - len(".tmp"))
    while len(os.fsencode(base[:room])) > room:  # the limit counts bytes
        room -= 1
    return f".{base[:room]}."


def _named(fd: int, plan: PlannedOutput) -> str:
    """A name beside the target for the staged file `fd`: an O_TMPFILE file is linked in as it
    is; where linking is refused (a file unlinked after opening, a /proc of another mount), its
    bytes are copied into a new file of that name."""
    directory = os.path.dirname(plan.target)
    prefix = _temp_prefix(directory, plan)
    for _ in range(100):
        temp = os.path.join(directory, f"{prefix}{os.urandom(4).hex()}.tmp")
        try:
            os.link(f"/proc/self/fd/{fd}", temp)
            return temp
        except FileExistsError:
            continue
        except OSError:
            pass
        try:
            out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        try:
            _copy_between(fd, out)
            os.fsync(out)
        except OSError:
            os.close(out)
            _unlink_quietly(temp)
            raise
        os.close(out)
        return temp
    raise OSError(17, "no free temporary name beside it")


def _copy_between(source: int, target: int) -> None:
    """Every byte of `source` (read from its start) appended to `target`, in the kernel where it can."""
    size = os.fstat(source).st_size
    offset = 0
    try:
        while offset < size:
            copied = os.copy_file_range(source, target, size - offset, offset)
            if not copied:
                break
            offset += copied
        if offset >= size:
            return
    except (AttributeError, OSError):  # no copy_file_range here, or not between these file systems
        pass
    while chunk := os.pread(source, 1 << 20, offset):
        os.write(target, chunk)  # a regular file takes the whole chunk
        offset += len(chunk)


def _put(staged: int, plan: PlannedOutput) -> None:
    """The staged file's bytes written to its object in the store, whole or not at all: the
    store's write is committed once every byte is in (an S3 object appears only then) and
    discarded on any failure. OSError where it cannot be written."""
    fs, path = filesystem(plan.url)
    try:
        handle = fs.open(path, "wb", autocommit=False)
    except Exception as exc:  # noqa: BLE001 - whatever the store's library raises
        raise OSError(0, f"the store refused it: {reason(exc)}") from None
    try:
        with open(os.dup(staged), "rb") as source:
            source.seek(0)
            shutil.copyfileobj(source, handle, 1 << 20)
        handle.close()
        handle.commit()
    except BaseException as exc:
        try:
            handle.discard()
        except Exception:  # noqa: BLE001 - the failure said is the write's
            pass
        handle.closed = True  # thrown away: closing it later (its __del__) would write what was kept
        if isinstance(exc, Exception):
            raise OSError(0, f"the store refused it: {reason(exc)}") from None
        raise


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _settle_mode(temp: str, plan: PlannedOutput, new_mode: int) -> None:
    """A new file gets the umask's mode; a replaced one keeps its mode and, where we may, its owner."""
    os.chmod(temp, new_mode if plan.mode is None else plan.mode)
    if plan.owner is not None:
        try:
            os.chown(temp, *plan.owner)
        except OSError:
            pass


def _copy_to_stream(staged: int, plan: PlannedOutput) -> None:
    """The staged file's bytes written to the stream the plan names (standard output, a device, a FIFO)."""
    if plan.path == "-":
        sys.stdout.flush()
        out = sys.stdout.buffer
        with open(os.dup(staged), "rb") as source:
            source.seek(0)
            shutil.copyfileobj(source, out)
        out.flush()
        return
    # O_NONBLOCK: a FIFO nobody reads fails at once (ENXIO) instead of blocking forever
    fd = os.open(plan.path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise OSError(0, "it is no longer a terminal, device or pipe")
        os.set_blocking(fd, True)
        with open(os.dup(staged), "rb") as source, os.fdopen(fd, "wb", closefd=False) as sink:
            source.seek(0)
            shutil.copyfileobj(source, sink)
    finally:
        os.close(fd)


def _stdout_to_null() -> None:
    """Standard output pointed at /dev/null: nothing more is printed, and nothing fails at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor behind it (a test's stand-in)
        pass


class _Held:
    """Signals held off (_hold_signals): the calling thread's mask as it was, and, where it is the
    main thread, its handlers as they were and the signals that arrived meanwhile."""

    def __init__(self) -> None:
        self.mask: set | None = None
        self.handlers: dict[int, object] = {}
        self.arrived: list[int] = []

    def record(self, signum: int, frame) -> None:
        self.arrived.append(signum)


_holding: _Held | None = None  # the outermost hold of the main thread's handlers, while it lasts


def _hold_signals() -> _Held:
    """SIGINT, SIGTERM and SIGHUP held off until _release_signals. The mask blocks them in this
    thread only: the kernel gives a signal sent to the process to any thread that does not block
    it (tqdm's monitor, fsspec's event loop, Ray's driver threads), and Python then runs its
    handler in the main thread all the same. So the main thread's handlers are swapped too, for
    one that records the signal, raised again on release."""
    global _holding
    held = _Held()
    try:
        held.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    except (AttributeError, OSError, ValueError):
        pass
    if _holding is None and threading.current_thread() is threading.main_thread():
        for signum in sorted(_HELD_SIGNALS):
            previous = signal.getsignal(signum)
            if previous is not None:  # None: a handler set outside Python, which cannot be put back
                held.handlers[signum] = signal.signal(signum, held.record)
        _holding = held
    return held


def _release_signals(held: _Held) -> None:
    """The handlers and mask as they were; then a signal that arrived meanwhile, raised again."""
    global _holding
    if _holding is held:
        _holding = None
        for signum, handler in held.handlers.items():
            signal.signal(signum, handler)
    if held.mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held.mask)  # one blocked meanwhile lands here
    for signum in dict.fromkeys(held.arrived):
        signal.raise_signal(signum)
