"""Random SYNTHETIC jobs with one injected fault, simulated op by op, for the accuracy test.

A job is TP x PP x DP ranks running S training steps. Each step a rank does, in order: its pipeline
send or recv (PP > 1: stage 0 sends a microbatch to stage 1), a tp all_reduce, a dp reduce_scatter,
a world all_reduce. One rank's program is then changed by one fault:

- skip: it leaves out one collective of one step;
- reorder: it swaps two ops of different groups in one step;
- extra_op: it issues one more world all_reduce after its last step;
- wrong_size: it passes other sizes to one collective (the op still completes, as in gloo when the
  byte count matches);
- dropped_recv: (PP > 1) its pipeline recv of one step is left out;
- missing_dump: it dies in one step: its program ends there and it leaves no dump;
- gpu_hang: a kernel on its GPU never ends before one collective: that op stays "scheduled" on it
  while the members that reach it start it; it never completes (needs dumps with states);
- stuck_group: one collective of its group never completes below PyTorch (NCCL, a link): every
  member starts it; the culprits are that group's members (needs dumps with states).
- two_faults: two ranks are each changed, independently: each skips one collective of one step
  (and goes on) or stalls in compute in one step (its program ends there; it still dumps). The
  truth is the ranks whose fault shows: a rank that got blocked before it reached its own fault
  (behind the other one) never made it, so nothing in the dumps can show it.

The simulation runs the programs like NCCL would with blocking ranks: a rank issues its next op
once its current one completed; a collective completes when every member issued it, a send when
its recv was posted and the other way round. When nobody can move, each rank's dump holds its
completed ops ("completed") and the op it is blocked in ("started"), in the NCCL 2.10 layout. The
faulted rank is the truth; frtrace's answer is never consulted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FAULTS = ("skip", "reorder", "extra_op", "wrong_size", "dropped_recv", "missing_dump", "gpu_hang", "stuck_group",
          "two_faults")
STATE_FAULTS = ("gpu_hang", "stuck_group")  # shown by op states alone: their jobs are never written in gloo's layout
T0 = 1_795_000_000_000_000_000


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass
class Op:
    group: Group
    kind: str  # "coll", "send", "recv"
    name: str  # op name; for p2p the peer's global rank is in `peer`
    sizes_in: list
    sizes_out: list
    peer: int = -1


@dataclass
class Job:
    world: int
    groups: list[Group]
    programs: dict[int, list[Op]]
    faulted: int
    fault: str
    dead: set[int] = field(default_factory=set)  # ranks that leave no dump
    p2p: bool = False  # the job has pipeline sends and recvs
    gloo: bool = False  # its dumps are written in the gloo layout (set by the caller)
    torchcomms: bool = False  # its dumps count collective seq ids per process (set by the caller; no p2p)
    culprits: frozenset[int] = frozenset()  # the truth, where it is more than the faulted rank (stuck_group)
    never_completes: frozenset[tuple[str, int]] = frozenset()  # (group name, seq) that no member finishes
    never_started: frozenset[int] = frozenset()  # ranks whose stuck op stays "scheduled" (their GPU never reached it)
    # two_faults: rank -> (fault, where): the index of the op after the skipped one, or how many ops it issues before it stalls
    changes: dict[int, tuple[str, int]] = field(default_factory=dict)
    skipped: dict[int, Op] = field(default_factory=dict)  # two_faults: the op a skipping rank left out

    @property
    def truth(self) -> set[int]:
        return set(self.culprits) or {self.faulted}


def _layout(rng: random.Random) -> tuple[int, int, int]:
    while True:
        tp, pp, dp = rng.choice((1, 2, 4)), rng.choice((1, 2)), rng.choice((1, 2, 4))
        if 4 <= tp * pp * dp <= 16:
            return tp, pp, dp


def make_job(rng: random.Random, fault: str) -> Job:
    tp, pp, dp = _layout(rng)
    if fault == "dropped_recv" and pp == 1:
        pp, dp = 2, max(1, dp // 2)
    world = tp * pp * dp
    rank_of = {(d, p, t): d * pp * tp + p * tp + t for d in range(dp) for p in range(pp) for t in range(tp)}
    groups = [Group("0", "default_pg", tuple(range(world)))]
    tp_of, dp_of, pp_of = {}, {}, {}
    for d in range(dp):
        for p in range(pp):
            g = Group(str(len(groups)), "tp", tuple(rank_of[(d, p, t)] for t in range(tp)))
            groups.append(g)
            tp_of.update(dict.fromkeys(g.ranks, g))
    for p in range(pp):
        for t in range(tp):
            g = Group(str(len(groups)), "dp", tuple(rank_of[(d, p, t)] for d in range(dp)))
            groups.append(g)
            dp_of.update(dict.fromkeys(g.ranks, g))
    for d in range(dp):
        for t in range(tp):
            g = Group(str(len(groups)), "pp", tuple(rank_of[(d, p, t)] for p in range(pp)))
            groups.append(g)
            pp_of.update(dict.fromkeys(g.ranks, g))
    steps = rng.randint(4, 7)
    stage = {r: p for (d, p, t), r in rank_of.items()}

    def step_ops(rank: int) -> list[Op]:
        ops = []
        if pp > 1:
            pair = pp_of[rank]
            if stage[rank] == 0:
                ops.append(Op(pair, "send", "send", [[4, 32]], [[4, 32]], peer=pair.ranks[1]))
            else:
                ops.append(Op(pair, "recv", "recv", [[4, 32]], [[4, 32]], peer=pair.ranks[0]))
        if tp > 1:
            ops.append(Op(tp_of[rank], "coll", "all_reduce", [[8, 16]], [[8, 16]]))
        if dp > 1:
            ops.append(Op(dp_of[rank], "coll", "reduce_scatter", [[dp * 64]], [[64]]))
        ops.append(Op(groups[0], "coll", "all_reduce", [[32]], [[32]]))
        return ops

    per_step = {r: [step_ops(r) for _ in range(steps)] for r in range(world)}
    if fault == "two_faults":
        return _two_faults(rng, world, groups, per_step, steps, pp > 1)
    candidates = [r for r in range(world) if fault != "dropped_recv" or stage[r] == 1]
    faulted = rng.choice(candidates)
    at = rng.randrange(3, steps) if fault in ("skip", "reorder", "dropped_recv", *STATE_FAULTS) else rng.randrange(steps)
    mine = per_step[faulted]
    dead: set[int] = set()
    stuck: dict = {}
    if fault == "skip":
        collectives = [i for i, op in enumerate(mine[at]) if op.kind == "coll"]
        del mine[at][rng.choice(collectives)]
    elif fault == "reorder":
        pairs = [(i, i + 1) for i in range(len(mine[at]) - 1) if mine[at][i].group != mine[at][i + 1].group]
        i, j = rng.choice(pairs)
        mine[at][i], mine[at][j] = mine[at][j], mine[at][i]
    elif fault == "extra_op":
        mine[-1].append(Op(groups[0], "coll", "all_reduce", [[32]], [[32]]))
    elif fault == "wrong_size":
        collectives = [op for op in mine[at] if op.kind == "coll"]
        op = rng.choice(collectives)
        op.sizes_in = [[s * 2 for s in shape] for shape in op.sizes_in]
        op.sizes_out = [[s * 2 for s in shape] for shape in op.sizes_out]
    elif fault == "dropped_recv":
        mine[at] = [op for op in mine[at] if op.kind != "recv"]
    elif fault == "missing_dump":
        cut = rng.randrange(len(mine[at]))
        per_step[faulted] = mine[:at] + [mine[at][:cut]]
        dead.add(faulted)
    elif fault in STATE_FAULTS:  # one collective of step `at` never completes: its (group, seq) in every member
        index = rng.choice([i for i, op in enumerate(mine[at]) if op.kind == "coll"])
        group = mine[at][index].group
        seq = sum(op.group == group for step in mine[:at] for op in step) + sum(op.group == group for op in mine[at][:index + 1])
        stuck = {"never_completes": frozenset({(group.name, seq)})}
        if fault == "gpu_hang":
            stuck["never_started"] = frozenset({faulted})
        else:
            stuck["culprits"] = frozenset(group.ranks)
    programs = {r: [op for step in per_step[r] for op in step] for r in range(world)}
    return Job(world, groups, programs, faulted, fault, dead, p2p=pp > 1, **stuck)


def _two_faults(rng: random.Random, world: int, groups: list[Group], per_step: dict, steps: int, p2p: bool) -> Job:
    """Two ranks, each skipping one collective or stalling in one step from the fourth on."""
    changes, skipped = {}, {}
    for rank in rng.sample(range(world), 2):
        mine, at = per_step[rank], rng.randrange(3, steps)
        before = sum(map(len, mine[:at]))
        if rng.random() < 0.7:
            index = rng.choice([i for i, op in enumerate(mine[at]) if op.kind == "coll"])
            skipped[rank] = mine[at].pop(index)
            changes[rank] = ("skip", before + index)
        else:
            cut = rng.randrange(len(mine[at]))
            per_step[rank] = mine[:at] + [mine[at][:cut]]
            changes[rank] = ("stall", before + cut)
    programs = {r: [op for step in per_step[r] for op in step] for r in range(world)}
    return Job(world, groups, programs, min(changes), "two_faults", p2p=p2p, changes=changes, skipped=skipped)


def shown_faults(job: Job, issued: dict[int, list[tuple[Op, str]]]) -> frozenset[int]:
    """The two_faults ranks whose change shows: ranks that someone waits for in an op they would
    have issued by now but for their change. A rank that skipped an op is awaited in it once it
    went on past it (or ended its program there and finished all else); a rank that stalled is
    awaited while it has finished every op it issued. A changed rank that is blocked before its
    change, or that nobody waits for yet, shows nothing."""
    awaited: dict[int, list[tuple[Group | None, int]]] = {r: [] for r in job.changes}  # (group, seq) or (None, 0) for p2p
    for rank, ops in issued.items():
        if not ops or ops[-1][1] == "completed":
            continue
        op = ops[-1][0]
        if op.kind == "coll":
            seq = sum(o.group == op.group for o, _ in ops)
            for member in op.group.ranks:
                if member in awaited and sum(o.group == op.group for o, _ in issued[member]) < seq:
                    awaited[member].append((op.group, seq))
        elif op.peer in awaited:
            awaited[op.peer].append((None, 0))
    shown = set()
    for rank, (change, where) in job.changes.items():
        ops = issued[rank]
        idle = len(ops) == len(job.programs[rank]) and (not ops or ops[-1][1] == "completed")
        if change == "stall" or where == len(job.programs[rank]):  # nothing after the change: idle ranks show it
            if idle and awaited[rank]:
                shown.add(rank)
            continue
        skipped = job.skipped[rank]
        had = sum(o.group == skipped.group for o in job.programs[rank][:where]) + 1  # its seq in the original program
        if len(ops) > where and any(group == skipped.group and seq <= had for group, seq in awaited[rank]):
            shown.add(rank)
    return frozenset(shown)


def simulate(job: Job) -> dict[int, list[tuple[Op, str]]]:
    """Run the programs with blocking ranks; per rank, its issued ops with their final state."""
    pc = {r: 0 for r in job.programs}
    issued: dict[int, list[tuple[Op, str]]] = {r: [] for r in job.programs}
    seq: dict[tuple[int, str], int] = {}
    waiting: dict[tuple, set[int]] = {}  # (group, seq) -> ranks that issued it
    blocked: dict[int, tuple] = {}
    progress = True
    while progress:
        progress = False
        for rank in job.programs:
            if rank in blocked or pc[rank] >= len(job.programs[rank]):
                continue
            op = job.programs[rank][pc[rank]]
            pc[rank] += 1
            issued[rank].append((op, "started"))
            if op.kind == "coll":
                key = (op.group.name, seq.get((rank, op.group.name), 0) + 1)
                seq[(rank, op.group.name)] = key[1]
                waiting.setdefault(key, set()).add(rank)
                blocked[rank] = ("coll", key)
                if key in job.never_completes and rank in job.never_started:
                    issued[rank][-1] = (op, "scheduled")
            else:
                src, dst = (rank, op.peer) if op.kind == "send" else (op.peer, rank)
                blocked[rank] = ("p2p", (src, dst, op.group.name, op.kind))
            progress = True
        # complete what can complete
        for rank, (kind, key) in list(blocked.items()):
            if blocked.get(rank) != (kind, key):  # completed earlier in this pass
                continue
            if kind == "coll":
                group = next(g for g in job.groups if g.name == key[0])
                if key not in job.never_completes and waiting.get(key, set()) >= set(group.ranks):
                    for member in group.ranks:
                        if blocked.get(member) == ("coll", key):
                            _complete(issued[member])
                            del blocked[member]
                    progress = True
            else:
                src, dst, name, side = key
                other_side = "recv" if side == "send" else "send"
                partner = dst if side == "send" else src
                if blocked.get(partner) == ("p2p", (src, dst, name, other_side)):
                    _complete(issued[rank])
                    _complete(issued[partner])
                    del blocked[rank], blocked[partner]
                    progress = True
    return issued


def _complete(ops: list[tuple[Op, str]]) -> None:
    ops[-1] = (ops[-1][0], "completed")


def dumps_of(job: Job, issued: dict[int, list[tuple[Op, str]]], rng: random.Random, gloo: bool = False,
             torchcomms: bool = False) -> dict[int, dict]:
    """The NCCL-layout dump each living rank writes; some buffers keep only their last entries.

    gloo=True writes what PyTorch 2.13's gloo recorder writes instead: every entry "scheduled" and
    retired, with no duration (no completion tracking), and the placeholder pg_config, so
    membership must be inferred. torchcomms=True numbers collectives with one counter per process
    (shared/format.md: a torchcomms recorder), for jobs without p2p."""
    result = {}
    for rank, ops in issued.items():
        if rank in job.dead:
            continue
        entries, coll_seq, p2p_seq = [], {}, {}
        for i, (op, state) in enumerate(ops):
            g = op.group
            if op.kind == "coll":
                coll_seq[g.name] = coll_seq.get(g.name, 0) + 1
                if torchcomms:
                    coll_seq[g.name] = coll_seq["process"] = coll_seq.get("process", 0) + 1
                name = op.name
            else:
                p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                me, other = sorted(g.ranks).index(rank), sorted(g.ranks).index(op.peer)
                name = f"send {me}->{other}" if op.kind == "send" else f"recv {me}<-{other}"
            created = T0 + i * 1_000_000 + rank * 1_000
            done = state == "completed"
            entries.append({
                "record_id": i, "pg_id": int(g.name), "process_group": (g.name, g.desc),
                "collective_seq_id": coll_seq.get(g.name, 0), "p2p_seq_id": p2p_seq.get(g.name, 0), "op_id": i,
                "profiling_name": f"{'gloo' if gloo else 'nccl'}:{name}", "time_created_ns": created,
                "input_sizes": op.sizes_in, "input_dtypes": ["Float"] * len(op.sizes_in),
                "output_sizes": op.sizes_out, "output_dtypes": ["Float"] * len(op.sizes_out),
                "state": "scheduled" if gloo else state, "time_discovered_started_ns": None if gloo else created + 10_000,
                "time_discovered_completed_ns": created + 500_000 if done else None,
                "duration_ms": None if gloo else 0.49 if done else None, "retired": True if gloo else done, "timeout_ms": 600_000,
                "is_p2p": op.kind != "coll",
            })
        if rng.random() < 0.3 and len(entries) > 24:  # a ring buffer that wrapped
            entries = entries[-rng.randint(24, len(entries)):]
        elif torchcomms and len(entries) > 6 and rng.random() < 0.5:  # short jobs: wrap their buffers too
            entries = entries[-rng.randint(len(entries) // 2, len(entries) - 1):]
        result[rank] = {
            "version": "2.10", "comm_lib_version": "2.27.5",
            "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}} if gloo else
                         {g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))}
                          for g in job.groups if rank in g.ranks},
            "pg_status": {}, "entries": entries,
        }
    return result
