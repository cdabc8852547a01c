"""The one-file HTML report (--html): what it holds, and how a real browser shows it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import entry, make_dump, write_dumps
from frtrace.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def report(tmp_path: Path, dumps_dir: Path, name: str = "r.html") -> str:
    path = tmp_path / name
    main(["-d", str(dumps_dir), "--html", str(path)])
    return path.read_text()


def test_the_page_is_one_file_that_fetches_nothing(tmp_path):
    page = report(tmp_path, FIXTURES / "skip_goes_on")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"""(src|href)\s*=|@import|url\(\s*['"]?(https?:|//)""", page)  # nothing loaded from anywhere


def test_the_page_says_the_verdict_and_marks_the_culprit(tmp_path):
    page = report(tmp_path, FIXTURES / "skip_goes_on")
    assert "DESYNC: rank 1 never joined all_reduce #7 of default_pg (3 ranks wait in it)" in page
    assert "program order: ranks outside the cycle issued all_reduce #7 of default_pg" in page  # the evidence
    (row,) = re.findall(r"<tr class='culprit'[^>]*><th class='row'>([^<]*)", page)
    assert row == "rank 1 &laquo; culprit"
    assert page.count("class='col root'") == 1 and page.split("class='col root'")[1].startswith(" title='1 group(s)'>default_pg<")
    # rank 1's cell in default_pg: never issued (#7), the others': their own last op, no completion data
    assert "title='rank 1 in default_pg (pg 0): never issued #7'" in page
    # gloo records no completion, but the others wait in #7 (the wait-for graph says so): in flight
    assert "title='rank 0 in default_pg (pg 0): in flight #7'" in page


def test_the_wait_for_graph_is_drawn(tmp_path):
    page = report(tmp_path, FIXTURES / "skip_goes_on")
    graph = page.split("<div id='graph'>")[1].split("</div>")[0]
    assert graph.startswith("<svg") and "rank 1 (culprit)" in graph and "all_reduce #7 of default_pg" in graph
    assert "ranks 0,2-3 (3)" in graph  # who waits in it
    assert "stroke-dasharray" in graph  # rank 1 itself waits (in tp #3): the cycle is drawn


def test_the_stacks_mark_the_first_frame_that_differs(tmp_path):
    page = report(tmp_path, FIXTURES / "skip_goes_on")
    table = page.split("<table class='stacks' id='stacks'>")[1].split("</table>")[0]
    (marked,) = re.findall(r"<tr class=diff><td>&rarr; ([^<]*)</td><td>([^<]*)</td>", table)
    assert marked[0].startswith("prog_skip_goes_on at ") and marked[1].startswith("prog_skip_goes_on at ")
    assert marked[0] != marked[1]  # same function, another line: where rank 1 took the other path
    rows = re.findall(r"<tr(?: class=diff)?><td>(?:&rarr; )?([^<]*)</td><td>([^<]*)</td>", table)
    assert all(a == b for a, b in rows[:rows.index(marked)])  # everything outside it is the same


def _job(ranks: int, culprit: int, frame_name: str = "train_step") -> dict:
    """`ranks` ranks in one NCCL world group with timings: 3 all_reduces, then a 4th that
    `culprit` never issues (the others wait in it)."""
    dumps = {}
    for rank in range(ranks):
        entries = [entry(seq=s, backend="nccl", state="completed", time_created_ns=10**9 + s * 10**6 + rank * 1000,
                         time_discovered_started_ns=10**9 + s * 10**6 + rank * 1000 + 10,
                         time_discovered_completed_ns=10**9 + s * 10**6 + 500_000,
                         frames=[{"name": frame_name, "filename": "train.py", "line": 10}]) for s in (1, 2, 3)]
        if rank != culprit:
            entries.append(entry(seq=4, backend="nccl", state="started", time_created_ns=10**9 + 4 * 10**6,
                                 time_discovered_started_ns=10**9 + 4 * 10**6 + 10,
                                 frames=[{"name": frame_name, "filename": "train.py", "line": 12}]))
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
        dumps[rank] = make_dump(entries, pg_config=config)
    return dumps


def test_identical_rows_are_folded_at_scale(tmp_path):
    write_dumps(tmp_path / "d", _job(256, culprit=77))
    page = report(tmp_path, tmp_path / "d")
    rows = re.findall(r"<tr(?: class='culprit')? data-ranks='([^']*)'>", page)
    assert rows == ["77", "0-76,78-255"]  # the culprit first, alone; everyone else in one row
    assert "ranks 0-76,78-255 (255)" in page


def test_strings_from_a_dump_are_escaped(tmp_path):
    write_dumps(tmp_path / "d", _job(4, culprit=2, frame_name="<script>alert(1)</script>"))
    page = report(tmp_path, tmp_path / "d")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_late_arrivals_are_plotted_where_the_dumps_have_timings(tmp_path):
    write_dumps(tmp_path / "d", _job(4, culprit=2))
    page = report(tmp_path, tmp_path / "d")
    plot = page.split("<div id='late'>")[1].split("</div>")[0]
    assert plot.startswith("<svg") and "rank 3" in plot  # rank 3 starts last (+3 us) every time


def test_html_is_a_file_output(tmp_path):
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--html", "-"]) == 2
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "-j", "--html", str(tmp_path / "x.html")]) == 2
    assert not (tmp_path / "x.html").exists()


# ---------------------------------------------------------------------------- in a real browser
def render(page: Path) -> tuple[str, list[str]]:
    """The DOM headless Chromium built from the page, and the errors its console reported."""
    done = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    return done.stdout, errors


browser = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


@browser
@pytest.mark.parametrize("fixture,culprit", [("skip_goes_on", "rank 1"), ("synthetic_torchcomms_wrapped_skip_rank5", "rank 5")])
def test_the_report_renders_in_chromium_without_script_errors(tmp_path, fixture, culprit):
    path = tmp_path / "r.html"
    main(["-d", str(FIXTURES / fixture), "--html", str(path)])
    dom, errors = render(path)
    assert errors == []
    assert "id=\"verdict\"" in dom and "DESYNC" in dom
    assert re.search(rf'<tr class="culprit" data-ranks="[^"]*"><th class="row">{culprit} « culprit</th>', dom), dom[:2000]
    assert "<svg" in dom.split('id="graph"')[1]


@browser
def test_a_script_error_in_the_page_is_caught(tmp_path):
    """The check above can fail: a page whose script throws is reported."""
    path = tmp_path / "r.html"
    main(["-d", str(FIXTURES / "skip_goes_on"), "--html", str(path)])
    path.write_text(path.read_text().replace("</body>", "<script>undefinedFunction();</script></body>"))
    _, errors = render(path)
    assert errors and "undefinedFunction" in errors[0]



@browser
def test_a_culprits_failed_health_check_is_shown_beside_it_in_chromium(tmp_path):
    from conftest import make_dump, ops, write_dumps

    dumps = {r: make_dump(ops(10 if r != 3 else 6)) for r in range(4)}
    dumps[3]["health_check_results"] = {"gpu": {"status": "failed", "index": 5, "uuid": "GPU-8d2c", "error": "Xid 48 <b>"}}
    path = tmp_path / "r.html"
    main(["-d", str(write_dumps(tmp_path / "d", dumps, prefix="_dump_")), "--html", str(path)])
    dom, errors = render(path)
    assert errors == []
    health = dom.split('id="health"')[1].split("</table>")[0]
    assert "rank 3" in health and "Xid 48 &lt;b&gt; (index 5, uuid GPU-8d2c)" in health and "<b>" not in health
    cause = dom.split('id="cause"')[1].split("</p>")[0]  # the cause, under the verdict: a failed device
    assert "hardware: rank 3: health check failed: gpu: Xid 48 &lt;b&gt;" in cause and dom.index('id="cause"') < dom.index('id="health"')
    assert dom.index('id="health"') < dom.index('id="grid"')  # beside the culprit, before the grid


def test_a_hang_in_an_op_the_recorder_never_logged_draws_no_recorded_stacks_of_it(tmp_path):
    # the monitored_barrier left no entry: no recorded stack of it to set beside the culprit's
    page = report(tmp_path, FIXTURES / "stacks_monitored_barrier_rank3")
    assert "id='stacks'" not in page and "#None" not in page  # was: '0 rank(s) in monitored_barrier #None'
    assert "Where the programs are now" in page and "monitored_barrier" in page


def test_a_stale_dump_and_a_recorder_off_are_said_on_their_rows(tmp_path):
    page = report(tmp_path, FIXTURES / "stale_dump_rank1")
    assert re.search(r"<th class='row'>rank 1 \(dump older\)</th>", page)  # was: a grey row like any other
    page = report(tmp_path, FIXTURES / "recorder_off_skip_rank0")
    assert re.search(r"<th class='row'>ranks 6-7 \(2\) \(recorder off\)</th>", page)
