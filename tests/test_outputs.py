"""The timeline, SQLite and statistics outputs: their content, not only that a file appears."""

from __future__ import annotations

import io
import json
import pickle
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, entry, examples, make_dump, ops, write_dumps
from frtrace.cli import main
from frtrace.reading.discover import find_dump_files
from frtrace.reading.groups import resolve_groups
from frtrace.loader import load_dumps, normalize
from frtrace.matcher import analyze
from frtrace.outputs.stats import compute_stats, render_stats

README = Path(__file__).resolve().parent.parent / "README.md"


def analysed(scenario: str):
    loaded = load_dumps(find_dump_files(str(FIXTURES / scenario)))
    table = resolve_groups(loaded.dumps, loaded.ranks_named)
    return loaded.dumps, table, analyze(loaded.dumps, table)


# ---------------------------------------------------------------------------- Chrome trace
def trace_of(scenario: str, tmp_path) -> list[dict]:
    path = tmp_path / "trace.json"
    main(["-d", str(FIXTURES / scenario), "--chrome-trace", str(path)])
    return json.loads(path.read_text())["traceEvents"]


def test_trace_has_a_process_per_rank_and_a_thread_per_group(tmp_path):
    events = trace_of("skip_goes_on", tmp_path)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1  << CULPRIT", 2: "rank 2", 3: "rank 3"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert min(order, key=order.get) == 1  # the culprit first
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[(0, 0)] == "default_pg (pg 0)"
    assert sum(1 for name in threads.values() if name.startswith("tp")) == 4  # every rank in its tp group


def test_trace_holds_every_entry_where_it_belongs(tmp_path):
    dumps, table, _ = analysed("skip_goes_on")
    events = [e for e in trace_of("skip_goes_on", tmp_path) if e["ph"] == "X" and e["cat"] != "never_issued"]
    thread_of = {g.key: i for i, g in enumerate(table.groups)}
    expected = Counter((r, thread_of[table.group_of(r, e.pg_name).key]) for r, d in dumps.items() for e in d.entries)
    assert Counter((e["pid"], e["tid"]) for e in events) == expected
    assert min(e["ts"] for e in events) == 0
    assert all(e["args"]["collective_seq_id"] >= 1 and "input_sizes" in e["args"] for e in events)


def test_trace_marks_stuck_ops_and_the_culprit(tmp_path):
    events = trace_of("skip_rank2", tmp_path)
    last = {}
    for e in events:
        if e["ph"] == "X" and e["cat"] != "never_issued":
            last[e["pid"]] = e
    # gloo records no completion: every rank's last op runs to the end of the trace
    assert {r: e["cat"] for r, e in last.items()} == {r: "not_completed" for r in range(4)}
    end = max(e["ts"] + e["dur"] for e in events if e["ph"] == "X")
    assert all(abs(e["ts"] + e["dur"] - end) < 0.01 for e in last.values())
    earlier = [e for e in events if e["ph"] == "X" and e not in last.values() and e["cat"] != "never_issued"]
    assert {e["cat"] for e in earlier} == {"no_completion_data"}
    markers = [e for e in events if e["ph"] == "i"]
    assert any(e["cat"] == "culprit" and e["pid"] == 2 for e in markers)
    assert any(e["cat"] == "finding" and e["name"].startswith("ROOT CAUSE: missing_ranks") for e in markers)


def test_trace_shows_the_hang_first(tmp_path):
    events = trace_of("skip_goes_on", tmp_path)
    spans = [e for e in events if e["ph"] == "X"]
    stuck = [e for e in spans if e["cat"] == "not_completed"]
    others = [e for e in spans if e["cat"] in ("completed", "no_completion_data")]
    recorded = max(e["ts"] + e["dur"] for e in others) - min(e["ts"] for e in spans)
    # stuck ops run past everything recorded, by at least as long again: they fill the view
    assert stuck and all(e["dur"] > recorded for e in stuck)
    assert {e["cname"] for e in stuck}.isdisjoint(e["cname"] for e in others)
    reserved = {"good", "bad", "terrible", "black", "grey", "white", "yellow", "olive", "generic_work"}
    assert {e["cname"] for e in spans} <= reserved  # the trace viewer rejects other colour names
    # the collective rank 1 never joined, on its row, in default_pg's thread, from when the others began it
    (never,) = [e for e in spans if e["cat"] == "never_issued"]
    root_starts = [e["ts"] for e in spans if e["pid"] != 1 and e["args"].get("collective_seq_id") == 7 and e["tid"] == 0]
    assert never["pid"] == 1 and never["tid"] == 0 and never["ts"] == min(root_starts) and "all_reduce #7" in never["name"]
    flows = [e for e in events if e.get("cat") == "root_collective"]
    assert [e["ph"] for e in flows] == ["s", "t", "f"] and {e["pid"] for e in flows} == {0, 2, 3}


def test_a_root_collective_one_rank_issued_has_an_arrow_from_its_op_to_the_never_issued_span(tmp_path):
    """Real gloo dumps: rank 3 alone issued all_reduce #4 of tp, which rank 2 never joined."""
    events = trace_of("stacks_data_stall_rank2", tmp_path)
    (never,) = [e for e in events if e.get("cat") == "never_issued"]
    start, end = [e for e in events if e.get("cat") == "root_collective"]
    issued = [e for e in events if e["ph"] == "X" and e["pid"] == 3 and e["tid"] == never["tid"]
              and e["args"].get("collective_seq_id") == 4]
    assert (start["ph"], start["pid"], end["ph"], end["pid"], end["bp"]) == ("s", 3, "f", 2, "e") and start["id"] == end["id"]
    assert len(issued) == 1 and start["ts"] == issued[0]["ts"] and start["tid"] == end["tid"] == never["tid"]
    assert never["pid"] == 2 and end["ts"] == never["ts"]  # bound to the span that encloses it: NEVER ISSUED


def test_trace_ranks_and_trace_last_cut_a_big_job(tmp_path):
    path = tmp_path / "t.json"
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--chrome-trace", str(path), "--trace-ranks", "0", "--trace-last", "2"]) == 1
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["cat"] != "never_issued"]
    # the culprit (1) and, the root group being the world, its smallest groups' members (tp {0,1}, dp {1,3})
    assert Counter(e["pid"] for e in spans) == {0: 2, 1: 2, 3: 2}
    from frtrace.outputs.timeline import chosen_ranks
    dumps, table, analysis = analysed("synthetic_torchcomms_skip_rank5")
    assert chosen_ranks(analysis, dumps, table, 0) == [4, 5]  # rank 5's tp pair (its dp group has 4)
    assert chosen_ranks(analysis, dumps, table, 2) == [0, 1, 4, 5]  # and the 2 lowest others
    dumps, table, analysis = analysed("tp_skip_rank3")
    root = next(f for f in analysis.findings if f.root_cause)
    assert len(root.group.ranks) < len(table.world) and set(chosen_ranks(analysis, dumps, table, 0)) == set(root.group.ranks)


def test_a_big_jobs_trace_holds_the_chosen_ranks_unless_all_are_asked_for(tmp_path, capsys):
    from frtrace.outputs.timeline import DEFAULT_TRACE_RANKS, TRACE_EVERY_RANK_UP_TO
    world = TRACE_EVERY_RANK_UP_TO + 1
    culprit = world - 3  # never issues #3: the lowest ranks are not it
    dumps = {r: make_dump([*ops(2, state="completed"), *([] if r == culprit else [entry(seq=3)])],
                          pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}})
             for r in range(world)}
    folder = write_dumps(tmp_path / "dumps", dumps)

    def ranks_in(*extra) -> set[int]:
        assert main(["-d", str(folder), "--chrome-trace", str(tmp_path / "t.json"), *extra]) == 1
        return {e["pid"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"}

    capsys.readouterr()
    assert ranks_in() == {culprit, *range(DEFAULT_TRACE_RANKS)}
    said = capsys.readouterr().err
    assert f"holds {DEFAULT_TRACE_RANKS + 1} of {world} ranks" in said and "--trace-ranks all" in said
    assert ranks_in("--trace-ranks", "all") == set(range(world)) and "--chrome-trace holds" not in capsys.readouterr().err
    assert ranks_in("--trace-ranks", "1") == {culprit, 0} and "--chrome-trace holds" not in capsys.readouterr().err
    smaller = write_dumps(tmp_path / "small", {r: dumps[r] for r in range(TRACE_EVERY_RANK_UP_TO)})
    assert main(["-d", str(smaller), "--chrome-trace", str(tmp_path / "s.json")]) in (0, 1)
    assert {e["pid"] for e in json.loads((tmp_path / "s.json").read_text())["traceEvents"]} == set(range(TRACE_EVERY_RANK_UP_TO))


def test_a_trace_path_ending_in_gz_is_gzipped(tmp_path):
    import gzip
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--chrome-trace", str(tmp_path / "t.json.gz")]) == 1
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--chrome-trace", str(tmp_path / "t.json")]) == 1
    assert json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes())) == json.loads((tmp_path / "t.json").read_text())


def test_trace_with_completion_times_uses_them(tmp_path):
    events = [e for e in trace_of("synthetic_stuck", tmp_path) if e["ph"] == "X"]
    by_seq = Counter((e["args"]["collective_seq_id"], e["cat"]) for e in events)
    assert by_seq[(5, "not_completed")] == 8 and by_seq[(4, "completed")] == 8
    done = next(e for e in events if e["cat"] == "completed")
    assert done["dur"] == pytest.approx(490.0)  # started +10 us, completed +500 us in the generator


def test_trace_of_nccl_dumps_where_nothing_completed_yet_shows_every_op_stuck(tmp_path):
    # NCCL records completion even when no op has completed yet: nothing here ended
    dumps = {r: make_dump([entry(seq=s, backend="nccl", state="scheduled") for s in (1, 2)]) for r in range(2)}
    from conftest import write_dumps

    write_dumps(tmp_path / "d", dumps)
    path = tmp_path / "trace.json"
    main(["-d", str(tmp_path / "d"), "--chrome-trace", str(path)])
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 4 and {e["cat"] for e in spans} == {"not_completed"}


# ---------------------------------------------------------------------------- SQLite
def readme_queries() -> dict[str, str]:
    text = README.read_text()
    return {name: sql.strip() for name, sql in re.findall(r"<!-- sql:(\w+) -->\s*```sql\n(.*?)```", text, re.S)}


def test_readme_has_the_three_queries():
    assert set(readme_queries()) == {"rank_ops", "late_arrivals", "never_completed"}


@pytest.fixture
def sqlite_db(tmp_path):
    def make(scenario: str) -> sqlite3.Connection:
        path = tmp_path / f"{Path(scenario).name}.db"  # a fixture's name, or a folder's path
        main(["-d", str(FIXTURES / scenario), "--sqlite", str(path)])
        return sqlite3.connect(path)
    return make


def test_readme_query_all_ops_of_one_rank_in_a_group(sqlite_db):
    rows = sqlite_db("skip_goes_on").execute(readme_queries()["rank_ops"]).fetchall()
    dumps, _, _ = analysed("skip_goes_on")
    expected = [(e.collective_seq_id, e.op) for e in dumps[1].entries if e.pg_desc == "default_pg"]
    assert [(r[0], r[1]) for r in rows] == expected


def test_readme_query_late_arrivals_finds_the_slow_rank(sqlite_db):
    rows = sqlite_db("slow_rank2").execute(readme_queries()["late_arrivals"]).fetchall()
    assert rows and Counter(r[2] for r in rows).most_common(1)[0][0] == 2
    assert all(r[3] >= 0 for r in rows)


def test_readme_query_never_completed(sqlite_db):
    rows = sqlite_db("synthetic_stuck").execute(readme_queries()["never_completed"]).fetchall()
    assert sorted(r[0] for r in rows) == list(range(8)) and {r[2] for r in rows} == {5}


def test_sqlite_tables_match_the_pickle_database(sqlite_db, tmp_path):
    connection = sqlite_db("synthetic_p2p_unmatched")
    counts = {t: connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("groups", "memberships", "collectives", "ncclcalls", "tracebacks", "findings", "entries")}
    dumps, _, _ = analysed("synthetic_p2p_unmatched")
    assert counts["entries"] == counts["ncclcalls"] == sum(len(d.entries) for d in dumps.values())
    assert counts["groups"] == 5 and counts["findings"] >= 1
    indexes = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"entries_by_rank", "entries_by_collective", "calls_by_collective"} <= indexes


# ---------------------------------------------------------------------------- statistics
def test_stats_match_hand_computed_numbers():
    def rank(r, durations):
        return make_dump([entry(seq=i + 1, backend="nccl", state="completed", sizes=((256,),), duration_ms=d,
                                time_created_ns=1_000_000_000 * (i + 1) + r * 1_000_000 * (i + 1))
                          for i, d in enumerate(durations)])
    raw = {0: rank(0, [1.0, 3.0]), 1: rank(1, [2.0, 6.0])}
    dumps = {r: normalize(d, r, f"r{r}", "pickle") for r, d in raw.items()}
    stats = compute_stats(analyze(dumps, resolve_groups(dumps)), dumps)
    (op,) = stats.ops
    assert (op.op, op.count) == ("all_reduce", 2)
    assert op.bytes_moved == 2 * 2 * 256 * 4  # 2 collectives x 2 ranks x 256 floats
    assert op.durations_ms == (1.0, 2.0, 3.0, 6.0)
    (straggler,) = stats.stragglers  # rank 1 arrives 1 ms late at #1 and 2 ms late at #2
    assert (straggler.rank, straggler.times_last, straggler.collectives) == (1, 2, 2)
    assert straggler.median_late_ms == pytest.approx(0.75)  # behind the median of two: half of 1 and 2 ms, median
    assert stats.spreads_ms == (1.0, 2.0)
    assert [(s.collective_seq_id, s.last_rank) for s in stats.spreads] == [(1, 1), (2, 1)]


def test_stats_name_the_slow_rank_of_a_real_run(capsys):
    assert main(["-d", str(FIXTURES / "slow_rank2"), "--stats"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Stragglers"):]
    first_row = table.splitlines()[3].split()
    assert first_row[0] == "2" and first_row[1] == "8/9"  # 8 all_reduces after a sleep; the barrier is on time
    assert float(first_row[2]) > 20  # it sleeps 30 ms
    widest = out[out.index("Widest arrival spreads"):].splitlines()[3:11]
    assert len(widest) == 8 and all(row.split()[-1] == "2" and float(row.split()[-2]) > 20 for row in widest)


def test_a_tie_for_last_arrival_names_the_lowest_of_the_tied_ranks():
    # ranks 1 and 3 arrive together, 5 ms after ranks 0 and 2, at each of two collectives
    late = {0: 0, 1: 5_000_000, 2: 0, 3: 5_000_000}
    raw = {r: make_dump([entry(seq=i, backend="nccl", state="completed", time_created_ns=i * 100_000_000 + late[r])
                         for i in (1, 2)]) for r in range(4)}
    dumps = {r: normalize(d, r, f"r{r}", "pickle") for r, d in raw.items()}
    stats = compute_stats(analyze(dumps, resolve_groups(dumps)), dumps)
    assert [(s.collective_seq_id, s.last_rank, s.spread_ms) for s in stats.spreads] == [(1, 1, 5.0), (2, 1, 5.0)]
    assert [(s.rank, s.times_last, s.collectives) for s in stats.stragglers] == [(1, 2, 2)]


def test_impossible_arrivals_are_flagged_as_clock_skew():
    # rank 1's clock is 50 ms ahead: it 'arrives' after rank 0 had completed the collective
    def rank(r):
        skew = 50_000_000 if r == 1 else 0
        return make_dump([entry(seq=i, backend="nccl", state="completed", time_created_ns=i * 10_000_000 + skew,
                                time_discovered_completed_ns=i * 10_000_000 + 1_000_000 + skew) for i in (1, 2, 3)])
    dumps = {r: normalize(rank(r), r, f"r{r}", "pickle") for r in range(2)}
    stats = compute_stats(analyze(dumps, resolve_groups(dumps)), dumps)
    assert stats.stragglers[0].rank == 1 and stats.stragglers[0].impossible == 3
    out = io.StringIO()
    render_stats(stats, out)
    assert "clock skew" in out.getvalue() and "ranks 1 'arrive'" in out.getvalue()


@pytest.mark.parametrize("scenario", ["synthetic_p2p_unmatched", "synthetic_coalesced_mismatch", "wrapped_skip",
                                      "skip_goes_on_rank5_of_8"])
def test_sqlite_ncclcalls_are_the_pickle_databases_calls(sqlite_db, tmp_path, scenario):
    connection = sqlite_db(scenario)
    assert main(["-d", str(FIXTURES / scenario), "-o", str(tmp_path / "db.pkl")]) in (0, 1)
    with open(tmp_path / "db.pkl", "rb") as handle:
        _, db = pickle.load(handle)
    expected = [(c.id, c.collective_id, c.group_id, c.global_rank, None if c.traceback_id == -1 else c.traceback_id,
                 c.collective_type, json.dumps(c.sizes)) for c in db.ncclcalls]
    rows = connection.execute("SELECT id, collective_id, group_id, global_rank, traceback_id, collective_type, sizes "
                              "FROM ncclcalls ORDER BY id").fetchall()
    assert rows == expected and any(c[1] is not None for c in rows) and any(c[4] is not None for c in rows)
    by_collective = connection.execute("SELECT COUNT(*) FROM ncclcalls WHERE collective_id = ?", (rows[-1][1],)).fetchone()[0]
    assert by_collective == sum(1 for c in db.ncclcalls if c.collective_id == rows[-1][1])


def test_sqlite_entries_carry_their_own_stack(sqlite_db):
    connection = sqlite_db("skip_goes_on")
    dumps, _, _ = analysed("skip_goes_on")
    rows = connection.execute("SELECT e.rank, e.idx, t.frames FROM entries e JOIN tracebacks t ON t.id = e.traceback_id").fetchall()
    assert len(rows) == sum(len(d.entries) for d in dumps.values())
    for rank, idx, frames in rows[::7]:
        entry = dumps[rank].entries[idx]
        first = dumps[rank].stacks[entry.stack_id][0]
        assert frames.splitlines()[0] == f"{first.name} at {first.filename}:{first.line}"


@pytest.mark.parametrize("scenario", ["synthetic_p2p_cycle_rank1", "synthetic_coalesced_mismatch", "wrapped_skip",
                                      "synthetic_stuck"])
def test_sqlite_entries_are_the_entries_read_one_by_one(sqlite_db, scenario):
    """The entries view is zipped from columns; read entry by entry it must say the same."""
    connection = sqlite_db(scenario)
    dumps, table, _ = analysed(scenario)
    from frtrace.builder import group_ids
    ids = group_ids(table.groups)
    frames = {t: i for i, t in connection.execute("SELECT id, frames FROM tracebacks")}
    from frtrace.builder import frames_text

    def expected(e):
        group = table.group_of(e.rank, e.pg_name)
        stack = dumps[e.rank].stacks[e.stack_id] if e.stack_id >= 0 else None
        return (e.rank, e.index, e.record_id, ids[group.key] if group else e.pg_name, e.pg_name, e.pg_desc,
                None if e.is_p2p else e.collective_seq_id, e.p2p_seq_id if e.is_p2p else None, e.op, e.backend,
                json.dumps([list(s) for s in e.input_sizes]), json.dumps([list(s) for s in e.output_sizes]),
                json.dumps(list(e.input_dtypes)), json.dumps(list(e.output_dtypes)), e.state, int(e.is_p2p),
                e.time_created_ns, e.time_started_ns, e.time_completed_ns, e.duration_ms,
                frames[frames_text(stack)] if stack is not None else None)
    rows = connection.execute("SELECT * FROM entries ORDER BY rank, idx").fetchall()
    assert rows == [expected(e) for d in dumps.values() for e in d.entries]


def test_sqlite_of_a_longer_job_holds_every_entry_and_call(tmp_path, sqlite_db):
    """Rows go in 64 to a statement: 150 entries a rank are two full statements and 22 rows."""
    from conftest import generated_job

    job = generated_job(tmp_path / "job", ranks=8, entries=150)
    test_sqlite_entries_are_the_entries_read_one_by_one(sqlite_db, str(job))
    test_sqlite_ncclcalls_are_the_pickle_databases_calls(sqlite_db, tmp_path, str(job))


@given(rows=st.lists(st.tuples(st.text(st.characters(min_codepoint=32, max_codepoint=0x2fff), max_size=12),
                               st.text(st.characters(min_codepoint=32, max_codepoint=0x2fff), max_size=20)),
                     min_size=1, max_size=6))
@example(rows=[("3", "1e5"), ("nan", "-0"), (" a ", "  "), ("groups", "41")])  # numbers and blanks, as text
@settings(max_examples=examples(200), deadline=None)
def test_the_summary_prints_as_tabulate_prints_text(rows):
    # the summary's rows (text: a first row with a count and its ranks in brackets) are printed
    # without tabulate, as its "plain" format prints them
    from tabulate import tabulate

    from frtrace.outputs.report import plain_table

    rows = [["ranks loaded", "4 (0-3)"], *map(list, rows)]
    assert plain_table(rows) == tabulate(rows, tablefmt="plain")  # as the summary was printed


@pytest.mark.parametrize("op, flagged", [("broadcast", 0), ("reduce", 0), ("gather", 0), ("all_reduce", 3)])
def test_a_late_member_of_a_rooted_op_is_no_clock_skew(op, flagged):
    # rank 1 arrives 50 ms after rank 0 left: a broadcast's root leaves once it has sent, so only
    # ops that wait for every member make that impossible (one host: no skew at all)
    def rank(r):
        late = 50_000_000 if r == 1 else 0
        return make_dump([entry(seq=i, op=op, backend="nccl", state="completed", time_created_ns=i * 100_000_000 + late,
                                time_discovered_completed_ns=i * 100_000_000 + 1_000_000 + late) for i in (1, 2, 3)])
    dumps = {r: normalize(rank(r), r, f"r{r}", "pickle") for r in range(2)}
    stats = compute_stats(analyze(dumps, resolve_groups(dumps)), dumps)
    assert stats.stragglers[0].rank == 1 and stats.stragglers[0].impossible == flagged
    out = io.StringIO()
    render_stats(stats, out)
    assert ("clock skew" in out.getvalue()) == bool(flagged)


def test_several_causes_are_a_line_each_in_the_text_report_and_the_page(tmp_path, capsys):
    from frtrace.cli import main

    folder = FIXTURES / "two_faults_hidden_ranks2_7"
    main(["-d", str(folder), "--html", str(tmp_path / "r.html")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("Cause: unknown: rank 2: ") and lines[2].startswith("       divergence: rank 7: "), lines[:3]
    page = (tmp_path / "r.html").read_text()
    cause = page.split("id='cause'>", 1)[1].split("</p>", 1)[0]
    assert "<br>divergence: rank 7: " in cause, cause
