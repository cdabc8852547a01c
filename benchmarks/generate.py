"""Generate large SYNTHETIC NCCL-layout dump sets for benchmarks.

    python benchmarks/generate.py OUT_DIR --ranks 256 --entries 2000 [--tp 8] [--pp 1]
                                  [--fault none|skip|size|dtype] [--wrap]

A TP x PP x DP job: each step runs tp all_reduces, a dp reduce_scatter and all_gather, pp sends
and recvs between stages, and a world all_reduce. Each rank keeps its last --entries records;
with --wrap, even tp groups run extra ops so buffers wrap at different points. --fault injects
one desync at the last step on the middle rank. Entries carry five stack frames, as real dumps do.
Files are written by worker processes (one per core).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor

T0 = 1_795_000_000_000_000_000
FRAMES = [
    {"name": "all_reduce", "filename": "site-packages/torch/distributed/distributed_c10d.py", "line": 3245},
    {"name": "wrapper", "filename": "site-packages/torch/distributed/c10d_logger.py", "line": 83},
    {"name": "reduce_gradients", "filename": "model/parallel.py", "line": 211},
    {"name": "train_step", "filename": "train.py", "line": 88},
    {"name": "main", "filename": "train.py", "line": 140},
]


def topology(world: int, tp: int, pp: int):
    """Group name -> (desc, ranks), and each rank's tp, dp and pp group names."""
    dp = world // (tp * pp)
    groups = {"0": ("default_pg", list(range(world)))}
    of_rank: dict[int, dict[str, str]] = {r: {} for r in range(world)}
    name = 1
    for kind, members_of in (
        ("tp", [[s * tp * dp + d * tp + t for t in range(tp)] for s in range(pp) for d in range(dp)]),
        ("dp", [[s * tp * dp + d * tp + t for d in range(dp)] for s in range(pp) for t in range(tp)]),
        ("pp", [[s * tp * dp + d * tp + t for s in range(pp)] for d in range(dp) for t in range(tp)] if pp > 1 else []),
    ):
        for members in members_of:
            groups[str(name)] = (kind, members)
            for r in members:
                of_rank[r][kind] = str(name)
            name += 1
    return groups, of_rank


def rank_dump(rank: int, args) -> dict:
    groups, of_rank = topology(args.ranks, args.tp, args.pp)
    mine = of_rank[rank]
    size = {k: len(groups[g][1]) for k, g in mine.items()}
    seq: dict[str, int] = {}
    p2p: dict[str, int] = {}
    entries: list[dict] = []
    middle = args.ranks // 2 + 1
    stage = groups[mine["pp"]][1].index(rank) if "pp" in mine else 0

    def record(group: str, op: str, sizes_in, sizes_out, dtype="BFloat16", is_p2p=False):
        if is_p2p:
            p2p[group] = p2p.get(group, 0) + 1
        else:
            seq[group] = seq.get(group, 0) + 1
        n = len(entries)
        entries.append({
            "record_id": n, "pg_id": int(group), "process_group": (group, groups[group][0]),
            "collective_seq_id": seq.get(group, 0), "p2p_seq_id": p2p.get(group, 0), "op_id": n,
            "profiling_name": f"nccl:{op}", "time_created_ns": T0 + n * 2_000_000 + rank * 3_000,
            "input_sizes": sizes_in, "input_dtypes": [dtype] * len(sizes_in),
            "output_sizes": sizes_out, "output_dtypes": [dtype] * len(sizes_out),
            "state": "completed", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": T0 + n * 2_000_000 + 900_000, "duration_ms": 0.9, "retired": True,
            "timeout_ms": 600_000, "is_p2p": is_p2p, "thread_id": "1", "thread_name": "main", "frames": FRAMES,
        })

    # every rank runs the same steps, enough to fill the buffer of the rank with the fewest ops per step
    steps = (args.entries + 50) // 5 + 1
    extra = 3 if args.wrap and int(mine["tp"]) % 2 == 0 else 0
    for step in range(steps):
        last = step == steps - 1
        for _ in range(2 + extra):
            record(mine["tp"], "all_reduce", [[4096]], [[4096]])
        record(mine["dp"], "_reduce_scatter_base", [[size["dp"] * 1024]], [[1024]])
        record(mine["dp"], "_all_gather_base", [[1024]], [[size["dp"] * 1024]])
        if "pp" in mine:
            peers = groups[mine["pp"]][1]
            if stage + 1 < len(peers):
                record(mine["pp"], f"send {stage}->{stage + 1}", [[8, 512]], [[8, 512]], is_p2p=True)
            if stage > 0:
                record(mine["pp"], f"recv {stage}<-{stage - 1}", [[8, 512]], [[8, 512]], is_p2p=True)
        if last and rank == middle and args.fault == "skip":
            break
        sizes = [[2]] if last and rank == middle and args.fault == "size" else [[1]]
        dtype = "Float" if last and rank == middle and args.fault == "dtype" else "BFloat16"
        record("0", "all_reduce", sizes, sizes, dtype)
    if args.fault != "none" and not entries[-1]["is_p2p"]:
        # the hang: the last world all_reduce never completed. A rank that skipped it ends on a
        # send or recv, which completed with its partner's (p2p ops complete in pairs)
        entries[-1]["state"] = "scheduled"
        entries[-1]["time_discovered_completed_ns"] = None
        entries[-1]["duration_ms"] = None
    entries = entries[-args.entries:]
    config = {g: {"name": g, "desc": d, "ranks": str(m)} for g, (d, m) in groups.items() if rank in m}
    return {"version": "2.10", "comm_lib_version": "2.27.5", "pg_config": config, "pg_status": {}, "entries": entries}


def write_rank(job) -> int:
    rank, args = job
    data = pickle.dumps(rank_dump(rank, args), protocol=4)
    with open(os.path.join(args.out, f"nccl_trace_rank_{rank}"), "wb") as handle:
        handle.write(data)
    return len(data)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--fault", choices=["none", "skip", "size", "dtype"], default="none")
    parser.add_argument("--wrap", action="store_true")
    args = parser.parse_args(argv)
    if args.ranks % (args.tp * args.pp):
        parser.error("--ranks must be a multiple of --tp x --pp")
    os.makedirs(args.out, exist_ok=True)
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        total = sum(pool.map(write_rank, [(r, args) for r in range(args.ranks)], chunksize=16))
    print(f"{args.ranks} ranks x {args.entries} entries: {total / 2**20:.0f} MiB in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
