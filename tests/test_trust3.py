"""Trust, round 3 (issue 26): stray files, archives, odd environments and sizes that named an
innocent rank, crashed frtrace or left files behind. One test (or a few) per case."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import make_dump, entry, ops, write_dumps
from frtrace.cli import main


def _cpu(work, repeat: int = 3) -> float:
    """The least CPU time of a few runs of `work`: a ratio of two of these says how cost grows."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


# ---------------------------------------------------------------------------- size
def _many_groups_dump(count: int) -> dict:
    return make_dump([entry(pg=str(1000 + g), desc=f"g{g}") for g in range(count)] + ops(3))


def test_reading_a_dump_of_many_one_op_groups_grows_linearly():
    from frtrace.loader import compact

    small, large = _many_groups_dump(2_000), _many_groups_dump(16_000)
    ratio = _cpu(lambda: compact(large, 0, "x", "pickle")) / _cpu(lambda: compact(small, 0, "x", "pickle"))
    assert ratio < 24, f"8 times the groups cost {ratio:.1f} times the CPU (linear: about 8)"  # quadratic: 64


def test_a_world_of_many_ranks_costs_linear_time_with_every_output(tmp_path):
    def job(world: int) -> Path:
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
        return write_dumps(tmp_path / f"w{world}", {r: make_dump(ops(10 if r != 2 else 6), pg_config=config) for r in range(4)})

    def run(folder: Path):
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        assert main(["-d", str(folder), "--jobs", "1", "-o", str(out / "db.pkl"), "--html", str(out / "r.html"),
                     "--json", str(out / "r.json"), "--chrome-trace", str(out / "t.json"), "--stats"]) == 1

    small, large = job(20_000), job(160_000)
    ratio = _cpu(lambda: run(large), repeat=2) / _cpu(lambda: run(small), repeat=2)
    assert ratio < 24, f"8 times the world cost {ratio:.1f} times the CPU (linear: about 8)"


def test_the_one_pass_runs_of_many_groups_equal_the_masked_runs(monkeypatch):
    from frtrace import runs
    from frtrace.loader import compact

    raw = make_dump([entry(pg=str(1000 + g % 40), desc=f"g{g % 40}", seq=1 + g // 40, state=("scheduled", "completed")[g % 2])
                     for g in range(400)] + [entry(pg="7", op="send 0->1", is_p2p=True, p2p_seq=1)] + ops(300))
    columns = compact(raw, 0, "x", "pickle").entries
    one_pass = runs.make_runs(columns)
    monkeypatch.setattr(runs, "_MASKED_NAMES", 1 << 30)
    masked = runs.make_runs(columns)
    assert list(one_pass) == list(masked) and len(one_pass) == 42
    for name, run in masked.items():
        got = one_pass[name]
        assert (list(got.positions), got.first_seq, bytes(got.kinds), bytes(got.states)) == (
            list(run.positions), run.first_seq, bytes(run.kinds), bytes(run.states)), name
