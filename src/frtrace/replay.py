"""Run a replay written by `frtrace replay DIR -o repro/` on real torch.distributed.

    python -m frtrace.replay repro/ [--backend gloo|nccl] [--timeout S] [--dumps DIR]

Spawns the plan's ranks on this host (or, launched by torchrun, runs the rank its environment
names), makes the recorded process groups in their order, and issues each rank's recorded ops in
order on zero tensors of the recorded shapes and dtypes, with the Flight Recorder on. A rank
whose op does not complete within --timeout (as a recorded desync will not) stops there; every
rank (but the silent ones: no dump was recorded for them) then writes its own Flight Recorder
dump to the dumps folder (default repro/dumps), which frtrace reads like any other. Per-op
timings are printed at the end, as a benchmark of the pattern.

Needs torch (`pip install "frtrace[replay]"`); nothing else of frtrace does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path

from .limits import MAX_RANK

_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}


def _plan_problem(plan) -> str | None:
    """What makes `plan` unusable, before any process starts: its shape, not its ops' values
    (an op the runner cannot issue stops only its rank)."""
    if not isinstance(plan, dict) or plan.get("format") != "frtrace-replay":
        return "no frtrace-replay format mark"
    world = plan.get("world_size")
    if type(world) is not int or not 0 < world <= MAX_RANK:
        return f"world_size must be a number of ranks up to {MAX_RANK}"
    groups, ranks, silent = plan.get("groups"), plan.get("ranks"), plan.get("silent_ranks")
    if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("id"), str) and isinstance(g.get("name"), str)
            and isinstance(g.get("desc"), str) and isinstance(g.get("ranks"), list)
            and all(type(r) is int and 0 <= r < world for r in g["ranks"]) for g in groups):
        return "groups must list id, name, desc and ranks of the world"
    if not isinstance(ranks, dict) or any(not isinstance(ranks.get(str(r)), list) for r in range(world)):
        return "ranks must hold a list of ops for every rank"
    if not all(isinstance(op, dict) for ops in ranks.values() for op in ops):
        return "every op must be an object"
    if not isinstance(silent, list) or not all(type(r) is int for r in silent):
        return "silent_ranks must be a list of ranks"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


MAX_NUMEL = 1 << 28  # a tensor of more elements (1 GiB of float32) is refused, not allocated


def _tensor(torch, shape, dtype: str):
    numel = 1
    for dim in shape:
        numel *= dim
    if numel > MAX_NUMEL:
        raise ValueError(f"a {shape} tensor: over {MAX_NUMEL} elements, not allocated")
    return torch.zeros(shape, dtype=getattr(torch, _DTYPES.get(dtype, "float32")))


def _issue(torch, dist, op: dict, group, rank: int, notes: list[str]) -> None:
    """One recorded op on zero tensors; ops the backend lacks map to the nearest it has."""
    name, ins, outs, dtype = op["op"], op["in"], op["out"], op["dtype"]
    first = _tensor(torch, ins[0] if ins else [1], dtype)
    root = op.get("root")
    if name == "all_reduce":
        dist.all_reduce(first, group=group)
    elif name == "broadcast":
        dist.broadcast(first, src=root if root is not None else dist.get_process_group_ranks(group)[0], group=group)
    elif name == "reduce":
        dist.reduce(first, dst=root if root is not None else dist.get_process_group_ranks(group)[0], group=group)
    elif name in ("all_gather", "_allgather_base", "all_gather_into_tensor"):
        shape = outs[0] if outs else [1]
        dist.all_gather([_tensor(torch, shape[1:], dtype) for _ in range(shape[0])], first, group=group)
    elif name == "gather":  # the list only on the root (a program carried from the root keeps its shapes)
        root = rank if root is None else root
        holder = outs[0] if outs and root == rank else None
        listing = [_tensor(torch, holder[1:], dtype) for _ in range(holder[0])] if holder else None
        dist.gather(_tensor(torch, ins[0] if ins else [1], dtype), listing, dst=root, group=group)
    elif name == "scatter":
        root = rank if root is None else root
        out = _tensor(torch, outs[0] if outs else (ins[0][1:] if ins else [1]), dtype)
        listing = [_tensor(torch, ins[0][1:], dtype) for _ in range(ins[0][0])] if ins and root == rank else None
        dist.scatter(out, listing, src=root, group=group)
    elif name in ("all_to_all", "all_to_all_single", "alltoall_base"):
        dist.all_to_all_single(_tensor(torch, outs[0] if outs else ins[0], dtype), first, group=group)
    elif name in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor"):
        try:
            dist.reduce_scatter_tensor(_tensor(torch, outs[0] if outs else [1], dtype), first, group=group)
        except (RuntimeError, NotImplementedError):
            notes.append("reduce_scatter_tensor is missing on this backend: replayed as all_reduce")
            dist.all_reduce(first, group=group)
    elif name == "barrier":
        dist.barrier(group=group)
    elif name == "send":
        dist.send(first, dst=op["peer"], group=group)
    elif name == "recv":
        dist.recv(first, src=op["peer"], group=group)
    else:
        notes.append(f"{name}: not an op the replay knows; replayed as all_reduce of its input")
        dist.all_reduce(first, group=group)


def _is_default(group: dict, world: int) -> bool:
    return group["desc"] == "default_pg" or (group["name"] == "0" and group["ranks"] == list(range(world)))


def _rank_main(rank: int, plan: dict, backend: str, timeout: float, dumps: str, init: str, store_host: str,
               store_port: int) -> None:
    import torch
    import torch.distributed as dist

    world = plan["world_size"]
    listed = plan["ranks"][str(rank)]
    silent = rank in plan["silent_ranks"]
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(max(2000, 2 * len(listed) + 16))
    limit = datetime.timedelta(seconds=timeout)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world, timeout=limit)
    store = dist.TCPStore(store_host, store_port, world, rank == 0, timeout=datetime.timedelta(seconds=timeout + 30))
    groups = {g["id"]: dist.new_group(g["ranks"], timeout=limit, group_desc=g["desc"] or None)
              for g in plan["groups"] if not _is_default(g, world)}
    notes: list[str] = []
    timings: list[tuple[str, float]] = []
    stopped = None
    for op in listed:
        started = time.perf_counter()
        try:
            _issue(torch, dist, op, groups.get(op["group"]), rank, notes)
        except Exception as exc:  # a recorded desync ends in a timeout here, as it did in the job
            stopped = f"{op['op']} of group {op['group']}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            break
        if not op.get("filler"):
            timings.append((f"{op['op']} {op['in']}", time.perf_counter() - started))
    if not silent:
        Path(dumps).mkdir(parents=True, exist_ok=True)
        dump = torch._C._distributed_c10d._dump_fr_trace()
        (Path(dumps) / f"nccl_trace_rank_{rank}").write_bytes(dump)
    store.add("finished", 1)  # wait for the others outside torch.distributed: nothing more is recorded
    deadline = time.monotonic() + timeout + 10
    while store.add("finished", 0) < world and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"rank": rank, "ops": len(listed), "stopped": stopped, "notes": sorted(set(notes)),
                      "timings": _summary(timings)}), flush=True)
    try:
        dist.destroy_process_group()
    except Exception:  # after a timeout the group may already be broken
        pass


def _summary(timings: list[tuple[str, float]]) -> dict:
    found: dict[str, list[float]] = {}
    for name, took in timings:
        found.setdefault(name, []).append(took * 1000)
    return {name: {"count": len(v), "mean_ms": round(sum(v) / len(v), 3)} for name, v in found.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frtrace.replay", description=__doc__.splitlines()[0])
    parser.add_argument("plan_dir", help="the folder frtrace replay wrote")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds an op may take before its rank stops (default 5)")
    parser.add_argument("--dumps", help="where the ranks' Flight Recorder dumps go (default PLAN_DIR/dumps)")
    args = parser.parse_args(argv)
    try:
        plan = json.loads((Path(args.plan_dir) / "plan.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"frtrace.replay: {args.plan_dir}/plan.json: cannot read the plan ({exc}); write it with frtrace replay DIR -o {args.plan_dir}",
              file=sys.stderr)
        return 2
    problem = _plan_problem(plan)
    if problem:
        print(f"frtrace.replay: {args.plan_dir}/plan.json is not a replay plan written by frtrace replay ({problem}); "
              f"write it again with frtrace replay DIR -o {args.plan_dir}", file=sys.stderr)
        return 2
    dumps = args.dumps or str(Path(args.plan_dir) / "dumps")
    if Path(dumps).exists() and any(Path(dumps).iterdir()):
        print(f"frtrace.replay: {dumps} is not empty; move it away or pass --dumps to another folder", file=sys.stderr)
        return 2
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun: this process is one rank
        port = int(os.environ.get("MASTER_PORT", "29500"))
        _rank_main(int(os.environ["RANK"]), plan, args.backend, args.timeout, dumps, "env://",
                   os.environ.get("MASTER_ADDR", "127.0.0.1"), port + 1)
        return 0
    import torch.multiprocessing as mp

    port = _free_port()
    # gloo on CPU: forked ranks share the parent's imported torch (seconds saved per rank); CUDA needs spawn
    method = "fork" if args.backend == "gloo" else "spawn"
    context = mp.start_processes(_rank_main, args=(plan, args.backend, args.timeout, dumps, f"tcp://127.0.0.1:{port}",
                                                   "127.0.0.1", _free_port()),
                                 nprocs=plan["world_size"], join=False, start_method=method)
    for process in context.processes:  # one by one: a rank that dies must not take the others down
        process.join()
    print(f"frtrace.replay: {plan['mode']} replay of {plan['world_size']} ranks done; dumps in {dumps}; "
          f"analyse them with: frtrace -d {dumps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
