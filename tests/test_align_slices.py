"""align.py's survivors of the mutation run's `align` slices (session 39), each test seen failing
on its mutant: the spread of a group's column tracks (align._Spread) against a reference that
asks every track for every seq id; no dumps needed, the tracks are made by hand."""

from __future__ import annotations

import random

import pytest

from frtrace.analysis.align import Track, _Spread


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
