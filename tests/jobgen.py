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

PIPELINE_FAULTS = ("pipeline_drop", "pipeline_skip")
FAULTS = ("skip", "reorder", "extra_op", "wrong_size", "dropped_recv", "missing_dump", "gpu_hang", "stuck_group",
          "two_faults", *PIPELINE_FAULTS)
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
    kind: str  # "coll", "send", "recv", "batch" (sends and recvs posted together, done when all are)
    name: str  # op name; for p2p the peer's global rank is in `peer`
    sizes_in: list
    sizes_out: list
    peer: int = -1
    parts: tuple[Op, ...] = ()  # a batch's sends and recvs


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
    batched: bool = True  # batches are recorded as batch_isend_irecv (one p2p seq, a terminator), else op by op
    parts_done: dict[tuple[int, int], set[int]] = field(default_factory=dict)  # (rank, op index) -> its batch's parts done
    variant: str = ""  # which form of the fault it is, where a kind has several

    @property
    def truth(self) -> set[int]:
        return set(self.culprits) or {self.faulted}


def _layout(rng: random.Random) -> tuple[int, int, int]:
    while True:
        tp, pp, dp = rng.choice((1, 2, 4)), rng.choice((1, 2)), rng.choice((1, 2, 4))
        if 4 <= tp * pp * dp <= 16:
            return tp, pp, dp


@dataclass
class Mesh:
    """The groups of a TP x PP x DP job: rank = (d * pp + p) * tp + t."""

    world: int
    groups: list[Group]
    tp_of: dict[int, Group]
    dp_of: dict[int, Group]
    pp_of: dict[int, Group]  # a pp group's ranks are its stages in order
    stage: dict[int, int]


def _mesh(tp: int, pp: int, dp: int) -> Mesh:
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
    return Mesh(world, groups, tp_of, dp_of, pp_of, {r: p for (d, p, t), r in rank_of.items()})


def make_job(rng: random.Random, fault: str) -> Job:
    if fault in PIPELINE_FAULTS:
        return _pipeline_job(rng, fault)
    tp, pp, dp = _layout(rng)
    if fault == "dropped_recv" and pp == 1:
        pp, dp = 2, max(1, dp // 2)
    mesh = _mesh(tp, pp, dp)
    world, groups, tp_of, dp_of, pp_of, stage = mesh.world, mesh.groups, mesh.tp_of, mesh.dp_of, mesh.pp_of, mesh.stage
    steps = rng.randint(4, 7)

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


def _pipeline_job(rng: random.Random, fault: str) -> Job:
    """TP x PP x DP with a 1F1B pipeline schedule (Megatron's, without interleaving) per step,
    then a dp reduce_scatter and a world all_reduce; each microbatch's forward and backward
    compute holds a tp all_reduce. The sends and recvs that run at once (send a forward, receive a
    backward) are posted together, as batch_isend_irecv (or isend/irecv) do, and done when all are.

    pipeline_drop: one rank leaves out one recv of one step (its last, or any);
    pipeline_skip: one rank leaves out one collective of one step (gloo records only these)."""
    while True:
        tp, pp, dp = rng.choice((1, 2)), rng.choice((2, 4)), rng.choice((1, 2))
        if 4 <= tp * pp * dp <= 16:
            break
    micro, steps = rng.randint(pp, 2 * pp), rng.randint(4, 7)
    faulted, at = rng.randrange(tp * pp * dp), rng.randrange(3, steps)
    if fault == "pipeline_drop":
        variant = "last recv" if rng.random() < 0.5 else "any recv"
        pick = (lambda recvs: recvs[-1]) if variant == "last recv" else rng.choice
    else:
        variant = "collective"
        pick = rng.choice
    return one_f_one_b_job((tp, pp, dp), micro, steps, faulted, at, fault, pick, variant, batched=rng.random() < 0.5)


def one_f_one_b_job(layout: tuple[int, int, int], micro: int, steps: int, faulted: int, at: int, fault: str,
                    pick, variant: str = "", batched: bool = True) -> Job:
    """A 1F1B job (_pipeline_job) whose rank `faulted` leaves out, in step `at` (from 0), the op
    `pick` chooses of its list: of its recvs ((op index, recv)) for pipeline_drop, of its
    collectives' op indices for pipeline_skip."""
    mesh = _mesh(*layout)
    per_step = {r: [_one_f_one_b(mesh, r, micro) for _ in range(steps)] for r in range(mesh.world)}
    mine = per_step[faulted][at]
    if fault == "pipeline_drop":
        i, dropped = pick([(i, part) for i, op in enumerate(mine) for part in op.parts if part.kind == "recv"])
        left = tuple(part for part in mine[i].parts if part is not dropped)
        if left:
            mine[i] = Op(mine[i].group, "batch", "batch", [], [], parts=left)
        else:
            del mine[i]
    else:
        del mine[pick([i for i, op in enumerate(mine) if op.kind == "coll"])]
    programs = {r: [op for step in per_step[r] for op in step] for r in range(mesh.world)}
    return Job(mesh.world, mesh.groups, programs, faulted, fault, p2p=True, batched=batched, variant=variant)


def _one_f_one_b(mesh: Mesh, rank: int, micro: int) -> list[Op]:
    """One training step of `rank`: its stage's 1F1B schedule over `micro` microbatches, then the
    gradient reduce_scatter (dp) and a world all_reduce."""
    pair, stage = mesh.pp_of[rank], mesh.stage[rank]
    last = len(pair.ranks) - 1

    def p2p(kind: str, other: int) -> list[Op]:
        return [Op(pair, kind, kind, [[4, 32]], [[4, 32]], peer=pair.ranks[other])] if 0 <= other <= last else []

    def batch(*parts: list[Op]) -> list[Op]:
        posted = tuple(op for ops in parts for op in ops)
        return [Op(pair, "batch", "batch", [], [], parts=posted)] if posted else []

    def compute() -> list[Op]:
        tp = mesh.tp_of[rank]
        return [Op(tp, "coll", "all_reduce", [[8, 16]], [[8, 16]])] if len(tp.ranks) > 1 else []

    def recv_fwd():
        return p2p("recv", stage - 1) if stage > 0 else []

    def send_fwd():
        return p2p("send", stage + 1) if stage < last else []

    def recv_bwd():
        return p2p("recv", stage + 1) if stage < last else []

    def send_bwd():
        return p2p("send", stage - 1) if stage > 0 else []

    warmup = min(last - stage, micro)
    steady = micro - warmup
    ops: list[Op] = []
    for _ in range(warmup):
        ops += batch(recv_fwd()) + compute() + batch(send_fwd())
    if steady:
        ops += batch(recv_fwd())
    for i in range(steady):
        ops += compute() + batch(send_fwd(), recv_bwd()) + compute()
        ops += batch(send_bwd()) if i == steady - 1 else batch(send_bwd(), recv_fwd())
    for _ in range(warmup):
        ops += batch(recv_bwd()) + compute() + batch(send_bwd())
    if len(mesh.dp_of[rank].ranks) > 1:
        ops.append(Op(mesh.dp_of[rank], "coll", "reduce_scatter", [[len(mesh.dp_of[rank].ranks) * 64]], [[64]]))
    ops.append(Op(mesh.groups[0], "coll", "all_reduce", [[32]], [[32]]))
    return ops


def pipeline_truth(job: Job, issued: dict[int, list[tuple[Op, str]]]) -> frozenset[int]:
    """The ranks a pipeline job's dumps can name: the faulted one and, where the dumps hold no
    send or recv (gloo), every rank blocked in one that a rank blocked in a collective waits for:
    it looks stalled in compute, and nothing in the dumps tells that it waits for the fault."""
    truth = {job.faulted}
    if not job.gloo:
        return frozenset(truth)
    in_p2p = {r for r, ops in issued.items() if ops and ops[-1][1] != "completed" and ops[-1][0].kind != "coll"}
    for rank, ops in issued.items():
        if not ops or ops[-1][1] == "completed" or ops[-1][0].kind != "coll":
            continue
        op = ops[-1][0]
        seq = sum(o.group == op.group for o, _ in ops)
        truth.update(m for m in op.group.ranks
                     if m in in_p2p and sum(o.group == op.group for o, _ in issued[m]) < seq)
    return frozenset(truth)


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
    """Run the programs with blocking ranks; per rank, its issued ops with their final state.
    A send and its recv complete together, once both are posted (in a batch or alone)."""
    pc = {r: 0 for r in job.programs}
    issued: dict[int, list[tuple[Op, str]]] = {r: [] for r in job.programs}
    seq: dict[tuple[int, str], int] = {}
    waiting: dict[tuple, set[int]] = {}  # (group, seq) -> ranks that issued it
    blocked: dict[int, tuple] = {}
    pending: dict[int, list[tuple[int, int, str, int]]] = {}  # rank -> (src, dst, send or recv, part index) not done
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
                pending[rank] = [(rank, p.peer, p.kind, i) if p.kind == "send" else (p.peer, rank, p.kind, i)
                                 for i, p in enumerate(op.parts or (op,))]
                job.parts_done[(rank, len(issued[rank]) - 1)] = set()
                blocked[rank] = ("p2p", None)
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
                continue
            for src, dst, side, index in list(pending[rank]):
                partner = dst if side == "send" else src
                other = next((p for p in pending.get(partner, ()) if p[:3] == (src, dst, "recv" if side == "send" else "send")), None)
                if blocked.get(partner) != ("p2p", None) or other is None:
                    continue
                pending[rank].remove((src, dst, side, index))
                pending[partner].remove(other)
                job.parts_done[(rank, len(issued[rank]) - 1)].add(index)
                job.parts_done[(partner, len(issued[partner]) - 1)].add(other[3])
                for done in (rank, partner):
                    if not pending[done]:
                        _complete(issued[done])
                        del blocked[done]
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

        def record(op: Op, name: str, state: str, is_p2p: bool) -> None:
            g = op.group
            created = T0 + len(entries) * 1_000_000 + rank * 1_000
            done = state == "completed"
            entries.append({
                "record_id": len(entries), "pg_id": int(g.name), "process_group": (g.name, g.desc),
                "collective_seq_id": coll_seq.get(g.name, 0), "p2p_seq_id": p2p_seq.get(g.name, 0), "op_id": len(entries),
                "profiling_name": f"{'gloo' if gloo else 'nccl'}:{name}", "time_created_ns": created,
                "input_sizes": op.sizes_in, "input_dtypes": ["Float"] * len(op.sizes_in),
                "output_sizes": op.sizes_out, "output_dtypes": ["Float"] * len(op.sizes_out),
                "state": "scheduled" if gloo else state, "time_discovered_started_ns": None if gloo else created + 10_000,
                "time_discovered_completed_ns": created + 500_000 if done else None,
                "duration_ms": None if gloo else 0.49 if done else None, "retired": True if gloo else done, "timeout_ms": 600_000,
                "is_p2p": is_p2p,
            })

        def p2p_name(part: Op) -> str:
            me, other = sorted(part.group.ranks).index(rank), sorted(part.group.ranks).index(part.peer)
            return f"send {me}->{other}" if part.kind == "send" else f"recv {me}<-{other}"

        for i, (op, state) in enumerate(ops):
            g = op.group
            if op.kind == "coll":
                coll_seq[g.name] = coll_seq.get(g.name, 0) + 1
                if torchcomms:
                    coll_seq[g.name] = coll_seq["process"] = coll_seq.get("process", 0) + 1
                record(op, op.name, state, False)
            elif gloo:  # gloo records no send or recv
                continue
            elif not op.parts:
                p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                record(op, p2p_name(op), state, True)
            elif job.batched:  # batch_isend_irecv: one p2p seq, each op, a terminator with the batch's state
                p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                for part in op.parts:
                    record(part, p2p_name(part), "scheduled", True)
                record(Op(g, "batch", "coalesced", [], []), "coalesced", state, False)
            else:  # isend/irecv posted together, each its own op
                for index, part in enumerate(op.parts):
                    p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                    record(part, p2p_name(part), "completed" if index in job.parts_done[(rank, i)] else "started", True)
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
