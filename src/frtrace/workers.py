"""Worker processes for the loader: each reads its share of the files and answers on its own pipe."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

from .errors import DumpError


def _worker(load: Callable, jobs: list[tuple[str, int]], connection) -> None:
    """A worker process: its share of the files, each result sent back in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    try:
        for job in jobs:
            connection.send(load(job))
    except (BrokenPipeError, EOFError):  # the main process stopped listening
        pass
    finally:
        connection.close()


def in_workers(load: Callable, jobs: list[tuple[str, int]], workers: int) -> Iterator:
    """load(job) for every job, in job order, from `workers` processes; worker i takes jobs i, i + n...

    No shared queue or lock: each worker has its own pipe, so stopping early (Ctrl-C) is only
    killing the workers, which cannot leave anything locked behind.
    """
    import multiprocessing
    import threading

    context = multiprocessing.get_context()
    in_main_thread = threading.current_thread() is threading.main_thread()
    # Ctrl-C ignored while forking, so no child can catch one before it ignores it itself.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    processes, pipes = [], []
    try:
        for i in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(load, jobs[i::workers], sender), daemon=True)
            process.start()
            sender.close()
            processes.append(process)
            pipes.append(receiver)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
    try:
        for i in range(len(jobs)):
            try:
                yield pipes[i % workers].recv()
            except EOFError:  # the worker died (killed, out of memory): its files count as unread
                path, rank = jobs[i]
                yield DumpError(path, "the worker process reading it died; run again with --jobs 1 to see why")
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join()
        for pipe in pipes:
            pipe.close()
