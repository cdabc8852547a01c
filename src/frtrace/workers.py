"""Worker processes for the loader: each asks for files one by one and answers on its own pipe."""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable, Iterator

from .errors import DumpError

_IN_FLIGHT = 2  # files given to a worker ahead of its answers: it never waits for the next one


def _worker(load: Callable, connection) -> None:
    """A worker process: load each job the main process sends, until it sends None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    try:
        while (job := connection.recv()) is not None:
            connection.send(load(job))
    except (BrokenPipeError, EOFError, OSError):  # the main process stopped listening
        pass
    finally:
        connection.close()


def in_workers(load: Callable, jobs: list[tuple[str, int]], workers: int) -> Iterator:
    """load(job) for every job, in job order, from `workers` processes.

    Files are handed out as workers answer, so a worker slowed down (a big file, a busy core)
    takes fewer. No shared queue or lock: each worker has its own pipe, so stopping early
    (Ctrl-C) is only killing the workers, which cannot leave anything locked behind.
    """
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    context = multiprocessing.get_context()
    in_main_thread = threading.current_thread() is threading.main_thread()
    # Ctrl-C ignored while forking, so no child can catch one before it ignores it itself.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    processes, pipes = [], []
    try:
        for _ in range(workers):
            mine, theirs = context.Pipe(duplex=True)
            process = context.Process(target=_worker, args=(load, theirs), daemon=True)
            process.start()
            theirs.close()
            processes.append(process)
            pipes.append(mine)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)

    given: dict = {pipe: deque() for pipe in pipes}  # pipe -> indices of the jobs it holds, in order
    next_job = 0

    def give(pipe) -> None:
        nonlocal next_job
        if next_job < len(jobs):
            try:
                pipe.send(jobs[next_job])
            except OSError:  # the worker died: its pipe still yields what it sent, then EOF
                return
            given[pipe].append(next_job)
            next_job += 1

    def lost(index: int) -> DumpError:
        return DumpError(jobs[index][0], "the worker process reading it died; run again with --jobs 1 to see why")

    try:
        for _ in range(_IN_FLIGHT):
            for pipe in pipes:
                give(pipe)
        done: dict[int, object] = {}
        for index in range(len(jobs)):
            while index not in done:
                alive = [pipe for pipe in pipes if given[pipe]]
                if not alive:  # every worker died: what is left cannot be read
                    done.update((i, lost(i)) for i in range(next_job, len(jobs)))
                    next_job = len(jobs)
                    break
                for pipe in wait(alive):
                    try:
                        result = pipe.recv()
                    except (EOFError, OSError):  # the worker died (killed, out of memory): its files count as unread
                        done.update((i, lost(i)) for i in given[pipe])
                        given[pipe].clear()
                        pipes.remove(pipe)
                        pipe.close()
                        continue
                    done[given[pipe].popleft()] = result
                    give(pipe)
            yield done.pop(index)
        for pipe in pipes:
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
        for pipe in pipes:
            pipe.close()
