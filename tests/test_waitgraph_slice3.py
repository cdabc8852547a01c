"""Survivors of the wait graph's slice 3 of 5 (session 40): what stuck_findings says of several
ranks at once. SYNTHETIC NCCL dumps (gloo records no op states), built from format.md."""

from __future__ import annotations

import pytest

from conftest import entry, ops
from test_matcher import nccl, p2p, run

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


W3 = {"0": ("default_pg", (0, 1, 2))}


def _chain_steps(steps: int, also_skipped: int):
    """Each step rank 0 sends to rank 1, rank 1 sends on to rank 2, then all three all_reduce
    (NCCL). After `steps` steps rank 1 leaves out its recv and its send (as it did at step
    `also_skipped` too) and waits in the all_reduce, while rank 0 waits in its send and rank 2 in
    its recv: a deadlock of three ranks, two of which keep their step."""
    dumps = {}
    for rank in range(3):
        mine = []
        for step in range(1, steps + 2):
            last = step == steps + 1
            state = "scheduled" if last else "completed"
            if rank == 0:
                mine.append(p2p("send", 0, 1, step, state=state))
            elif rank == 2:
                mine.append(p2p("recv", 2, 1, step, state=state))
            elif not (last or step == also_skipped):
                mine += [p2p("recv", 1, 0, 2 * step - 1, state=state), p2p("send", 1, 2, 2 * step, state=state)]
            if rank == 1 or not last:
                mine.append(entry(seq=step, backend="nccl", state=state))
        dumps[rank] = nccl(mine, W3)
    return run(dumps)


@pytest.mark.parametrize("also_skipped", [6, 2], ids=["skipped-last-step", "skipped-early"])
def test_the_ranks_of_a_deadlock_that_keep_their_step_are_said_in_their_number(also_skipped):
    """Rank 1's own history is irregular (it left out its p2p ops twice): the two other ranks of
    the deadlock follow their step up to the op they are blocked in, so rank 1 left its program."""
    result = _chain_steps(6, also_skipped)
    assert result.verdict == "desync" and result.culprit_ranks == (1,), result.headline
    assert result.evidence == ("own history: ranks 0,2 follow the step their buffer repeats up to the op they are blocked "
                               "in; of the deadlock's ranks only rank 1 does not show it, so it left its program",)
