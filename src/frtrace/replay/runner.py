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
import importlib.util
import json
import math
import os
import random
import socket
import sys
import time
import traceback
from pathlib import Path

from ..errors import printable
from ..reading.limits import MAX_RANK

_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}


_PLAN_KEYS = ("format", "mode", "world_size", "groups", "ranks", "silent_ranks")
_OP_BYTES = {"Double": 8, "Long": 8, "Float": 4, "Int": 4, "Half": 2, "BFloat16": 2, "Short": 2}  # else 1
MAX_OP_BYTES = 1 << 30  # the tensors of one op of one rank: what a rank may allocate at once
MAX_OP_TENSORS = 1 << 16  # tensors in one op's list (an all_gather into a million tensors is refused)
MAX_TIMEOUT_S = 24 * 3600
RANKS_PER_CPU = 4  # local ranks spawned per CPU at most; more is launched by torchrun across hosts


_LISTS_OUT = ("all_gather", "_allgather_base", "all_gather_into_tensor", "gather")  # ops the runner issues with a list of tensors: its length is the shape's first dim
_LISTS_IN = ("scatter",)


def _is_shape(value) -> bool:
    return isinstance(value, list) and len(value) <= 64 and all(type(d) is int and 0 <= d < 1 << 40 for d in value)


def _op_problem(op, world: int, group_ids: set[str]) -> str | None:
    """What makes one op unusable: its keys and shapes (values the runner would act on)."""
    if not isinstance(op, dict):
        return "an op that is not an object"
    if not isinstance(op.get("op"), str) or not op["op"]:
        return "an op without its name ('op')"
    if not isinstance(op.get("group"), str) or op["group"] not in group_ids:
        return f"a {op['op']} of no group the plan lists ({str(op.get('group'))[:40]!r})"
    if not isinstance(op.get("dtype"), str):
        return f"a {op['op']} without a dtype"
    for side in ("in", "out"):
        shapes = op.get(side)
        if not isinstance(shapes, list) or len(shapes) > MAX_OP_TENSORS or not all(_is_shape(s) for s in shapes):
            return f"a {op['op']} whose '{side}' is not a list of up to {MAX_OP_TENSORS} shapes"
    listed = op["out"] if op["op"] in _LISTS_OUT else op["in"] if op["op"] in _LISTS_IN else []
    if listed and listed[0] and listed[0][0] > MAX_OP_TENSORS:  # the runner makes a list of that many tensors
        return f"a {op['op']} into a list of {listed[0][0]} tensors, more than {MAX_OP_TENSORS}"
    for key in ("root", "peer"):
        if op.get(key) is not None and not (type(op[key]) is int and 0 <= op[key] < world):
            return f"a {op['op']} whose {key} is not a rank of the world"
    return None


def _op_bytes(op: dict) -> int:
    """What the runner allocates for one op: its input and output tensors (a gather's list of them)."""
    return sum(math.prod(s) for s in (*op["in"], *op["out"])) * _OP_BYTES.get(op["dtype"], 1)


def _plan_problem(plan, local_ranks: bool = True) -> str | None:
    """What makes `plan` unusable, before any process starts, in words, or None: its keys, its
    groups (members of the world, each once, at least one), every op's keys and shapes, what one
    op of one rank allocates (MAX_OP_BYTES), and, where this host spawns every rank
    (`local_ranks`), how many ranks this host can run."""
    if not isinstance(plan, dict) or plan.get("format") != "frtrace-replay":
        return "no frtrace-replay format mark"
    missing = [key for key in _PLAN_KEYS if key not in plan]
    if missing:
        return f"no {', '.join(missing)}"
    if plan["mode"] not in ("as-recorded", "majority"):
        return "mode must be as-recorded or majority"
    world = plan["world_size"]
    if type(world) is not int or not 0 < world <= MAX_RANK:
        return f"world_size must be a number of ranks up to {MAX_RANK}"
    cpus = os.cpu_count() or 1
    if local_ranks and world > RANKS_PER_CPU * cpus:
        return (f"{world} ranks are more than this host runs ({RANKS_PER_CPU} per CPU, {cpus} CPUs): launch it with "
                "torchrun across hosts, one rank per process")
    groups, ranks, silent = plan["groups"], plan["ranks"], plan["silent_ranks"]
    if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("id"), str) and isinstance(g.get("name"), str)
            and isinstance(g.get("desc"), str) and isinstance(g.get("ranks"), list)
            and all(type(r) is int and 0 <= r < world for r in g["ranks"]) for g in groups):
        return "groups must list id, name, desc and ranks of the world"
    for group in groups:
        if not group["ranks"] or len(set(group["ranks"])) != len(group["ranks"]):
            return f"group {group['id'][:40]!r} must list its ranks once each, and at least one"
    if not isinstance(ranks, dict) or any(not isinstance(ranks.get(str(r)), list) for r in range(world)):
        return "ranks must hold a list of ops for every rank"
    if not isinstance(silent, list) or not all(type(r) is int and 0 <= r < world for r in silent):
        return "silent_ranks must be a list of ranks"
    group_ids = {g["id"] for g in groups}
    for rank in range(world):
        for op in ranks[str(rank)]:
            problem = _op_problem(op, world, group_ids)
            if problem:
                return f"rank {rank} has {problem}"
            if _op_bytes(op) > MAX_OP_BYTES:
                return (f"rank {rank}'s {op['op']} would allocate {_op_bytes(op) >> 20} MiB, more than the "
                        f"{MAX_OP_BYTES >> 20} MiB one op may")
    return None


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:  # NaN fails too
        raise argparse.ArgumentTypeError(f"seconds above 0 and up to {MAX_TIMEOUT_S}, not {text!r}")
    return value


_EPHEMERAL_PORTS = "/proc/sys/net/ipv4/ip_local_port_range"


def unused_port(besides: int | None = None) -> int:
    """A port nobody listens on, for a store or rendezvous that a rank binds a moment later, and
    not `besides` (a port drawn for another of the same job, not bound yet either).

    Drawn below the kernel's ephemeral range where there is room: bind(0) and every outgoing
    connection draw from that range, so a port taken from it can be another connection's by the
    time the rank binds it. The rank hosting the store then fails, and the others wait on a port
    nobody serves, or connect to their own: a replay hung so, its ranks stuck in TCPStore."""
    try:
        low = int(Path(_EPHEMERAL_PORTS).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default start, where the range cannot be read
    below = range(max(1024, low - 12000), low)
    for _ in range(100 if below else 0):
        port = random.choice(below)
        if port == besides:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # taken: another try
                continue
            return port
    with socket.socket() as sock:  # no room below the range (it starts at 1024), or none free there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


MAX_NUMEL = 1 << 28  # a tensor of more elements (1 GiB of float32) is refused, not allocated


def _tensor(torch, shape, dtype: str):
    if math.prod(shape) > MAX_NUMEL:
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
               store_port: int | None, logs: str | None = None) -> None:
    """One rank: the plan's groups and ops, its dump, then the end of the run agreed with the others
    on a store of its own (the job's, under torchrun: store_port None), the store's host (rank 0)
    leaving last. Its stderr goes to
    `logs`/rank<R>.log where given (C++ frames of broken connections are the rank's, not the user's)."""
    if logs is not None:
        log = os.open(Path(logs) / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 2)
        os.close(log)
        sys.stderr = open(2, "w", closefd=False)
    try:
        summary = json.dumps(_run_rank(rank, plan, backend, timeout, dumps, init, store_host, store_port))
        if logs is None:
            print(summary, flush=True)
        else:  # printed by the parent in rank order: ranks printing at once would interleave their lines
            (Path(logs) / f"rank{rank}.summary.json").write_text(summary + "\n")
    except BaseException:
        traceback.print_exc()  # into the rank's log: torch.multiprocessing keeps it in a file of its own
        sys.stderr.flush()
        raise


def _run_rank(rank: int, plan: dict, backend: str, timeout: float, dumps: str, init: str, store_host: str,
              store_port: int | None) -> dict:
    import torch
    import torch.distributed as dist

    world = plan["world_size"]
    listed = plan["ranks"][str(rank)]
    silent = rank in plan["silent_ranks"]
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(max(2000, 2 * len(listed) + 16))
    limit = datetime.timedelta(seconds=timeout)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world, timeout=limit)
    if store_port is None:  # under torchrun: the job's store, no second port that may be taken
        store = dist.PrefixStore("frtrace-replay-end", dist.distributed_c10d._get_default_store())
    else:
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
    # the end, agreed outside torch.distributed (nothing more is recorded): all finished, then all
    # let go of their process groups, then the store's host, rank 0, is the last to leave
    store.add("finished", 1)
    _wait_for(store, "finished", world, timeout + 10)
    try:
        if rank:
            dist.destroy_process_group()
    except Exception:  # after a timeout the group may already be broken
        pass
    store.add("left", 1)
    if rank == 0:
        _wait_for(store, "left", world, timeout + 10)
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    return {"rank": rank, "ops": len(listed), "stopped": stopped, "notes": sorted(set(notes)), "timings": _summary(timings)}


def _wait_for(store, key: str, count: int, seconds: float) -> None:
    """Wait until `count` ranks have counted themselves on `key`, or `seconds` passed."""
    deadline = time.monotonic() + seconds
    while store.add(key, 0) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _summary(timings: list[tuple[str, float]]) -> dict:
    found: dict[str, list[float]] = {}
    for name, took in timings:
        found.setdefault(name, []).append(took * 1000)
    return {name: {"count": len(v), "mean_ms": round(sum(v) / len(v), 3)} for name, v in found.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frtrace.replay", description=__doc__.splitlines()[0])
    parser.add_argument("plan_dir", help="the folder frtrace replay wrote")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--timeout", type=_timeout, default=5.0,
                        help=f"seconds an op may take before its rank stops (default 5, at most {MAX_TIMEOUT_S})")
    parser.add_argument("--dumps", help="where the ranks' Flight Recorder dumps go (default PLAN_DIR/dumps)")
    args = parser.parse_args(argv)
    try:
        plan = json.loads((Path(args.plan_dir) / "plan.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        _say(f"{args.plan_dir}/plan.json: cannot read the plan ({str(exc)[:200]}); write it with frtrace replay DIR -o {args.plan_dir}")
        return 2
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ  # this process is one rank, launched by torchrun
    problem = _plan_problem(plan, local_ranks=not torchrun)
    if problem:
        _say(f"{args.plan_dir}/plan.json is not a replay plan frtrace can run: {problem}; write it again with "
             f"frtrace replay DIR -o {args.plan_dir}")
        return 2
    if importlib.util.find_spec("torch") is None:
        _say("needs torch, which is not installed here: pip install 'frtrace[replay]' (or any torch 2.13 or later)")
        return 2
    dumps = Path(args.dumps or Path(args.plan_dir) / "dumps")
    if dumps.exists() and any(dumps.iterdir()):
        _say(f"{dumps} is not empty; move it away or pass --dumps to another folder")
        return 2
    logs = dumps.with_name(dumps.name + "-logs")  # beside the dumps: the ranks' own messages
    logs.mkdir(parents=True, exist_ok=True)
    if torchrun:
        rank = int(os.environ["RANK"])
        stderr, saved = sys.stderr, os.dup(2)  # the rank's messages go to its log; the runner's own lines do not
        try:
            _rank_main(rank, plan, args.backend, args.timeout, str(dumps), "env://",
                       os.environ.get("MASTER_ADDR", "127.0.0.1"), None, str(logs))
            exitcode = 0
        except Exception:  # said in the rank's log by _rank_main, and in one line below
            exitcode = 1
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sys.stderr = stderr
        failed = _failed(rank, exitcode, plan, dumps, logs)
        return _finish(plan, [failed] if failed else [], dumps, logs, ranks=f"rank {rank}")
    import torch.multiprocessing as mp

    port = unused_port()
    # gloo on CPU: forked ranks share the parent's imported torch (seconds saved per rank); CUDA needs spawn
    method = "fork" if args.backend == "gloo" else "spawn"
    context = mp.start_processes(_rank_main, args=(plan, args.backend, args.timeout, str(dumps), f"tcp://127.0.0.1:{port}",
                                                   "127.0.0.1", unused_port(besides=port), str(logs)),
                                 nprocs=plan["world_size"], join=False, start_method=method)
    for process in context.processes:  # one by one: a rank that dies must not take the others down
        process.join()
    failures = [said for rank, process in enumerate(context.processes)
                if (said := _failed(rank, process.exitcode, plan, dumps, logs))]
    return _finish(plan, failures, dumps, logs, ranks=f"{plan['world_size']} ranks")


def _failed(rank: int, exitcode: int | None, plan: dict, dumps: Path, logs: Path) -> str | None:
    """Why a rank failed, or None: an exit code, a signal, or no dump where one was due."""
    log = logs / f"rank{rank}.log"
    if exitcode:
        how = f"killed by signal {-exitcode}" if exitcode < 0 else f"exit code {exitcode}"
        try:
            last = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        except OSError:
            last = []
        said = f": {printable(last[0].strip())[:200]}" if last else ""
        return f"rank {rank} failed ({how}{said}); its messages: {log}"
    if rank not in plan["silent_ranks"] and not (dumps / f"nccl_trace_rank_{rank}").is_file():
        return f"rank {rank} wrote no dump; its messages: {log}"
    return None


def _finish(plan: dict, failures: list[str], dumps: Path, logs: Path, ranks: str) -> int:
    """The ranks' summaries (per-op timings) in rank order, a line per failed rank, and the exit status."""
    for summary in sorted(logs.glob("rank*.summary.json"), key=lambda p: int(p.name[4:].split(".")[0])):
        sys.stdout.write(summary.read_text())
    lines = sum(len(p.read_bytes().splitlines()) for p in logs.glob("rank*.log"))
    said = f"; the ranks' own messages ({lines} lines) are in {logs}" if lines else ""
    for failure in failures:
        _say(failure)
    if failures:
        _say(f"{plan['mode']} replay of {ranks}: {len(failures)} failed, so its dumps are not the job's{said}")
        return 1
    print(f"frtrace.replay: {plan['mode']} replay of {ranks} done; dumps in {dumps}; analyse them with: "
          f"frtrace -d {dumps}{said}")
    return 0


def _say(line: str) -> None:
    print(f"frtrace.replay: {line}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
