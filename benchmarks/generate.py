"""Generate large SYNTHETIC NCCL-layout dump sets for benchmarks.

    python benchmarks/generate.py OUT_DIR --ranks 256 --entries 2000 [--tp 8] [--pp 1]
                                  [--fault none|skip|size|dtype] [--wrap] [--stagger N] [--coalesced] [--timing]
                                  [--repeated-times] [--stacks shared|own|off] [--own-values] [--json]

A TP x PP x DP job: each step runs tp all_reduces, a dp reduce_scatter and all_gather (with
--coalesced: one coalesced group of two all_gathers and its terminator), pp sends and recvs
between stages, and a world all_reduce. Each rank keeps its last --entries records; with --wrap,
even tp groups run extra ops so buffers wrap at different points; with --stagger N, rank r's dump
was taken r % N records before the others' (dumps taken at different moments: with N at least the
world, every rank's columns differ from every other's). --fault injects one desync at
the last step on the middle rank.

The shape of the values, which is what loading costs:
- by default entries of one op share one five-frame stack object, so the pickle holds it once;
  --stacks own gives each entry its own list of frame dicts (what PyTorch's recorder writes),
  --stacks off none.
- --own-values: each entry's lists and tuples are its own objects too (no pickle memo sharing).
- --timing: what NCCL writes with TORCH_NCCL_ENABLE_TIMING=1: start times, and creation, start and
  completion times and durations that jitter per entry; --repeated-times: every entry of a rank
  carries the same few timestamps (a coarse clock).
- --json: JSON dumps (what _dump_fr_trace_json writes: no frames, lists for tuples, 0 for unset).
Files are written by worker processes (one per core).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import random
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
    jitter = random.Random(rank)
    stack_of: dict[str, list] = {}  # one stack per call site: the op's own first frame

    def record(group: str, op: str, sizes_in, sizes_out, dtype="BFloat16", is_p2p=False, same_seq=False):
        if is_p2p:
            p2p[group] = p2p.get(group, 0) + 1
        elif not same_seq:
            seq[group] = seq.get(group, 0) + 1
        n = len(entries)
        created = T0 + n * 2_000_000 + rank * 3_000
        started, completed, duration = None, created + 900_000, 0.9
        if args.timing:
            started = created + jitter.randrange(1_000, 400_000)
            completed = started + jitter.randrange(100_000, 1_500_000)
            duration = (completed - started) / 1e6
        if args.repeated_times:
            created, completed = T0 + (n // 500) * 1_000_000_000, T0 + (n // 500 + 1) * 1_000_000_000
            started = created if args.timing else None
        entries.append({
            "record_id": n, "pg_id": int(group), "process_group": (group, groups[group][0]),
            "collective_seq_id": seq.get(group, 0), "p2p_seq_id": p2p.get(group, 0), "op_id": n,
            "profiling_name": f"nccl:{op}", "time_created_ns": created,
            "input_sizes": sizes_in, "input_dtypes": [dtype] * len(sizes_in),
            "output_sizes": sizes_out, "output_dtypes": [dtype] * len(sizes_out),
            "state": "completed", "time_discovered_started_ns": started,
            "time_discovered_completed_ns": completed, "duration_ms": duration, "retired": True,
            "timeout_ms": 600_000, "is_p2p": is_p2p, "thread_id": "1", "thread_name": "main",
            "frames": [] if args.stacks == "off" else stack_of.setdefault(op, [{**FRAMES[0], "name": op.split(" ")[0]}, *FRAMES[1:]]),
        })

    # every rank runs the same steps, enough to fill the buffer of the rank with the fewest ops per step
    steps = (args.entries + args.stagger + 50) // 5 + 1
    extra = 3 if args.wrap and int(mine["tp"]) % 2 == 0 else 0
    for step in range(steps):
        last = step == steps - 1
        for _ in range(2 + extra):
            record(mine["tp"], "all_reduce", [[4096]], [[4096]])
        if args.coalesced:  # two all_gathers under one seq id, then the group's terminator
            record(mine["dp"], "all_gather_into_tensor_coalesced", [[1024]], [[size["dp"] * 1024]])
            record(mine["dp"], "all_gather_into_tensor_coalesced", [[512]], [[size["dp"] * 512]], same_seq=True)
            record(mine["dp"], "ALLGATHER_coalesced", [], [], same_seq=True)
        else:
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
    early = rank % args.stagger if args.stagger else 0
    entries = entries[len(entries) - early - args.entries:len(entries) - early]
    if args.stacks == "own":
        for entry in entries:
            entry["frames"] = copy.deepcopy(entry["frames"])
    if args.own_values:
        for entry in entries:
            for key in ("process_group", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
                entry[key] = copy.deepcopy(entry[key])
    config = {g: {"name": g, "desc": d, "ranks": str(m)} for g, (d, m) in groups.items() if rank in m}
    return {"version": "2.10", "comm_lib_version": "2.27.5", "pg_config": config, "pg_status": {}, "entries": entries}


def as_json(dump: dict) -> bytes:
    """What _dump_fr_trace_json writes: no frames, 0 for an unset time."""
    for entry in dump["entries"]:
        del entry["frames"]
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            entry[key] = entry[key] or 0
        if entry["duration_ms"] is None:
            del entry["duration_ms"]
    return json.dumps(dump).encode()


def write_rank(job) -> int:
    rank, args = job
    dump = rank_dump(rank, args)
    data = as_json(dump) if args.json else pickle.dumps(dump, protocol=4)
    name = f"nccl_trace_rank_{rank}" + (".json" if args.json else "")
    with open(os.path.join(args.out, name), "wb") as handle:
        handle.write(data)
    return len(data)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--fault", choices=["none", "skip", "size", "dtype"], default="none")
    parser.add_argument("--wrap", action="store_true")
    parser.add_argument("--stagger", type=int, default=0, help="rank r's dump taken r %% N records early")
    parser.add_argument("--coalesced", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--repeated-times", action="store_true")
    parser.add_argument("--stacks", choices=["shared", "own", "off"], default="shared")
    parser.add_argument("--own-values", action="store_true")
    parser.add_argument("--json", action="store_true")
    return parser


def main(argv=None) -> int:
    parser = arguments()
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
