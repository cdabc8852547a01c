"""frtrace's database has torchfrtrace's layout: one script runs over a database built by each."""

from __future__ import annotations

import pickle
import typing
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from conftest import FIXTURES
from frtrace.cli import main

TORCHFRTRACE_DB = Path(__file__).resolve().parent / "data" / "torchfrtrace_db_synthetic_first_rank_culprit.pkl"
SCENARIO = FIXTURES / "synthetic_first_rank_culprit"


# Stand-ins for torchfrtrace's row classes (torch.distributed.flight_recorder.components.types),
# so the torchfrtrace-built database loads on a machine without torch.
class _TypeInfo(NamedTuple):
    name: str
    fields: list


T = typing.TypeVar("T")


class _Ref(typing.Generic[T]):
    pass


class _MatchState(Enum):
    FULLY_MATCHED = 1
    COLLECTIVE_TYPE_MISMATCH = 2
    SIZE_OR_SYNTAX_MISMATCH = 3
    COLLECTIVE_STATE_MISMATCH = 4
    COLLECTIVE_DTYPE_MISMATCH = 5
    UNDECIDED = 6


class _MatchInfo:
    def __str__(self) -> str:
        details = f", {self.culprit}" if getattr(self, "culprit", None) else ""
        return f"Error type: {self._state.name}{details}"

    @property
    def state(self):
        return self._state


def _row(name: str, fields: str) -> type:
    return typing.NamedTuple(name, [(f, object) for f in fields.split()])


_STAND_INS = {
    "TypeInfo": _TypeInfo, "Ref": _Ref, "MatchState": _MatchState, "MatchInfo": _MatchInfo,
    "Database": _row("Database", "groups memberships tracebacks collectives ncclcalls"),
    "Group": _row("Group", "id desc size"),
    "Membership": _row("Membership", "group_id global_rank"),
    "Traceback": _row("Traceback", "id frames"),
    "Collective": _row("Collective", "id group_id pass_check collective_seq_id p2p_seq_id record_id pg_desc "
                                     "collective_name input_sizes output_sizes expected_ranks collective_state "
                                     "collective_frames input_numel output_numel missing_ranks mismatch_collectives "
                                     "type_of_mismatch"),
    "NCCLCall": _row("NCCLCall", "id collective_id group_id global_rank traceback_id collective_type sizes"),
}


class _WithoutTorch(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module.startswith("torch.distributed.flight_recorder"):
            return _STAND_INS[name]
        return super().find_class(module, name)


def script(types, db) -> dict:
    """What a script written for torchfrtrace's database reads from it."""
    fields = {t.name: [field for field, _ in t.fields] for t in types}
    group_of = {g.id: g for g in db.groups}
    failed = [c for c in db.collectives if not c.pass_check]
    return {
        "tables": [t.name for t in types][:6],
        "collective_fields": fields["Collective"][:18],
        "call_fields": fields["NCCLCall"][:7],
        "groups": sorted((g.id, g.desc, g.size) for g in db.groups),
        "members": Counter(group_of[m.group_id].desc for m in db.memberships),
        "failed": [(c.pg_desc, c.collective_seq_id, c.collective_name, sorted(c.expected_ranks),
                    {rank: (m.collective_name, m.input_sizes, m.type_of_mismatch.state.name)
                     for rank, m in (c.mismatch_collectives or {}).items()}) for c in failed],
        "passed": [(c.pg_desc, c.collective_seq_id, c.collective_name, c.input_sizes, c.missing_ranks)
                   for c in db.collectives if c.pass_check],
        "calls_per_type": Counter((c.group_id, c.collective_type) for c in db.ncclcalls),
        "calls_per_rank": Counter(c.global_rank for c in db.ncclcalls),
    }


def test_one_script_reads_the_same_answers_from_both_databases(tmp_path):
    with open(TORCHFRTRACE_DB, "rb") as handle:
        theirs = script(*_WithoutTorch(handle).load())
    ours_path = tmp_path / "db.pkl"
    main(["-d", str(SCENARIO), "-o", str(ours_path)])
    with open(ours_path, "rb") as handle:
        ours = script(*pickle.load(handle))

    assert ours["tables"] == theirs["tables"] == ["Database", "NCCLCall", "Collective", "Traceback", "Membership", "Group"]
    assert ours["collective_fields"] == theirs["collective_fields"] and ours["call_fields"] == theirs["call_fields"]
    assert ours["groups"] == theirs["groups"] and ours["members"] == theirs["members"]
    assert ours["failed"] == theirs["failed"]
    assert theirs["failed"] == [("0:default_pg", 5, "nccl:all_reduce", list(range(8)),
                                 {0: ("nccl:all_reduce", [[2048]], "SIZE_OR_SYNTAX_MISMATCH")})]
    assert ours["passed"] == theirs["passed"]
    assert ours["calls_per_type"] == theirs["calls_per_type"] and ours["calls_per_rank"] == theirs["calls_per_rank"]


def test_a_mismatch_reads_as_torchfrtrace_writes_it(tmp_path):
    main(["-d", str(SCENARIO), "-o", str(tmp_path / "db.pkl")])
    with open(tmp_path / "db.pkl", "rb") as handle:
        types, db = pickle.load(handle)
    (failed,) = [c for c in db.collectives if not c.pass_check]
    mismatch = failed.mismatch_collectives[0]
    assert type(mismatch).__name__ == "Collective" and str(mismatch.type_of_mismatch).startswith(
        "Error type: SIZE_OR_SYNTAX_MISMATCH, rank 0 issued nccl:all_reduce [[2048]]")
    assert all(c.collective_id is None or isinstance(c.collective_id, int) for c in db.ncclcalls)
