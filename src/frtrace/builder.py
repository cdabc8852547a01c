"""The flattened database: findings and matched collectives as flat tables.

Pickled as (types, db) like torchfrtrace's output, with the same table and field names so that
scripts written for it keep working, plus a `findings` table. Rows are NamedTuples defined in
frtrace.types, so loading the pickle needs frtrace importable.
"""

from __future__ import annotations

import pickle
from collections import Counter
from typing import IO

from . import rules
from .types import (
    Analysis,
    Database,
    DbCollective,
    DbFinding,
    DbGroup,
    Dump,
    Group,
    Membership,
    NCCLCall,
    Traceback,
)

DB_TYPES = [Database, NCCLCall, DbCollective, Traceback, Membership, DbGroup, DbFinding]


def group_ids(groups: tuple[Group, ...]) -> dict[tuple, str]:
    """A DB id per group: its name, or name:ranks where split_group reused the name."""
    names = Counter(g.name for g in groups)
    return {g.key: g.name if names[g.name] == 1 else f"{g.name}:{','.join(map(str, g.ranks))}" for g in groups}


def _frames_text(stack) -> str:
    return "\n".join(f"{f.name} at {f.filename}:{f.line}" for f in stack)


def build_database(analysis: Analysis, dumps: dict[int, Dump]) -> Database:
    """Flatten an Analysis (and the dumps' stacks) into the tables of the database."""
    ids = group_ids(analysis.groups)
    groups = [DbGroup(ids[g.key], g.desc, len(g.ranks)) for g in analysis.groups]
    memberships = [Membership(ids[g.key], r) for g in analysis.groups for r in g.ranks]

    tracebacks: list[Traceback] = []
    traceback_id: dict[tuple[int, int], int] = {}
    by_text: dict[str, int] = {}
    for rank, dump in dumps.items():
        for stack_id, stack in enumerate(dump.stacks):
            text = _frames_text(stack)
            if text not in by_text:
                by_text[text] = len(tracebacks)
                tracebacks.append(Traceback(len(tracebacks), text))
            traceback_id[(rank, stack_id)] = by_text[text]

    collectives: list[DbCollective] = []
    calls: list[NCCLCall] = []
    for check in analysis.checks:
        group_id = ids[check.group.key]
        if not check.entries:
            continue
        signatures = Counter(tuple((e.op, e.input_sizes, e.output_sizes) for e in unit) for unit in check.entries.values())
        reference_sig = signatures.most_common(1)[0][0]
        reference_rank = next(r for r, unit in sorted(check.entries.items())
                              if tuple((e.op, e.input_sizes, e.output_sizes) for e in unit) == reference_sig)
        unit = check.entries[reference_rank]
        head = unit[0]
        states = {u[-1].state for u in check.entries.values()}
        mismatched = {r: "+".join(e.op for e in u) for r, u in check.entries.items()
                      if tuple((e.op, e.input_sizes, e.output_sizes) for e in u) != reference_sig}
        dump = dumps[reference_rank]
        stack = dump.stacks[head.stack_id] if 0 <= head.stack_id < len(dump.stacks) else ()
        collective_id = len(collectives)
        collectives.append(DbCollective(
            id=collective_id,
            group_id=group_id,
            pass_check=check.mismatch is None and not check.missing_ranks,
            collective_seq_id=check.collective_seq_id,
            p2p_seq_id=head.p2p_seq_id,
            record_id=head.record_id if head.record_id is not None else -1,
            pg_desc=check.group.desc,
            collective_name=head.op if len(unit) == 1 else unit[-1].op,
            input_sizes=[list(s) for s in head.input_sizes],
            output_sizes=[list(s) for s in head.output_sizes],
            expected_ranks=set(check.group.ranks),
            collective_state=states.pop() if len(states) == 1 else "mixed",
            collective_frames=[{"name": f.name, "filename": f.filename, "line": f.line} for f in stack],
            input_numel=rules.numel(head.input_sizes),
            output_numel=rules.numel(head.output_sizes),
            missing_ranks=set(check.missing_ranks),
            mismatch_collectives=mismatched or None,
            type_of_mismatch=check.mismatch,
        ))
        for rank, rank_unit in sorted(check.entries.items()):
            for entry in rank_unit:
                calls.append(NCCLCall(
                    id=len(calls),
                    collective_id=collective_id,
                    group_id=group_id,
                    global_rank=rank,
                    traceback_id=traceback_id.get((rank, entry.stack_id), -1),
                    collective_type=entry.op,
                    sizes=[list(s) for s in entry.input_sizes],
                ))

    findings = [
        DbFinding(i, f.kind, ids[f.group.key], f.group.desc, f.collective_seq_id, f.p2p_seq_id, f.op,
                  list(f.ranks), list(f.expected_ranks), f.detail, f.root_cause)
        for i, f in enumerate(analysis.findings)
    ]
    return Database(groups, memberships, tracebacks, collectives, calls, findings)


def write_database(db: Database, handle: IO[bytes]) -> None:
    """Pickle (types, db) into an open binary file."""
    types = [(t.__name__, list(t._fields)) for t in DB_TYPES]
    pickle.dump((types, db), handle, protocol=pickle.HIGHEST_PROTOCOL)
