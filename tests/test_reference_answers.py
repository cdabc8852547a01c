"""GroupView answers a seq id from what its column tracks hold together where every issuer holds it
alike (align._Spread, GroupView._agreed_at): alike, lowest_issuer and end_states must say what
asking each issuer says, for every seq id any member holds. Dumps taken at different moments (generate.py
--stagger) are where it matters: each member holds a range of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings

from conftest import entry, examples, make_dump, scenario_dirs, write_dumps
from frtrace.analysis.align import GroupView
from frtrace.loader import load_dumps
from frtrace.matcher import analyze
from frtrace.reading.discover import find_dump_files
from frtrace.reading.groups import resolve_groups
from test_columns import generate  # benchmarks/generate.py, loaded there
from test_properties import dump_sets



def _views(directory: Path) -> list[GroupView]:
    """Every GroupView the analysis of the set makes."""
    made: list[GroupView] = []
    original = GroupView.__init__

    def kept(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    GroupView.__init__ = kept
    try:
        loaded = load_dumps(find_dump_files(str(directory)), workers=0)
        analyze(loaded.dumps, resolve_groups(loaded.dumps, loaded.ranks_named, None))
    finally:
        GroupView.__init__ = original
    return made


def _answers(view: GroupView, seq: int) -> tuple:
    return view.alike(seq), view.lowest_issuer(seq), view.end_states(seq)


@pytest.fixture(autouse=True)
def _spread_at_once(monkeypatch):
    """The spread made at the first question, so every answer these tests compare comes from it."""
    monkeypatch.setattr(GroupView, "SPREAD_AFTER", 0)


def _assert_same_as_asking_each(directory: Path) -> int:
    """Compared seq ids answered from the spread; the count, so a test sees it was exercised."""
    answered = 0
    for view in _views(directory):
        held = {seq for track in view.tracks.values() if track.first_seq is not None
                for seq in (track.units or range(track.first_seq, track.last_seq + 1))}
        for seq in range(min(held, default=0), max(held, default=-1) + 1):  # and the gaps nobody holds
            fast = _answers(view, seq)
            answered += view._agreed_at(seq) is not None
            asked = GroupView._agreed_at
            GroupView._agreed_at = lambda self, seq: None
            try:
                slow = _answers(view, seq)
            finally:
                GroupView._agreed_at = asked
            assert fast == slow, (view.group.label, seq)
    return answered


def _generated(directory: Path, *flags: str, ranks: int = 16) -> Path:
    args = generate.arguments().parse_args([str(directory), "--ranks", str(ranks), "--entries", "60", "--tp", "4", *flags])
    directory.mkdir(exist_ok=True)
    for rank in range(ranks):
        generate.write_rank((rank, args))
    return directory


@pytest.mark.parametrize("flags", [(), ("--stagger", "16"), ("--stagger", "5", "--fault", "skip"),
                                   ("--stagger", "16", "--fault", "size"), ("--stagger", "7", "--wrap"),
                                   ("--stagger", "16", "--coalesced"), ("--stagger", "9", "--pp", "2")],
                         ids=["even", "staggered", "staggered-skip", "staggered-size", "staggered-wrap",
                              "staggered-coalesced", "staggered-pp"])
def test_generated_sets_answer_from_the_reference_as_from_each_issuer(flags, tmp_path):
    answered = _assert_same_as_asking_each(_generated(tmp_path / "set", *flags))
    assert answered > 0


@pytest.mark.parametrize("scenario", scenario_dirs(), ids=[p.name for p in scenario_dirs()])
def test_fixtures_answer_from_the_reference_as_from_each_issuer(scenario):
    _assert_same_as_asking_each(scenario)


@settings(max_examples=examples(60), deadline=None)
@given(raw=dump_sets())
def test_random_jobs_answer_from_the_reference_as_from_each_issuer(raw, tmp_path_factory):
    _assert_same_as_asking_each(write_dumps(tmp_path_factory.mktemp("job"), raw))


def _ranges(*held: tuple[int, int], odd: dict[tuple[int, int], dict] | None = None) -> dict:
    """Raw dumps, one per range of seq ids (rank i holds held[i]); `odd`: (rank, seq) -> what that
    entry has of its own (sizes, op)."""
    dumps = {}
    for rank, (first, last) in enumerate(held):
        raw = [entry(seq=s, state="completed", **(odd or {}).get((rank, s), {})) for s in range(first, last + 1)]
        dumps[rank] = make_dump(raw, first_record=first - 1)
    return dumps


def test_holders_that_differ_outside_the_reference_are_asked_one_by_one(tmp_path):
    # rank 0 holds the newest ops (the reference); ranks 1 and 2 older ones, differing at #2
    raw = _ranges((5, 10), (1, 6), (1, 6), odd={(2, 2): {"sizes": ((5,),)}})
    answered = _assert_same_as_asking_each(write_dumps(tmp_path, raw))
    assert answered > 0


def test_a_range_inside_another_covers_no_less_than_the_one_around_it(tmp_path):
    # by first seq id: 1-4, 2-3 (inside it), 3-7, whose #4 differs from the first's; the reference 10-20
    raw = _ranges((1, 4), (2, 3), (3, 7), (10, 20), odd={(2, 4): {"sizes": ((5,),)}})
    assert _assert_same_as_asking_each(write_dumps(tmp_path, raw)) > 0


def test_a_seq_id_a_unit_track_holds_is_asked_of_each_issuer(tmp_path):
    # rank 0 holds #3 as a coalesced group of two all_gathers (a unit track), ranks 1 and 2 as one
    # op; #5 and #6 only ranks 1 and 2 hold (rank 0's dump is older): those answered at once
    unit = [entry(seq=3, op="all_gather", sizes=((4,),), out=((12,),), state="completed"),
            entry(seq=3, op="all_gather", sizes=((2,),), out=((6,),), state="completed"),
            entry(seq=3, op="coalesced", sizes=(), state="completed")]
    held = {0: [entry(seq=s, state="completed") for s in (1, 2)] + unit + [entry(seq=4, state="completed")],
            **{r: [entry(seq=s, state="completed") for s in range(1, 7)] for r in (1, 2)}}
    assert _assert_same_as_asking_each(write_dumps(tmp_path, {r: make_dump(e) for r, e in held.items()})) > 0


def test_a_group_asked_of_few_seq_ids_asks_its_issuers_and_makes_no_spread(tmp_path, monkeypatch):
    monkeypatch.setattr(GroupView, "SPREAD_AFTER", 3)
    (view,) = [v for v in _views(write_dumps(tmp_path, _ranges((1, 6), (1, 6), (2, 7)))) if v.group.name == "0"]
    view._asked, view._spread = 0, None  # as made: the analysis may have asked it already
    assert [view._agreed_at(seq) for seq in (2, 3, 4)] == [None] * 3 and view._spread is None
    assert view._agreed_at(5) == 4 and view._spread is not None  # the fourth question: from the spread
