"""align.py's survivors of the mutation run's `align` slices (sessions 39, 41, 42, 43), each test seen
failing on its mutant: the spread of a group's column tracks (align._Spread) against a reference
that asks every track for every seq id (no dumps needed, the tracks made by hand); what align
makes once and keeps (a wide map's tables, a column's recoding, a p2p-only run's ops, a kind's size
rules), what it reads from the spread once made (the lowest issuer) or from units all at once, when
its codes fit in bytes, and a track compared with the reference wherever it starts, on SYNTHETIC
NCCL dumps built from format.md (gloo records no send or recv)."""

from __future__ import annotations

import random

import pytest

from conftest import entry, make_dump, ops
from test_matcher import nccl, p2p, run

from frtrace import types
from frtrace.analysis import align
from frtrace.analysis.align import Codes, GroupView, Track, _Spread, build_tracks
from frtrace.loader import normalize
from frtrace.reading.groups import resolve_groups


def _track(first: int, kinds: bytes, states: bytes) -> Track:
    return Track(first_seq=first, last_seq=first + len(kinds) - 1, positions=range(len(kinds)), kinds=kinds, states=states)


def _reference(columns: list[tuple[int, Track]]) -> tuple[int, list, list, set, set]:
    """What _Spread must say, asked of every track for every seq id: the value of the holder
    that starts first (then the lower rank), and where any two holders differ."""
    first = min(t.first_seq for _, t in columns)
    last = max(t.last_seq for _, t in columns)
    kinds, states, odd_kinds, odd_states = [], [], set(), set()
    by_start = sorted(columns, key=lambda item: (item[1].first_seq, item[0]))
    for place, seq in enumerate(range(first, last + 1)):
        held = [(t.kinds[seq - t.first_seq], t.states[seq - t.first_seq]) for _, t in by_start
                if t.first_seq <= seq <= t.last_seq]
        kinds.append(held[0][0] if held else None)
        states.append(held[0][1] if held else None)
        if len({k for k, _ in held}) > 1:
            odd_kinds.add(place)
        if len({s for _, s in held}) > 1:
            odd_states.add(place)
    return first, kinds, states, odd_kinds, odd_states


def _said(spread: _Spread) -> tuple[int, list, list, set, set]:
    return spread.first, spread.kinds, spread.states, spread.odd_kinds, spread.odd_states


def test_tracks_taken_at_different_moments_spread_as_each_seq_id_asked_of_every_holder():
    """Rank 0 was dumped last (its range starts latest), rank 2 first; rank 1 holds another
    state where it overlaps rank 2, rank 0 another kind where it overlaps rank 1."""
    columns = [(0, _track(14, b"\x01\x01\x02\x01\x01\x01", b"\x00" * 6)),
               (1, _track(12, b"\x01\x01\x01\x01\x01\x01", b"\x00\x00\x01\x00\x00\x00")),
               (2, _track(10, b"\x01\x01\x01\x01\x01", b"\x00" * 5))]
    spread = _Spread(columns)
    assert _said(spread) == _reference(columns)
    assert spread.first == 10 and spread.kinds[0] == 1 and spread.states[0] == 0  # the first seq id, rank 2's alone
    assert spread.odd_states == {4} and spread.odd_kinds == {6}


def test_a_gap_no_track_holds_is_none_and_never_odd():
    columns = [(0, _track(0, b"\x01\x01", b"\x00\x00")), (1, _track(5, b"\x02\x02", b"\x01\x01"))]
    spread = _Spread(columns)
    assert _said(spread) == (0, [1, 1, None, None, None, 2, 2], [0, 0, None, None, None, 1, 1], set(), set())


@pytest.mark.parametrize("seed", range(40))
def test_random_ranges_spread_as_the_reference_says(seed):
    rng = random.Random(seed)
    columns = []
    for rank in range(rng.randint(1, 6)):
        length = rng.randint(1, 12)
        columns.append((rank, _track(rng.randint(0, 15), bytes(rng.choice((1, 1, 1, 2)) for _ in range(length)),
                                     bytes(rng.choice((0, 0, 0, 1)) for _ in range(length)))))
    assert _said(_Spread(columns)) == _reference(columns)


# Session 41: slice 1's survivors left as equivalent in results. What align does once that it
# could do again, unseen in any verdict (`Codes._recoded` 35 and 40, `_unit_track` 35): the
# analysis's cost per dump stays flat only where these hold, and only a test of them can tell.
# And what `agreed` answers (`GroupView._compare_columns` 10, `agreed` 5): wrong for some seq ids
# under them, though a verdict comes out the same (what is not agreed is checked entry by entry).

def _dumps(raw: dict[int, dict]) -> dict:
    return {rank: normalize(dump, rank, f"rank{rank}", "pickle") for rank, dump in raw.items()}


@pytest.mark.parametrize("per_rank, made_by", [(150, "wide_tables"), (10, "translation_table")])
def test_a_maps_tables_are_made_once_and_each_column_recoded_once(monkeypatch, per_rank, made_by):
    """150 distinct kinds a rank (300 in the job): codes past a byte, so each rank's own one-byte
    codes are widened through tables made from its map; 10 a rank: translated through one table.
    The tables are made once per map, whatever the columns recoded with it (`_recoded` 18, 23 made
    them again for each); a column asked again is the same object."""
    dumps = _dumps({rank: make_dump([entry(seq=i + 1, sizes=((base + i,),)) for i in range(per_rank)])
                    for rank, base in ((0, 1), (1, 1000))})
    codes = Codes(dumps)
    assert len(codes.kinds) == 2 * per_rank and isinstance(dumps[1].entries.kind, bytes)
    made, maker = [], getattr(align, made_by)
    for module in (types, align):  # types: what recode makes where it is given no tables
        monkeypatch.setattr(module, made_by, lambda mapping: made.append(mapping) or maker(mapping))
    column = dumps[1].entries.kind
    recoded = codes.kinds_of(1, column)
    assert isinstance(recoded, bytes) == (made_by == "translation_table")
    assert list(recoded) == [per_rank + i for i in range(per_rank)]
    assert codes.kinds_of(1, column) is recoded  # recoded once
    other = bytes(bytearray(column))  # another column (bytes(column) would be the same object)
    assert other is not column and list(codes.kinds_of(1, other)) == list(recoded)
    assert list(codes.kinds_of(1, other[:5])) == list(recoded[:5])
    assert made == [codes.kind_map(1)]  # one map, its tables made once


def test_a_group_of_p2p_ops_only_is_read_by_the_p2p_only_path(monkeypatch):
    """A run of sends or recvs alone is made by C-level passes (_p2p_only), never entry by entry."""
    world = {"0": ("default_pg", (0, 1))}
    dumps = _dumps({0: nccl([p2p("send", 0, 1, s) for s in (1, 2, 3)], world),
                    1: nccl([p2p("recv", 1, 0, s) for s in (1, 2, 3)], world)})
    made, p2p_only = [], align._p2p_only

    def spied(*args):
        made.append(p2p_only(*args))
        return made[-1]

    monkeypatch.setattr(align, "_p2p_only", spied)
    table = resolve_groups(dumps, frozenset(dumps))
    codes = Codes(dumps)
    tracks = [track for rank, dump in dumps.items() for track in build_tracks(dump, table, codes)[0].values()]
    assert len(tracks) == 2 and [[op.kind for op in t.p2p] for t in tracks] == [["send"] * 3, ["recv"] * 3]
    assert [id(t.p2p) for t in tracks] == [id(found) for found in made]


def _view(raw: dict[int, dict]) -> GroupView:
    dumps = _dumps(raw)
    table, codes = resolve_groups(dumps, frozenset(dumps)), Codes(dumps)
    (group,) = table.groups
    return GroupView(group, {rank: build_tracks(dump, table, codes)[0][group] for rank, dump in dumps.items()}, dumps, codes)


def _holding(held: dict[int, tuple[int, int]]) -> GroupView:
    """The group of the ranks given, each holding all_reduce #first-#last alike, completed; a
    buffer that does not start at #1 wrapped (its older records gone)."""
    world = {"0": ("default_pg", tuple(held))}
    return _view({rank: nccl(ops(last - first + 1, start=first, backend="nccl", state="completed"), world, first_record=first - 1)
                  for rank, (first, last) in held.items()})


def _two_ranks(wrapped: int | None) -> GroupView:
    """Two ranks all_reduce #1-#10 alike; the `wrapped` one's buffer kept only #6-#10."""
    return _holding({rank: (6 if rank == wrapped else 1, 10) for rank in (0, 1)})


@pytest.mark.parametrize("wrapped", [0, 1])
def test_a_group_agrees_over_the_longest_range_its_members_hold(wrapped):
    """Two ranks all_reduce #1-#10 alike; one's buffer kept only #6-#10. Every seq id of #1-#10
    is agreed (the check has nothing to find), the first among them, whichever rank wrapped; but
    #6, the first op the wrapped buffer holds, which may be cut short (checked entry by entry)."""
    view = _two_ranks(wrapped)
    assert [seq for seq in range(0, 12) if view.agreed(seq)] == [1, 2, 3, 4, 5, 7, 8, 9, 10]


def test_a_kinds_size_rules_are_asked_once_however_often_its_issuers_are_compared(monkeypatch):
    """Whether a kind breaks a size rule by itself is asked once per kind code of the group, and
    kept: a group compares the same few kinds over thousands of seq ids (`GroupView._fine` 1 asked
    the rules again each time)."""
    world = {"0": ("default_pg", (0, 1))}
    view = _view({rank: nccl(ops(10, backend="nccl", state="completed"), world) for rank in (0, 1)})
    asked, own_size_problem = [], align.size_rules.own_size_problem
    monkeypatch.setattr(align.size_rules, "own_size_problem", lambda kind, size: asked.append(kind) or own_size_problem(kind, size))
    assert all(view.alike(seq) for seq in range(1, 11)) and all(view.alike(seq) for seq in range(1, 11))
    assert len(asked) == 1


@pytest.mark.parametrize("seq", [1, 3, 10])
def test_once_the_spread_is_made_the_lowest_issuer_is_read_from_it(monkeypatch, seq):
    """Rank 0's buffer kept only #6-#10, rank 1's all of #1-#10. Once a group has been asked
    often enough to make its spread, the lowest issuer of a seq id is read from it and only that
    rank's track is asked for its unit, the spread's first seq id (#1, rank 1's alone) as any
    other (`lowest_issuer` 1 asked every track in rank order; `_agreed_at` 16 left the spread's
    first seq id to that walk)."""
    view = _two_ranks(wrapped=0)
    view.SPREAD_AFTER = 0  # the spread made at the first question
    expected = 0 if seq > 5 else 1
    asked, unit = [], Track.unit
    monkeypatch.setattr(Track, "unit", lambda track, at: asked.append(track) or unit(track, at))
    rank, found = view.lowest_issuer(seq)
    assert rank == expected and [e.collective_seq_id for e in found] == [seq]
    assert asked == [view.tracks[expected]]


@pytest.mark.parametrize("wrapped", [None, 0])
def test_a_run_of_agreed_seq_ids_is_found_from_any_of_its_seq_ids_the_first_too(wrapped):
    """`agreed_through` from each seq id: the last of the agreed run it starts, #6 (the first op a
    wrapped buffer holds) breaking the run; seq - 1 outside one. The reference's first seq id
    starts a run as any other (`agreed_through` 6 left it to be checked alone)."""
    view = _two_ranks(wrapped)
    through = {seq: view.agreed_through(seq) for seq in range(0, 12)}
    if wrapped is None:
        assert through == {0: -1, **{seq: 10 for seq in range(1, 11)}, 11: 10}
    else:
        assert through == {0: -1, 1: 5, 2: 5, 3: 5, 4: 5, 5: 5, 6: 5, 7: 10, 8: 10, 9: 10, 10: 10, 11: 10}


def test_a_mismatch_in_a_dump_older_than_the_longest_is_found():
    """Rank 0 holds #5-#20 (the longest range: the reference), ranks 1 and 2, dumped earlier, hold
    #1-#10; rank 1 called all_gather as #7. Each track is compared with the reference over the seq
    ids both hold, place for place, wherever the track starts (`_compare_columns` 36 compared rank
    1's from its own first seq id: #1 against the reference's #5, and the mismatch was said CLEAN)."""
    world = {"0": ("default_pg", (0, 1, 2))}
    longest = [entry(seq=seq, backend="nccl", state="completed") for seq in range(5, 21)]

    def older(odd: bool) -> list[dict]:
        return [entry(seq=seq, backend="nccl", state="completed", op="all_gather" if odd and seq == 7 else "all_reduce")
                for seq in range(1, 11)]

    result = run({0: nccl(longest, world, first_record=4), 1: nccl(older(True), world), 2: nccl(older(False), world)})
    assert result.verdict == "desync" and result.culprit_ranks == (1,), result.headline
    assert [(f.kind, f.collective_seq_id, f.ranks) for f in result.findings] == [("type_mismatch", 7, (1,))]


@pytest.mark.parametrize("count", [256, 257])
def test_a_job_of_256_kinds_keeps_them_in_bytes(count):
    """Codes 0-255 fit in a byte: a job of 256 kinds (128 sizes a rank, two ranks) recodes its
    columns into bytes, compared at C speed; one more kind and they are arrays
    (`Codes.__init__` 21 took 256 kinds for too many)."""
    dumps = _dumps({rank: make_dump([entry(seq=i + 1, sizes=((base + i,),)) for i in range(half)])
                    for rank, base, half in ((0, 1, 128), (1, 1000, count - 128))})
    codes = Codes(dumps)
    recoded = codes.kinds_of(1, dumps[1].entries.kind)
    assert len(codes.kinds) == count and list(recoded) == list(range(128, count))
    assert isinstance(recoded, bytes) == (count <= 256)
    # the states, two, in bytes whatever the kinds' count (`Codes.states_of` 3 made them arrays)
    states = codes.states_of(1, dumps[1].entries.state)
    assert isinstance(states, bytes) and [codes.states[code] for code in states] == [e.state for e in dumps[1].entries]


def test_a_group_of_coalesced_units_is_compared_without_asking_its_tracks(monkeypatch):
    """Every member's track is one of units (a coalesced group at #2): whether a seq id's issuers
    hold it alike is read from their units' kind codes all at once, no track asked
    (`GroupView.__init__` 56 left it to asking each track)."""
    world = {"0": ("default_pg", (0, 1))}

    def coalesced() -> list[dict]:
        return [entry(seq=1, backend="nccl", state="completed"),
                entry(seq=2, backend="nccl", state="completed"), entry(seq=2, backend="nccl", state="completed"),
                entry(seq=2, op="coalesced", backend="nccl", state="completed", sizes=()),
                entry(seq=3, backend="nccl", state="completed")]

    view = _view({rank: nccl(coalesced(), world) for rank in (0, 1)})
    assert all(track.units is not None for track in view.tracks.values())
    asked = []
    monkeypatch.setattr(Track, "kinds_at", lambda track, seq: asked.append(seq))
    assert [view.alike(seq) for seq in (1, 2, 3)] == [True, True, True]
    assert asked == []


@pytest.mark.parametrize("wrapped", [None, 0])
def test_a_seq_id_past_every_members_last_has_no_issuer_once_the_spread_is_made(wrapped):
    """Asked of #11, one past the last op any member holds, after the spread is made: nobody
    issued it, in no state (`_agreed_at` 18 took the place one past the spread's end for one of
    its own and failed with an IndexError); #0, before the first, alike."""
    view = _two_ranks(wrapped)
    view.SPREAD_AFTER = 0
    for seq in (11, 12, 0):
        assert (view.lowest_issuer(seq), view.end_states(seq), view.issuers(seq), view.alike(seq)) == (None, set(), {}, False)
    assert view.lowest_issuer(10)[0] == 0 and view.end_states(10) == {"completed"}


@pytest.mark.parametrize("seq", [1, 3, 10])
@pytest.mark.parametrize("question, track_asked, answer", [("end_states", "end_state", {"completed"}), ("alike", "kinds_at", True)])
def test_once_the_spread_is_made_an_agreed_seq_ids_state_and_kind_are_read_from_it(monkeypatch, seq, question, track_asked, answer):
    """Once the spread is made, the state every issuer of a seq id holds it in, and whether they
    all hold one kind, are read from it: no track is asked (`end_states` 13 and `alike` 19 asked
    each issuer's track at every seq id)."""
    view = _two_ranks(wrapped=0)
    view.SPREAD_AFTER = 0
    asked, method = [], getattr(Track, track_asked)
    monkeypatch.setattr(Track, track_asked, lambda track, *args: asked.append(track) or method(track, *args))
    assert getattr(view, question)(seq) == answer
    assert asked == []


@pytest.mark.parametrize("second_first", [5_000_001, 5_000_003])
def test_a_long_running_jobs_lowest_holders_are_kept_for_the_reference_range_only(second_first):
    """A job that has run five million collectives: rank 0's buffer holds #5000001-#5000010, rank
    1's the same or from #5000003 (older records gone). Where the ranges differ, the lowest holder
    of each seq id is kept for the reference's ten seq ids, not for a list as long as the seq ids
    are large (`_compare_columns` 83 sized it by first + last: ten million places a group, 80 MB
    each); where all hold one range, its lowest holder holds each and no list is made. Either way
    the owners of the agreed run read as before."""
    view = _holding({0: (5_000_001, 5_000_010), 1: (second_first, 5_000_010)})
    assert (view._owner is None) if second_first == 5_000_001 else (len(view._owner) == 10)
    assert [(rank, first, last) for rank, _, first, last in view.owners(5_000_001, 5_000_010)] == [(0, 5_000_001, 5_000_010)]


@pytest.mark.parametrize("count", [256, 257])
def test_a_job_of_256_states_keeps_them_in_bytes(count):
    """As for kinds: a job whose entries hold 256 distinct states (a hostile or odd producer's)
    recodes its state columns into bytes; one more and they are arrays (`Codes.__init__` 23 took
    256 states for too many)."""
    dumps = _dumps({rank: make_dump([entry(seq=i + 1, state=f"state{base + i}") for i in range(half)])
                    for rank, base, half in ((0, 0, 128), (1, 128, count - 128))})
    codes = Codes(dumps)
    recoded = codes.states_of(1, dumps[1].entries.state)
    assert len(codes.states) == count and [codes.states[code] for code in recoded] == [e.state for e in dumps[1].entries]
    assert isinstance(recoded, bytes) == (count <= 256)


@pytest.mark.parametrize("coalesced", [False, True])
def test_a_tracks_first_position_of_a_seq_id_it_does_not_hold_is_none(coalesced):
    """`Track.first_position` of a seq id the track does not hold is None, for a track by column and
    one of units (`first_position` 5 and 9 answered a place or failed: no caller asks it so, but
    the answer is the method's word)."""
    world = {"0": ("default_pg", (0, 1))}
    raw = ops(5, backend="nccl", state="completed")
    if coalesced:
        raw = raw[:2] + [entry(seq=3, backend="nccl", state="completed", op="all_reduce")] + raw[2:]
    view = _view({rank: nccl(raw, world) for rank in (0, 1)})
    track = view.tracks[0]
    assert (track.units is not None) == coalesced
    assert [track.first_position(seq) for seq in (0, 6, 99)] == [None, None, None]
    assert track.first_position(1) == 0 and track.first_position(4) == (4 if coalesced else 3)


def test_tracks_that_agree_are_compared_as_whole_slices_wherever_their_ranges_end(monkeypatch):
    """Ranks dumped at different moments: rank 0 holds #1-#10 (the reference), rank 1 #5-#12 (past
    the reference's end), rank 2 #3-#6 (ending before it), all alike. Each track is compared with
    the reference, and with the spread once made, as one C-level comparison of the slices both hold:
    the walk place by place (the only use of enumerate in align) is for slices that differ, and
    here none does (`_compare_columns` 37, 42, 43 took a slice of the track past the reference's
    end, 45, 50, 51 one of the reference past the track's, `_Spread._compare` 3 an empty one: the
    walk for every track, tens of thousands of places for each of thousands of ranks)."""
    walked = []
    monkeypatch.setattr(align, "enumerate", lambda *args: walked.append(args) or enumerate(*args), raising=False)
    view = _holding({0: (1, 10), 1: (5, 12), 2: (3, 6)})
    view.SPREAD_AFTER = 0
    assert view.lowest_issuer(11)[0] == 1 and view.lowest_issuer(2)[0] == 0
    assert (view.disputed, view.mixed_states, view._spread.odd_kinds, view._spread.odd_states) == ({3, 5}, set(), set(), set())  # the wrapped buffers' first ops
    assert walked == []
