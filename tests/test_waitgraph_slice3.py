"""Survivors of the wait graph's slice 3 of 5 (session 40): what stuck_findings says of several
ranks at once. SYNTHETIC NCCL dumps (gloo records no op states), built from format.md."""

from __future__ import annotations

from conftest import entry, ops
from test_matcher import nccl, run

WORLD4 = {"0": ("default_pg", range(4))}
RECORDER_OFF = {"version": "2.10"}  # what a rank writes with TORCH_FR_BUFFER_SIZE=0 (format.md)


def _then(state: str) -> dict:
    """One all_reduce of the world completed, then the second left in `state`."""
    return nccl(ops(1, backend="nccl", state="completed") + [entry(seq=2, backend="nccl", state=state)], WORLD4)


def test_ranks_whose_gpus_never_reached_the_op_are_said_in_their_number():
    result = run({rank: _then(state) for rank, state in enumerate(["started", "started", "scheduled", "scheduled"])})
    assert result.verdict == "stuck" and result.culprit_ranks == (2, 3)
    assert [f.detail.split(" [decided by ")[0] for f in result.findings] == [
        "issued by all 4 members; ranks 2-3 never started it (scheduled) where ranks 0-1 did: their GPU never reached it"]


def test_members_whose_recorders_were_off_are_said_in_their_number():
    result = run({0: _then("started"), 1: _then("started"), 2: dict(RECORDER_OFF), 3: dict(RECORDER_OFF)})
    assert [f.detail for f in result.findings] == [
        "issued by 2 of 4 members (ranks 2-3's dumps do not show it), not completed on ranks 0-1 (state started)"]
    one = run({0: _then("started"), 1: _then("started"), 2: _then("started"), 3: dict(RECORDER_OFF)})
    assert [f.detail for f in one.findings] == [
        "issued by 3 of 4 members (rank 3's dump does not show it), not completed on ranks 0-2 (state started)"]
