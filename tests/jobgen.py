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

Dumps taken at different moments (MOMENT_FAULTS, shared/format.md "Dumps are not taken at one
moment"). Their ops are timed (timeline: each rank computes 0.2-3 s between an op's end and its
next op; a collective ends 1-50 ms after its last member issued it) and carry a timeout longer than
any wait of the run (5-600 s; moments()), so time_created_ns and timeout_ms tell what they would
in a real job:

- stale_dump: one of BASE_FAULTS (skip, missing_dump, stall: missing_dump's program whose rank
  still dumps, extra_op, wrong_size), and an innocent rank whose file is its dump taken at an
  earlier moment of its own history (on demand): the ops it had created by then, finished ones
  "completed" (gloo: retired), the one in flight "started" (gloo: not retired). Long: its newest
  op more than the timeout + 2 s before every other dump's newest, with an op past its end that a
  peer finished more than the timeout before that peer's newest (gloo's evidence); short: its
  newest op within the timeout of the latest dump's. The faulted rank hangs in its second step or
  later. Truth: the faulted rank only.
- midrun: a healthy job, every rank dumped on demand at its own moment of the run (spread over
  it, or close: within 0.5-5 s; long: most ranks between two steps, a few far back; aligned:
  every rank between the same two steps). Truth: nobody (CLEAN is right, a rank named is wrong).

Only dumps whose moments the dumps themselves show are made (shown_older, the one definition of
that evidence, by the format's facts): the stale rank's dump, and in midrun every rank's that
lacks an op another rank's holds or waits in an op every member issued (behind()), is shown
older than a peer's, in the dumps as written (wraps included). Moments are drawn again (TRIES
times, seeded) until they are, and where none is, a variant further back (stale_dump: long;
midrun: long, then aligned, where nobody lacks an op or waits); a stale_dump job whose run is
too short for any (none seen in 5000 seeds) has no stale rank. Without that evidence an earlier
dump reads exactly like a rank that stalled there (or an op stuck): no analyzer can tell them
apart.
- recorder_off: one of BASE_FAULTS, and 1-2 other ranks (or a node: two consecutive ranks) whose
  recorder was off: their dump is RECORDER_OFF (a version and nothing else). Truth: the faulted
  rank. A quarter of the jobs (not missing_dump) turn off the faulted rank's own recorder (and
  sometimes its node's other rank): nothing can show it, so naming nobody is fine, anyone else wrong.
- late_arrival: a healthy job whose last world all_reduce nobody finishes: one rank (`faulted`)
  created it timeout + 2-60 s after the last of its peers did (they had given up: "started" in
  NCCL's layout, retired in gloo's). Truth: that rank.
- unrecorded: a healthy job with a monitored_barrier that passed on every group of one kind (world,
  tp or dp) at the same point: no entry, and each member's seq ids from there on are 2 more; some
  dumps carry pg_status counts (always where the barrier came after the group's last collective,
  the only place it then shows). Never in a torchcomms layout. Truth: nobody.

The simulation runs the programs like NCCL would with blocking ranks: a rank issues its next op
once its current one completed; a collective completes when every member issued it, a send when
its recv was posted and the other way round. When nobody can move, each rank's dump holds its
completed ops ("completed") and the op it is blocked in ("started"), in the NCCL 2.10 layout. The
faulted rank is the truth; frtrace's answer is never consulted (shown_older and shown_stale read
the dumps by the format's facts, to choose moments and to sort wrong outcomes; they set no truth).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

PIPELINE_FAULTS = ("pipeline_drop", "pipeline_skip")
MOMENT_FAULTS = ("stale_dump", "midrun", "recorder_off", "late_arrival", "unrecorded")  # timed jobs (moments())
FAULTS = ("skip", "reorder", "extra_op", "wrong_size", "dropped_recv", "missing_dump", "gpu_hang", "stuck_group",
          "two_faults", *PIPELINE_FAULTS, *MOMENT_FAULTS)
STATE_FAULTS = ("gpu_hang", "stuck_group")  # shown by op states alone: their jobs are never written in gloo's layout
HEALTHY_FAULTS = ("midrun", "unrecorded")  # no fault at all: the truth is nobody
BASE_FAULTS = ("skip", "missing_dump", "stall", "extra_op", "wrong_size")  # the single-rank faults under stale_dump, recorder_off
T0 = 1_795_000_000_000_000_000
SECOND = 1_000_000_000
RECORDER_OFF = {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}  # TORCH_FR_BUFFER_SIZE=0


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
    # MOMENT_FAULTS (set by moments()): when each issued op was created and finished, in ns (rank -> by op index;
    # None: never); without them dumps_of times the ops 1 ms apart
    healthy: bool = False  # no fault: the truth is nobody (HEALTHY_FAULTS)
    created: dict[int, list[int]] = field(default_factory=dict)
    finished: dict[int, list[int | None]] = field(default_factory=dict)
    timeout_ms: int = 600_000
    live: frozenset[int] = frozenset()  # ranks dumped on demand while running: gloo has not retired their op in flight
    stale: frozenset[int] = frozenset()  # ranks whose dump was taken earlier than the rest (innocent)
    off: frozenset[int] = frozenset()  # ranks whose recorder was off: their dump is RECORDER_OFF
    seq_jumps: frozenset[tuple[str, int]] = frozenset()  # (group, k): a monitored_barrier passed before its k-th collective
    pg_status: bool = False  # dumps carry pg_status counts
    evidence: str = ""  # what the dumps hold of the fault's moment, by construction (for reading a wrong outcome)

    @property
    def truth(self) -> set[int]:
        if self.healthy:
            return set()
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
    if fault in MOMENT_FAULTS:
        return _moment_job(rng, fault)
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
        times, finished = job.created.get(rank), job.finished.get(rank)
        status: dict[str, dict[str, int]] = {}  # group -> pg_status' counts (job.pg_status)

        def record(op: Op, name: str, state: str, is_p2p: bool, index: int = -1) -> None:
            g = op.group
            created = times[index] if times else T0 + len(entries) * 1_000_000 + rank * 1_000
            done = state == "completed"
            ended = (finished[index] if times else created + 500_000) if done else None
            entries.append({
                "record_id": len(entries), "pg_id": int(g.name), "process_group": (g.name, g.desc),
                "collective_seq_id": coll_seq.get(g.name, 0), "p2p_seq_id": p2p_seq.get(g.name, 0), "op_id": len(entries),
                "profiling_name": f"{'gloo' if gloo else 'nccl'}:{name}", "time_created_ns": created,
                "input_sizes": op.sizes_in, "input_dtypes": ["Float"] * len(op.sizes_in),
                "output_sizes": op.sizes_out, "output_dtypes": ["Float"] * len(op.sizes_out),
                "state": "scheduled" if gloo else state, "time_discovered_started_ns": None if gloo else created + 10_000,
                "time_discovered_completed_ns": ended,
                "duration_ms": None if gloo else ((ended - created) / 1e6 if times else 0.49) if done else None,
                # gloo retires an op when it ends, and a failed one too: only an on-demand dump holds an unretired op
                "retired": (done or rank not in job.live) if gloo else done, "timeout_ms": job.timeout_ms,
                "is_p2p": is_p2p,
            })
            if job.pg_status and not is_p2p and op.kind == "coll":
                counts = status.setdefault(g.name, {"last_enqueued_collective": -1, "last_started_collective": -1,
                                                    "last_completed_collective": -1})
                counts["last_enqueued_collective"] = coll_seq[g.name]
                counts["last_started_collective"] = coll_seq[g.name]
                if done:
                    counts["last_completed_collective"] = coll_seq[g.name]

        def p2p_name(part: Op) -> str:
            me, other = sorted(part.group.ranks).index(rank), sorted(part.group.ranks).index(part.peer)
            return f"send {me}->{other}" if part.kind == "send" else f"recv {me}<-{other}"

        for i, (op, state) in enumerate(ops):
            g = op.group
            if op.kind == "coll":
                coll_seq[g.name] = coll_seq.get(g.name, 0) + 1
                if (g.name, coll_seq[g.name]) in job.seq_jumps:  # a monitored_barrier passed: no entry, seq id + 2
                    coll_seq[g.name] += 2
                if torchcomms:
                    coll_seq[g.name] = coll_seq["process"] = coll_seq.get("process", 0) + 1
                record(op, op.name, state, False, i)
            elif gloo:  # gloo records no send or recv
                continue
            elif not op.parts:
                p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                record(op, p2p_name(op), state, True, i)
            elif job.batched:  # batch_isend_irecv: one p2p seq, each op, a terminator with the batch's state
                p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                for part in op.parts:
                    record(part, p2p_name(part), "scheduled", True, i)
                record(Op(g, "batch", "coalesced", [], []), "coalesced", state, False, i)
            else:  # isend/irecv posted together, each its own op
                for index, part in enumerate(op.parts):
                    p2p_seq[g.name] = p2p_seq.get(g.name, 0) + 1
                    record(part, p2p_name(part), "completed" if index in job.parts_done[(rank, i)] else "started", True, i)
        if rng.random() < 0.3 and len(entries) > 24:  # a ring buffer that wrapped
            entries = entries[-rng.randint(24, len(entries)):]
        elif torchcomms and len(entries) > 6 and rng.random() < 0.5:  # short jobs: wrap their buffers too
            entries = entries[-rng.randint(len(entries) // 2, len(entries) - 1):]
        for name, k in job.seq_jumps:
            if name in status and coll_seq.get(name) == k - 1:  # the barrier came after the group's last collective
                for key in status[name]:  # (it passed): only pg_status counts it
                    status[name][key] += 2
        result[rank] = {
            "version": "2.10", "comm_lib_version": "2.27.5",
            "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}} if gloo else
                         {g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))}
                          for g in job.groups if rank in g.ranks},
            "pg_status": {str(int(name)): counts for name, counts in status.items()}, "entries": entries,
        }
        if rank in job.off:  # TORCH_FR_BUFFER_SIZE=0: a version and nothing else
            result[rank] = dict(RECORDER_OFF)
    return result


# ---------------------------------------------------------------------------- dumps taken at different moments
TIMEOUTS_MS = (5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000, 600_000)
GAP_NS = (SECOND // 5, 3 * SECOND)  # a rank computes this long (at random) between an op's end and its next op
CLOCKS_NS = 2 * SECOND  # beyond a timeout: more than the 1 s two hosts' clocks may differ by


def _moment_job(rng: random.Random, fault: str) -> Job:
    """A job of MOMENT_FAULTS, its programs and truth set; moments() times it once it ran.

    stale_dump, recorder_off: a BASE_FAULTS fault made by make_job (stall: missing_dump's
    program, whose rank still dumps); midrun, late_arrival, unrecorded: a healthy job (no branch
    of make_job changes a program for the name "none"; its `faulted` is a rank drawn at random)."""
    if fault in ("stale_dump", "recorder_off"):
        base = rng.choice(BASE_FAULTS)
        job = make_job(rng, "missing_dump" if base == "stall" else base)
        while fault == "stale_dump" and sum(op.group.desc == "default_pg" for op in job.programs[job.faulted]) < 2:
            job = make_job(rng, "missing_dump" if base == "stall" else base)  # two steps: long enough to show a moment
        if base == "stall":
            job.dead = set()  # it stalled in compute: its program ends in that step, and it dumps
        job.variant = base
    else:
        job = make_job(rng, "none")
        job.healthy = fault in HEALTHY_FAULTS
    job.fault = fault
    world = job.groups[0]
    if fault == "recorder_off":
        if job.variant != "missing_dump" and rng.random() < 0.25:  # the faulted rank's own recorder was off
            off = {job.faulted}
            mate = job.faulted ^ 1  # and its node's other rank, some of the time
            if rng.random() < 0.3 and mate < job.world:
                off.add(mate)
            job.variant += ", off: the faulted rank" + (" and its node" if len(off) > 1 else "")
        elif rng.random() < 0.4:  # a whole node of two consecutive ranks
            nodes = [(r, r + 1) for r in range(0, job.world - 1, 2) if job.faulted not in (r, r + 1)]
            off = set(rng.choice(nodes))
            job.variant += ", off: a node"
        else:
            off = set(rng.sample([r for r in range(job.world) if r != job.faulted], rng.randint(1, 2)))
            job.variant += f", off: {len(off)} other rank{'s' * (len(off) > 1)}"
        job.off = frozenset(off)
    elif fault == "late_arrival":  # every rank issues the last world all_reduce; nobody finishes it
        job.never_completes = frozenset({(world.name, sum(op.group == world for op in job.programs[0]))})
    elif fault == "unrecorded":  # a monitored_barrier on every group of one kind, at the same point in each
        kinds = sorted({g.desc for g in job.groups if len(g.ranks) > 1 and any(op.group == g and op.kind == "coll"
                                                                               for op in job.programs[g.ranks[0]])})
        desc = rng.choice(kinds)
        groups = [g for g in job.groups if g.desc == desc]
        count = sum(op.group == groups[0] for op in job.programs[groups[0].ranks[0]])  # every group of a kind: alike
        k = rng.randint(1, count + 1)
        job.seq_jumps = frozenset((g.name, k) for g in groups)
        job.pg_status = k == count + 1 or rng.random() < 0.5  # after the last collective, only pg_status shows it
        job.variant = (f"{desc} barrier " + ("after the last collective" if k == count + 1 else f"before collective {k}")
                       + (", pg_status" if job.pg_status else ""))
    return job


def timeline(job: Job, issued: dict[int, list[tuple[Op, str]]], rng: random.Random
             ) -> tuple[dict[int, list[int]], dict[int, list[int | None]]]:
    """When each issued op was created and when it finished (ns since the epoch), by rank and op
    index: a rank starts within a second of T0 and issues each op GAP_NS (at random) after its
    previous op finished; a collective finishes 1-50 ms after its last member issued it, a send
    and its recv (a batch: all its parts) once both are posted. An op that never finished: None."""
    where: dict[tuple, list[tuple[int, int]]] = {}  # what finishes together -> (rank, op index) of each side
    keys: dict[tuple[int, int], list[tuple]] = {}
    for rank, ops in issued.items():
        counts: dict[tuple, int] = {}
        for i, (op, _) in enumerate(ops):
            keys[(rank, i)] = []
            for part in op.parts or (op,):
                if part.kind == "coll":
                    side = ("coll", part.group.name)
                else:
                    side = ("p2p", rank, part.peer) if part.kind == "send" else ("p2p", part.peer, rank)
                counts[side] = counts.get(side, 0) + 1
                keys[(rank, i)].append((*side, counts[side]))
                where.setdefault((*side, counts[side]), []).append((rank, i))
    ranks = sorted(issued)
    start = {r: T0 + rng.randrange(SECOND) for r in ranks}
    gaps = {r: [rng.randint(*GAP_NS) for _ in issued[r]] for r in ranks}
    lasts: dict[tuple, int] = {}
    created: dict[int, list[int]] = {r: [] for r in ranks}
    ends: dict[tuple[int, int], int] = {}

    def end(rank: int, i: int) -> int | None:
        if (rank, i) not in ends:
            sides = [side for key in keys[(rank, i)] for side in where[key]]
            if any(len(created[r]) <= j for r, j in sides):
                return None
            for key in keys[(rank, i)]:
                if key not in lasts:
                    lasts[key] = rng.randint(1, 50) * 1_000_000
            ends[(rank, i)] = max(created[r][j] for r, j in sides) + max(lasts[key] for key in keys[(rank, i)])
        return ends[(rank, i)]

    progress = True
    while progress:
        progress = False
        for rank in ranks:
            while len(created[rank]) < len(issued[rank]):
                i = len(created[rank])
                before = start[rank] if i == 0 else end(rank, i - 1)
                if before is None:
                    break
                created[rank].append(before + gaps[rank][i])
                progress = True
    assert all(len(created[r]) == len(issued[r]) for r in ranks), "an op waits for one that never finished"
    finished = {r: [end(r, i) if state == "completed" else None for i, (_, state) in enumerate(issued[r])] for r in ranks}
    return created, finished


def moments(job: Job, issued: dict[int, list[tuple[Op, str]]], rng: random.Random) -> dict[int, list[tuple[Op, str]]]:
    """Times a MOMENT_FAULTS job (timeline), gives its ops a timeout longer than any wait of the
    run (plus CLOCKS_NS: no op that finished had timed out), and returns what each rank's dump
    holds, by construction:

    - late_arrival: the late rank (`faulted`) created the last world all_reduce timeout + 2-60 s
      after the last of its peers did; nobody finished it;
    - stale_dump: one innocent rank's history cut at an earlier moment (_stale_cut);
    - midrun: every rank's history cut at its own moment of the healthy run (_midrun_cuts);
    - the rest: every rank as the run ended (the hang, or the end of a healthy job).

    The caller writes the dumps next, with dumps_of(job, returned, rng, gloo=job.gloo,
    torchcomms=job.torchcomms) (accuracy.run_job): stale_dump's and midrun's moments are chosen
    on exactly those dumps (_as_written), so that they show what shown_older asks."""
    created, finished = timeline(job, issued, rng)
    waits = [f - c for r in issued for c, f in zip(created[r], finished[r]) if f is not None]
    fits = [t for t in TIMEOUTS_MS if t * 1_000_000 > max(waits, default=0) + CLOCKS_NS]
    job.timeout_ms = rng.choice(fits[:2])
    job.created, job.finished = created, finished
    if job.fault == "late_arrival":
        peers = max(created[r][-1] for r in issued if r != job.faulted)
        late = rng.randint(2, 60) * SECOND + rng.randrange(SECOND)
        created[job.faulted][-1] = peers + job.timeout_ms * 1_000_000 + late
        job.variant = f"{late / SECOND:.1f} s past the timeout of {job.timeout_ms / 1000:g} s"
    elif job.fault == "stale_dump":
        return _stale_cut(job, issued, rng, fits[0])
    elif job.fault == "midrun":
        return _midrun_cuts(job, issued, rng)
    return issued


def _cut(job: Job, rank: int, ops: list[tuple[Op, str]], at: int) -> list[tuple[Op, str]]:
    """A rank's dump taken on demand at time `at`: the ops it had created by then, finished
    ("completed") or in flight ("started"; gloo: not retired)."""
    created, finished = job.created[rank], job.finished[rank]
    return [(op, "completed" if finished[i] is not None and finished[i] <= at else "started")
            for i, (op, _) in enumerate(ops) if created[i] <= at]


def _finished_long_before(job: Job, issued: dict[int, list[tuple[Op, str]]], witness: int) -> dict[str, int]:
    """group -> how many of its collectives `witness` finished that it created more than their
    timeout before its newest op (what gloo's `retired` and time prove finished)."""
    created, finished = job.created[witness], job.finished[witness]
    if not created:
        return {}
    cut = max(created) - job.timeout_ms * 1_000_000
    counts: dict[str, int] = {}
    proved: dict[str, int] = {}
    for i, (op, _) in enumerate(issued[witness]):
        if op.kind != "coll":
            continue
        counts[op.group.name] = counts.get(op.group.name, 0) + 1
        if finished[i] is not None and created[i] <= cut:
            proved[op.group.name] = counts[op.group.name]
    return proved


TRIES = 24  # draws of a stale or mid-run moment (its dumps' wraps drawn anew with it) before the next variant


def shown_older(job: Job, raw: dict[int, dict], rank: int) -> str:
    """How the dumps `raw` SHOW `rank`'s dump to be older than a peer's, by the format's own facts
    alone (shared/format.md: a collective finished on one member was joined by every member; gloo
    retires finished and failed ops alike; time_created_ns, timeout_ms), or "" where they do not.
    The one definition of the evidence every stale_dump and midrun job carries (_stale_cut,
    _midrun_cuts; test_accuracy_moments asserts it): without it a dump taken earlier reads
    exactly like a rank that stalled there, and no analyzer can tell.

    Rank r's dump is shown older than peer m's where, for a group g of two or more ranks both
    belong to, m's dump holds a collective of g (not p2p, not a coalesced terminator) whose seq
    id is greater than r's last collective of g, and that op is shown finished on m:
    - NCCL's layout: its state is "completed";
    - gloo's layout (states stay "scheduled"): it is retired AND its time_created_ns is at least
      its timeout_ms before the newest time_created_ns in m's dump (a failed op is retired too,
      but m went on creating ops past that op's deadline: it had finished).
    Not evidence: r holding that same op (same seq id) in flight while m shows it completed. It
    was joined by every member, but an op completed on some members and in flight on others is
    also what a collective stuck below PyTorch (a link lost in its last steps) leaves, and
    frtrace reads it so (analysis/moments.py): such dumps fit a real hang as well.
    r's last seq id of g: its last collective of g's; where r holds none of g, 0, but only where
    r's buffer did not wrap (its first entry's record_id is 0) and holds finished ops (completed;
    gloo: retired) of other groups (an empty buffer, a recorder that was off, or a wrapped one
    shows nothing of g).
    Seq ids are collective_seq_id, per group in NCCL's and gloo's layouts. A torchcomms recorder
    (job.torchcomms) counts them per process, so there an op's place in its group is read from a
    buffer that did not wrap (its k-th collective of g is g's k-th) and a wrapped buffer places
    none. Membership is job.groups' (the entries' pg_id). Never frtrace's answer."""
    def entries_of(r: int) -> list[dict]:
        return raw.get(r, {}).get("entries") or []

    def whole(entries: list[dict]) -> bool:  # the buffer did not wrap
        return bool(entries) and entries[0]["record_id"] == 0

    def placed(entries: list[dict], group: Group) -> list[tuple[int, dict]] | None:
        ops = [e for e in entries
               if str(e["pg_id"]) == group.name and not e["is_p2p"] and "coalesced" not in e["profiling_name"]]
        if not job.torchcomms:
            return [(e["collective_seq_id"], e) for e in ops]
        return list(enumerate(ops, 1)) if whole(entries) else None

    def finished(e: dict, newest: int) -> bool:
        return e["state"] == "completed" or (e["profiling_name"].startswith("gloo:") and e["retired"]
                                             and e["time_created_ns"] <= newest - e["timeout_ms"] * 1_000_000)

    mine = entries_of(rank)
    for group in job.groups:
        if rank not in group.ranks or len(group.ranks) < 2:
            continue
        own = placed(mine, group)
        if own:
            held = own[-1][0]
        elif own is not None and whole(mine) and any(
                str(e["pg_id"]) != group.name and (e["state"] == "completed" or e["retired"]) for e in mine):
            held = 0
        else:
            continue
        for peer in group.ranks:
            entries = entries_of(peer) if peer != rank else []
            theirs = placed(entries, group)
            if not theirs:
                continue
            newest = max(e["time_created_ns"] for e in entries)
            for seq, e in theirs:
                if seq > held and finished(e, newest):
                    how = "completed" if e["state"] == "completed" else "retired, created its timeout before its newest op,"
                    return f"rank {peer} {how} {group.desc} #{seq} (rank {rank}'s last of {group.desc}: #{held})"
    return ""


def behind(job: Job, cuts: dict[int, list[tuple[Op, str]]]) -> list[int]:
    """The ranks whose cut (the ops their dump holds, by construction) reads like a rank that
    stalled or an op stuck, unless the dumps show it older (midrun asks shown_older of each):

    - it lacks an op another rank's cut holds: for a group of two or more ranks, fewer of its
      collectives, or fewer of its sends and recvs, than a member issued (in a healthy job every
      member of a group issues as many; wraps apart: an op a buffer no longer holds was issued);
    - its last op is in flight and every other member of its group issued that op too (a
      collective in flight on all its members, or a send and its recv both posted: in a hang,
      an op stuck below PyTorch; in a healthy run it ends within ms, so only a later op that a
      member's dump shows finished tells the two apart: that op finished on some members and
      not on others still reads as stuck)."""
    counts = {r: {} for r in cuts}
    for r, ops in cuts.items():
        for op, _ in ops:
            key = (op.group.name, op.kind == "coll")
            counts[r][key] = counts[r].get(key, 0) + 1
    late = set()
    for group in job.groups:
        members = [r for r in group.ranks if r in cuts]
        for coll in (True, False):
            held = {r: counts[r].get((group.name, coll), 0) for r in members}
            if len(members) > 1:
                late.update(r for r in members if held[r] < max(held.values()))
    for r, ops in cuts.items():
        if ops and ops[-1][1] != "completed" and len(ops[-1][0].group.ranks) > 1:
            key = (ops[-1][0].group.name, ops[-1][0].kind == "coll")
            if all(counts[m].get(key, 0) >= counts[r][key] for m in ops[-1][0].group.ranks if m in cuts):
                late.add(r)
    return sorted(late)


def _as_written(job: Job, cuts: dict[int, list[tuple[Op, str]]], rng: random.Random) -> dict[int, dict]:
    """The dumps of `cuts` as the caller of moments() writes them next (dumps_of with rng as it is
    now, the job's layout): drawn from a copy of rng's state, which is left as it is."""
    copy = random.Random()
    copy.setstate(rng.getstate())
    return dumps_of(job, cuts, copy, gloo=job.gloo, torchcomms=job.torchcomms)


def _stale_cut(job: Job, issued: dict[int, list[tuple[Op, str]]], rng: random.Random, shortest: int
               ) -> dict[int, list[tuple[Op, str]]]:
    """stale_dump: an innocent rank whose file is its dump taken at an earlier moment of its own
    history, long before the others' newest ops (its newest op more than the timeout + CLOCKS_NS
    before every other dump's newest, and a peer's dump holds an op past its end that finished
    more than the timeout before that peer's newest: gloo's evidence) or short (its newest op
    within the timeout of every other dump's newest). Only where the dumps as written show it
    older (shown_older): a rank and moment of the variant drawn are drawn again (TRIES times,
    and with them the buffers' wraps) until they do; where none does, the long variant (far
    enough back), then short, then any earlier moment ("between"); where none does, all that
    again with the `shortest` timeout that fits the run (gloo: a peer's op must be created its
    timeout before that peer's newest); where none does either (a run hardly longer than its
    timeout), none: every rank's dump at the hang, no stale one."""
    living = [r for r in sorted(issued) if r not in job.dead]
    wanted = "long" if rng.random() < 0.5 else "short"
    for job.timeout_ms in dict.fromkeys((job.timeout_ms, shortest)):
        found = {r: _earlier_moments(job, issued, living, r) for r in living if r != job.faulted}
        for kind in dict.fromkeys((wanted, "long", "short", "between")):
            ranks = [r for r in found if found[r][kind]]
            for _ in range(TRIES if ranks else 0):
                stale = rng.choice(ranks)
                at = rng.choice(found[stale][kind])
                cut = dict(issued)
                cut[stale] = _cut(job, stale, issued[stale], at)
                job.stale, job.live = frozenset({stale}), frozenset({stale})
                if shown_older(job, _as_written(job, cut, rng), stale):
                    break
            else:
                continue
            break
        else:
            continue
        break
    else:  # a run hardly longer than its timeout (gloo: nothing finished that long before a newest op)
        job.stale, job.live = frozenset(), frozenset()
        job.variant += ", none: no earlier moment of an innocent rank would show in the dumps: every dump at the hang"
        return dict(issued)
    newest = [job.created[r][-1] for r in living if r != stale and job.created[r]]
    last = job.created[stale][len(cut[stale]) - 1]

    def apart(other: int) -> str:
        return f"{abs(other - last) / SECOND:.1f} s {'before' if other >= last else 'after'}"

    job.variant += (f", {kind}: rank {stale}'s newest op {apart(min(newest))} the earliest of the others' newest ops, "
                    f"{apart(max(newest))} the latest (timeout {job.timeout_ms / 1000:g} s)")
    return cut


def _earlier_moments(job: Job, issued: dict[int, list[tuple[Op, str]]], living: list[int], stale: int) -> dict[str, list[int]]:
    """The moments of `stale`'s history (just after each op was created, just after it finished)
    whose dump differs from its last one, by how long before the other dumps' newest ops they are
    (_stale_cut)."""
    timeout = job.timeout_ms * 1_000_000
    created, finished = job.created[stale], job.finished[stale]
    newest = [job.created[r][-1] for r in living if r != stale and job.created[r]]
    proved = {w: _finished_long_before(job, issued, w) for w in living if w != stale}
    shared = {g.name for g in job.groups if stale in g.ranks}
    kinds: dict[str, list[int]] = {"long": [], "short": [], "between": []}
    for i, c in enumerate(created):
        for at in (c + 1, None if finished[i] is None else finished[i] + 1):
            if at is None:
                continue
            kept = _cut(job, stale, issued[stale], at)
            if kept == issued[stale]:
                continue
            held: dict[str, int] = {}
            for op, _ in kept:
                if op.kind == "coll":
                    held[op.group.name] = held.get(op.group.name, 0) + 1
            shown = any(count > held.get(g, 0) for groups in proved.values() for g, count in groups.items() if g in shared)
            last = created[len(kept) - 1]
            if shown and last + timeout + CLOCKS_NS < min(newest):
                kinds["long"].append(at)
            elif last > max(newest) - timeout + CLOCKS_NS:
                kinds["short"].append(at)
            else:
                kinds["between"].append(at)
    return kinds


def _midrun_cuts(job: Job, issued: dict[int, list[tuple[Op, str]]], rng: random.Random) -> dict[int, list[tuple[Op, str]]]:
    """midrun: each rank dumped on demand at its own moment of the healthy run, spread over the
    whole run or close (all within 0.5-5 s, as on-demand dumps arrive while ranks go on), such
    that every rank that lacks an op another holds, or waits in an op all its members issued
    (behind()), is shown older (shown_older) by the dumps as written: the moments (and the
    buffers' wraps) are drawn again, TRIES times, until they are. Where no draw is, long: most
    ranks dumped just after one world all_reduce of theirs (between two steps), a few far back
    before it (TRIES draws); where none of those is either, aligned: every rank just after the
    same world all_reduce (nobody lacks an op or waits)."""
    ranks = sorted(issued)
    first = min(c[0] for c in job.created.values() if c)
    end = max(f for fs in job.finished.values() for f in fs if f is not None)
    job.live = frozenset(issued)

    def cuts(at: dict[int, int]) -> dict[int, list[tuple[Op, str]]]:
        at = {r: max(t, job.created[r][0] + 1) if job.created[r] else t for r, t in at.items()}  # each holds an op
        return {r: _cut(job, r, issued[r], at[r]) for r in ranks}

    def shown(cut: dict[int, list[tuple[Op, str]]]) -> bool:
        late = behind(job, cut)
        raw = _as_written(job, cut, rng) if late else {}
        return all(shown_older(job, raw, r) for r in late)

    spread = rng.random() < 0.5
    for _ in range(TRIES):
        if spread:
            cut = cuts({r: rng.randrange(first, end) for r in ranks})
            job.variant = "spread"
        else:
            width = rng.randint(SECOND // 2, 5 * SECOND)
            center = rng.randrange(first, max(first + 1, end - width))
            cut = cuts({r: center + rng.randrange(width) for r in ranks})
            job.variant = f"close ({width / SECOND:.1f} s)"
        if shown(cut):
            return cut
    world = job.groups[0]
    after = {r: [job.finished[r][i] + 1 for i, (op, _) in enumerate(issued[r]) if op.group == world] for r in ranks}
    steps = min(map(len, after.values()))  # world all_reduces every rank finished (all of them: a healthy run)
    for _ in range(TRIES if len(ranks) > 1 else 0):
        k = rng.randrange(steps)
        far = set(rng.sample(ranks, rng.randint(1, max(1, len(ranks) // 3))))
        at = {}
        for r in ranks:
            created = job.created[r][[i for i, (op, _) in enumerate(issued[r]) if op.group == world][k]]
            limit = created - (job.timeout_ms * 1_000_000 + CLOCKS_NS if job.gloo else 0)  # gloo: long before the rest
            early = r in far and limit > job.created[r][0] + 1
            at[r] = rng.randrange(job.created[r][0] + 1, limit) if early else after[r][k]
        cut = cuts(at)
        if shown(cut):
            job.variant = f"long: ranks {sorted(far)} far back, the rest after world all_reduce #{k + 1}"
            return cut
    k = rng.randrange(steps)
    job.variant = f"aligned: every rank after world all_reduce #{k + 1}"
    return cuts({r: after[r][k] for r in ranks})


def shown_stale(job: Job, raw: dict[int, dict], rank: int) -> str:
    """What the dumps `raw` show of `rank`'s dump being older than a peer's, by the format's facts
    (shared/format.md: a collective finished on one member was joined by every member): a peer's
    dump holds a collective of a group they share finished (state "completed"; gloo: retired and
    created more than its timeout before that peer's newest op) that `rank`'s dump ends before, or
    holds unfinished as its last op of the group. "" where none does (the whole-step rule apart).
    Per-group seq ids only (not a torchcomms recorder's). For reading a wrong outcome; never a truth."""
    if rank not in raw or rank in job.off:
        return ""

    def collectives(entries, group):
        return [e for e in entries
                if str(e["pg_id"]) == group.name and not e["is_p2p"] and "coalesced" not in e["profiling_name"]]

    def finished(e, newest):
        return e["state"] == "completed" or (e["state"] == "scheduled" and e["retired"]
                                             and e["time_created_ns"] <= newest - e["timeout_ms"] * 1_000_000)

    mine = raw[rank].get("entries", [])
    for group in job.groups:
        if rank not in group.ranks or len(group.ranks) < 2:
            continue
        own = collectives(mine, group)
        held = own[-1]["collective_seq_id"] if own else 0
        open_ = bool(own) and not (own[-1]["state"] == "completed" or own[-1]["retired"])
        for peer in group.ranks:
            entries = raw.get(peer, {}).get("entries", []) if peer != rank else []
            if not entries:
                continue
            newest = max(e["time_created_ns"] for e in entries)
            for e in collectives(entries, group):
                seq = e["collective_seq_id"]
                if (seq > held or (seq == held and open_)) and finished(e, newest):
                    where = f"ends at #{held}" if seq > held else f"holds #{held} unfinished"
                    how = "completed" if e["state"] == "completed" else "retired long before its newest op"
                    return f"rank {peer} {how} {group.desc} #{seq} (rank {rank} {where})"
        if len(group.ranks) == 2:  # a pair's sends and recvs, numbered alike on both (p2p_seq_id): a finished one was met
            own = [e for e in mine if str(e["pg_id"]) == group.name and e["is_p2p"]]
            held = own[-1]["p2p_seq_id"] if own else 0
            open_ = bool(own) and own[-1]["state"] != "completed"
            peer = group.ranks[0] if group.ranks[1] == rank else group.ranks[1]
            for e in raw.get(peer, {}).get("entries", []):
                seq = e["p2p_seq_id"]
                if (str(e["pg_id"]) == group.name and e["is_p2p"] and e["state"] == "completed"
                        and (seq > held or (seq == held and open_))):
                    where = f"ends at p2p #{held}" if seq > held else f"holds p2p #{held} unfinished"
                    return f"rank {peer} completed {e['profiling_name']} p2p #{seq} of {group.desc} (rank {rank} {where})"
    return ""
