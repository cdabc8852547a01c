"""Worker processes for the loader: each is given files a batch at a time and answers on its own pipe.

Every file is parsed in a worker, never in the main process: a hostile file that crashes the
parser (a C-level recursion) or exhausts its memory ends a worker, and costs that file only.
Small files go to a worker many to a message, and come back so (a message each cost a million
tiny dumps more than their reading: two pickles, two wake-ups and a poll a file); a worker marks
in memory shared with the main process which file of its batch it is reading, so a crash is
still laid on that file alone.
"""

from __future__ import annotations

import errno
import os
import pickle
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterator

from ..errors import DumpError, LimitError, display_path
from .limits import memory_limit_text, memory_limited

_IN_FLIGHT = 2  # batches given to a worker ahead of its answers: it never waits for the next one
_BATCH_BYTES = 1 << 20  # answers sent back in one message, about: files are batched while theirs are small
_MAX_BATCH = 64  # files in one batch at most
OUT_OF_MEMORY = 75  # a worker's exit status where reading a file ran out of memory
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_KEPT_HEAP = 64 << 20  # free memory at the top of a worker's heap kept, not given back, up to this
_HEAP_BLOCKS = 32 << 20  # blocks up to this size come from the heap (the most glibc documents on 64-bit systems)


def keep_heap() -> bool:
    """Keep the memory a worker frees between files for the next (glibc's malloc; elsewhere
    nothing is done): True where both settings took.

    A worker parses a file (megabytes of objects), frees all of it, and parses the next. glibc
    gives the freed top of its heap back to the system whenever it passes 128 kB (or twice the
    largest block it last unmapped), and the next file takes the pages back, each a page fault and
    a page zeroed: a 256-rank set of coalesced groups made 1,084 brk calls and 32,800 minor faults
    in its two workers (strace, getrusage). With the heap kept (and the file's bytes taken from
    it, not mapped afresh each time), 226 and 5,000, and half the workers' system time."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):  # no ctypes, or a C library without mallopt
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, _KEPT_HEAP)) and bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCKS))


def _worker(connection, load: Callable, reading) -> None:
    """A worker process: load each batch of jobs the main process sends, until it sends None,
    with `reading[0]` the place in its batch of the job it is reading (for the main process to
    name the file where the worker dies). Each answer is pickled on its own, as a message of
    its own was: what two answers share is not one object in the main process for being sent
    together, so the outputs never depend on how the files were batched."""
    from multiprocessing.reduction import ForkingPickler

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the parent while it forked
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a worker stopped by a signal just ends
        signal.signal(signum, signal.SIG_DFL)
    keep_heap()
    try:
        while (batch := connection.recv()) is not None:
            try:
                answers = []
                for place, job in enumerate(batch):
                    reading[0] = place
                    answers.append(bytes(ForkingPickler.dumps(load(job))))  # each on its own, as if sent alone
                reading[0] = len(batch)
                connection.send(answers)
            except MemoryError:  # reading or sending it: the worker's memory, not the file's fault
                # said by the main process from the exit status: building a message here needs the
                # memory there is none of, and glibc was seen spinning in mmap for minutes doing so
                os._exit(OUT_OF_MEMORY)
    except (BrokenPipeError, EOFError, OSError):  # the main process stopped listening
        pass
    finally:
        connection.close()


_LIMITS = {errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM}  # what starting a worker runs into


class _Fewer(Exception):
    """No more workers can be started now; the ones running go on."""


def process_context():
    """fork where there is one: Python 3.14 made forkserver the default on Linux, which would
    import frtrace again in every worker. 3.11's behaviour, asked for by name, without warnings."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def start_process(target: Callable, *args, name: str | None = None) -> tuple:
    """(this end of a duplex pipe, the process) of a daemon child running target(its end, *args),
    forked where fork is (process_context). Ctrl-C is blocked while it forks: no child can catch
    one before it ignores it itself, and one pressed meanwhile waits, then reaches this process as
    the mask is restored (ignoring it here for the moment, as before, lost it: the run went on to
    the end). The child unblocks it once it ignores it."""
    context = process_context()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        mine, theirs = context.Pipe(duplex=True)
        process = context.Process(target=target, args=(theirs, *args), daemon=True, name=name)
        process.start()
        theirs.close()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return mine, process


def in_workers(load: Callable, jobs: list[tuple[str, int]], workers: int, pickled: bool = False) -> Iterator:
    """load(job) for every job, in job order, from `workers` processes (`pickled`: each as the
    bytes of its pickle, as the worker sent it: for a Ray task to send on).

    Files are handed out as workers answer, so a worker slowed down (a big file, a busy core)
    takes fewer; a batch holds one file until the answers show how big they come back, then as
    many as make about _BATCH_BYTES of answers. No shared queue or lock: each worker has its own
    pipe, so stopping early (Ctrl-C) is only killing the workers, which cannot leave anything
    locked behind. A worker that dies costs the file it was reading; the other files of its
    batches go to a new worker, one to a batch.
    """
    from multiprocessing.connection import wait

    context = process_context()
    processes: list = []
    given: dict = {}  # pipe -> the batches it holds (lists of job indices), in order
    owner: dict = {}  # pipe -> (its worker process, the place in its first batch of the job it reads)

    def start_worker():
        reading = context.RawArray("q", 1)
        mine, process = start_process(_worker, load, reading)
        processes.append(process)
        given[mine] = deque()
        owner[mine] = (process, reading)
        return mine

    queue = deque(range(len(jobs)))  # jobs not given to any worker yet
    alone: set[int] = set()  # jobs that were in the batch of a worker that died: given one at a time
    answered = [0, 0]  # answers received, and their bytes: how many make a batch

    def give(pipe) -> None:
        if not queue:
            return
        size = 1 if not answered[0] else max(1, min(_MAX_BATCH, _BATCH_BYTES * answered[0] // max(1, answered[1])))
        batch = [queue.popleft()]
        while queue and len(batch) < size and batch[0] not in alone and queue[0] not in alone:
            batch.append(queue.popleft())
        try:
            pipe.send([jobs[index] for index in batch])
        except OSError:  # the worker died: its pipe still yields what it sent, then EOF
            queue.extendleft(reversed(batch))
            return
        given[pipe].append(batch)

    def lost(index: int, process=None) -> DumpError | LimitError:
        if process is not None:
            process.join(timeout=5)  # its pipe closed as it ended: its status is there at once
            if process.exitcode == OUT_OF_MEMORY:
                return LimitError(f"{display_path(jobs[index][0])}: reading it ran out of memory under "
                                  f"{memory_limit_text()}: the machine's limit, not the file's fault; raise the limit "
                                  "or pass fewer --jobs, and run again")
        if memory_limited():  # under the process's own limit, the machine's doing is as likely: never blamed on the file
            return LimitError(f"{display_path(jobs[index][0])}: the process reading it crashed or ran out of memory "
                              f"under {memory_limit_text()}; raise the limit and run again (if it still fails, the "
                              "file is damaged or hostile: leave it out)")
        return DumpError(jobs[index][0], "the process reading it crashed or ran out of memory; "
                                         "the file is damaged or hostile, leave it out")

    def start_or_say() -> None:
        """A worker started, or, where none can be, a LimitError naming what to raise."""
        try:
            start_worker()
        except OSError as exc:
            if exc.errno not in _LIMITS:
                raise
            if not given:  # EMFILE, ENFILE, EAGAIN, ENOMEM: a limit of the process or the machine
                raise LimitError(f"cannot start a process to read the dumps ({exc.strerror or exc}): a limit of this "
                                 "machine (open files: ulimit -n; processes: ulimit -u; memory); raise it, or pass "
                                 "fewer --jobs") from None
            raise _Fewer() from None

    try:
        for _ in range(workers):
            try:
                start_or_say()
            except _Fewer:  # as many workers as the limits allow
                break
        for _ in range(_IN_FLIGHT):
            for pipe in list(given):
                give(pipe)
        done: dict[int, object] = {}
        for index in range(len(jobs)):
            while index not in done:
                busy = [pipe for pipe in given if given[pipe]]
                if not busy:  # no worker holds a job: none could take one
                    done.update((i, lost(i)) for i in queue)
                    queue.clear()
                    break
                for pipe in wait(busy):
                    try:
                        message = pipe.recv_bytes()
                    except (EOFError, OSError):  # the worker died (crashed, killed, out of memory)
                        held = given.pop(pipe)
                        pipe.close()
                        process, reading = owner.pop(pipe)
                        batch = held.popleft()  # it answers in order: its first batch is the one it was reading
                        # past its batch's last file, it died sending their answers: no one file's doing
                        place = 0 if len(batch) == 1 else reading[0]
                        if place < len(batch):
                            done[batch[place]] = lost(batch[place], process)
                        again = batch[:place] + batch[place + 1:] + [i for later in held for i in later]
                        alone.update(again)
                        queue.extendleft(reversed(again))  # never answered: for the next worker
                        if queue:
                            try:
                                start_or_say()
                            except _Fewer:  # the workers left take the queue
                                continue
                            replacement = list(given)[-1]
                            for _ in range(_IN_FLIGHT):
                                give(replacement)
                        continue
                    answers = pickle.loads(message)
                    answered[0] += len(answers)
                    answered[1] += len(message)
                    done.update(zip(given[pipe].popleft(), answers if pickled else map(pickle.loads, answers)))
                    give(pipe)
            answer = done.pop(index)
            yield pickle.dumps(answer) if pickled and not isinstance(answer, bytes) else answer  # a file lost: its error
        for pipe in given:
            try:
                pipe.send(None)
            except OSError:  # it died after its last answer: killed below in any case
                pass
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join()
        for pipe in given:
            pipe.close()
