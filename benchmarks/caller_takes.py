"""What the caller spends taking each dump's answer and each listing, per file (issue 51).

    python benchmarks/caller_takes.py SET [--src SRC] [--repeat 9]

The caller's steps timed alone, in one process, by its own thread's CPU (time.thread_time),
the best of --repeat: taking each worker's answer (pickle.loads of what a worker or a Ray task
sent, then wire.Unpacker.dump: the answers made once beforehand by 2 local workers, times not
asked, as `-o` alone asks) and taking a node's listing with --node-local (unpickling what the
node's listing task sends, Cluster._merge, discover.finish); and a shared folder's listing, made
on the caller (discover.find_dump_files) or, with --ray, taken from the task that made it on the
caller's own node (unpickling the Discovery cluster._find_here sends). --src runs another checkout's
frtrace (e.g. a git worktree of an older commit): run both, alternated, to compare them pair by
pair on this noisy machine. A benchmark, not a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def best_of(repeat: int, step) -> float:
    """The least CPU seconds of this thread that `step()` took over `repeat` runs."""
    least = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        step()
        least = min(least, time.thread_time() - start)
    return least


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", help="a dump folder (benchmarks/generate.py makes one)")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the frtrace sources to time")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    sys.path.insert(0, args.src)
    from frtrace import loader
    from frtrace.reading import cluster, discover, wire

    gc.disable()  # as the caller reads: millions of acyclic tuples
    files = discover.find_dump_files(args.set).files
    answers = list(loader.read_pickled([(f.path, f.rank) for f in files], 2, False))

    def take_answers() -> None:
        unpacker = wire.Unpacker()
        for answer in answers:
            unpacker.dump(pickle.loads(answer))

    node = cluster.Node("node-id", "node-a", 1)
    found = discover.walked(args.set)
    labelled = getattr(cluster, "_labelled", None)  # older checkouts named the files on the caller
    listing = pickle.dumps(labelled(found, node.label) if labelled else found, protocol=pickle.HIGHEST_PROTOCOL)

    def take_listing() -> None:
        reader, merged = cluster.Cluster.__new__(cluster.Cluster), discover.Found()
        reader.node_of = {}
        reader._merge(merged, pickle.loads(listing), node)
        discover.finish(merged)

    find_here = getattr(cluster, "_find_here", None)  # older checkouts listed a shared folder on the caller
    shared = pickle.dumps(find_here(args.set, None, cluster.view_of(args.set))[1], protocol=pickle.HIGHEST_PROTOCOL) \
        if find_here else None

    count = len(files)
    answer_us = best_of(args.repeat, take_answers) / count * 1e6
    listing_us = best_of(args.repeat, take_listing) / count * 1e6
    folder_us = best_of(args.repeat, lambda: discover.find_dump_files(args.set)) / count * 1e6
    print(f"{args.src}: {count} files; of the caller's CPU a file: taking each answer {answer_us:.1f} us "
          f"({sum(map(len, answers)) / count:.0f} bytes an answer), a node's listing {listing_us:.1f} us "
          f"({len(listing) / count:.0f} bytes a file); a shared folder listed here {folder_us:.1f} us", end="")
    if shared is not None:
        taken_us = best_of(args.repeat, lambda: pickle.loads(shared)) / count * 1e6
        print(f", taken from a task on this node {taken_us:.1f} us ({len(shared) / count:.0f} bytes a file)", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
