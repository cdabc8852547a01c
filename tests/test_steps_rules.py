"""The own-history and step rules of analysis/steps.py, one function at a time, on the step shapes
each decides (issue 52: the mutation run found them reached only through whole analyses, whose
answers a mutant of a tie or a boundary mostly leaves alone).

A buffer here is written as op classes, one letter each (S starts a step, W is the op awaited,
X any other); what each rule must answer is read from its docstring: a boundary of
_HISTORY_STEPS (3) earlier steps, a buffer that never wrapped holding the first step, a step
still running against a complete one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from frtrace.analysis import steps
from frtrace.analysis.steps import (_Buffer, _class_of_entry, _gaps, _in_step, _one_left_out, _step_cuts,
                                    _step_left_out, _steps_between, _stopped_in_step, buffer_of, on_step)
from frtrace.types import Entry, Group


def buf(classes: str, wrapped: bool = False, batch_ends: str = "") -> _Buffer:
    """A buffer of one-letter classes at indices 0, 1, ...; `batch_ends`: a letter per op, "e"
    where the op ends a batch of p2p ops."""
    ends = batch_ends.ljust(len(classes))
    return _Buffer([(index, c, ends[index] == "e") for index, c in enumerate(classes)], wrapped)


def last(classes: str) -> int:
    return len(classes) - 1


def test_history_needs_three_steps():
    assert steps._HISTORY_STEPS == 3  # the boundaries below are written for it


# ------------------------------------------------------------------------- gaps between blocked ops
@pytest.mark.parametrize("classes, wrapped, expected", [
    ("WBWBBXW", False, (1, [1, 0])),  # one W before the first B; a W after the last B is in no gap
    ("WBWBBXW", True, (None, [1, 0])),  # wrapped: what came before the first B is partly gone
    ("BWWB", False, (0, [2])),  # none before the first B: 0, not None
    ("XWX", False, (None, [])),  # no B at all
    ("BWXWBXB", False, (0, [2, 0])),  # other classes count for nothing
])
def test_gaps_count_the_wanted_ops_before_and_between_the_blocked_ones(classes, wrapped, expected):
    assert _gaps(buf(classes, wrapped), "B", "W") == expected


@pytest.mark.parametrize("classes, expected", [
    ("BWBWBWB", True),  # three gaps, each with a W
    ("BWBWB", False),  # two: too few steps to say
    ("BWBBWBWB", False),  # one gap without a W
    ("BWWBWBXWB", True),
])
def test_a_rank_in_step_shows_the_wanted_op_in_every_gap_of_three_or_more(classes, expected):
    assert _in_step(buf(classes), "B", "W") is expected


@pytest.mark.parametrize("classes, wrapped, expected", [
    ("BWBWBWBB", False, 3),  # three gaps with W, then the latest without
    ("WBWBWBB", False, 3),  # two gaps, plus the first step a buffer that never wrapped holds
    ("WBWBWBB", True, None),  # wrapped: that first step is not known whole
    ("BWBWBB", False, None),  # two steps only
    ("BWBWBWBWB", False, None),  # the latest gap has its W: nothing skipped
    ("BWBBWBWBB", False, None),  # an earlier gap without W: no order to break
    ("BWWBWBWBB", False, 3),
    ("XBWBWBWBB", False, 3),  # an X before the first B is no W: the first step does not count
])
def test_steps_between_counts_the_steps_that_show_the_order_the_latest_breaks(classes, wrapped, expected):
    assert _steps_between(buf(classes, wrapped), "B", "W") == expected


def test_steps_between_counts_the_first_step_only_where_it_holds_the_wanted_op():
    assert _steps_between(buf("XBWBWBB"), "B", "W") is None  # 2 gaps + a first part without W
    assert _steps_between(buf("WBWBWBWBB"), "B", "W") == 4


# ------------------------------------------------------------------------- cutting a buffer into steps
def test_the_least_recurring_class_cuts_the_buffer_into_steps():
    (cut,) = _step_cuts(buf("ABCABCABCAB"), 10)  # A and B recur 4 times, C 3: C starts a step
    assert cut == ("C", [("C", "A", "B"), ("C", "A", "B")], ("C", "A", "B"), ("A", "B"))


def test_each_class_recurring_least_cuts_the_buffer_once_in_the_order_first_seen():
    cuts = list(_step_cuts(buf("ABCABCABCA"), 9))  # B and C 3 times each
    assert [start for start, *_ in cuts] == ["B", "C"]
    assert cuts[0] == ("B", [("B", "C", "A"), ("B", "C", "A")], ("B", "C", "A"), ("A",))


def test_cutting_stops_at_the_op_the_rank_is_blocked_in():
    cuts = list(_step_cuts(buf("ABCABCABCAB"), 7))  # A, B, C, A, B, C, A, B: C recurs twice, A and B three times
    assert cuts == [("A", [("A", "B", "C"), ("A", "B", "C")], ("A", "B"), ()),
                    ("B", [("B", "C", "A"), ("B", "C", "A")], ("B",), ("A",))]


def test_a_wrapped_buffer_needs_one_occurrence_more_to_cut_and_classes_recurring_less_are_not_starts():
    assert list(_step_cuts(buf("ABCABCABC", wrapped=True), 8)) == []  # 3 each: not enough once wrapped
    cuts = list(_step_cuts(buf("ABCABCABCABCD", wrapped=True), 12))  # D once: no start
    assert [start for start, *_ in cuts] == ["A", "B", "C"]


def test_a_batch_end_is_not_an_op_of_a_step():
    (cut,) = _step_cuts(buf("ABEABEABEA", batch_ends="  e  e  e "), 9)  # E ends each batch: left out
    assert cut[0] == "B" and cut[1] == [("B", "A"), ("B", "A")]


# ------------------------------------------------------------------------- one op left out of a step
@pytest.mark.parametrize("template, seen, complete, expected", [
    ("ABWC", "ABC", True, True),  # the whole step less its W
    ("ABWC", "ABCC", True, False),  # less its W, but one more C
    ("ABWC", "ABXC", True, False),  # another op in W's place
    ("ABC", "ABC", True, False),  # nothing left out
    ("ABW", "AB", True, True),  # the last op of the step left out
    ("ABX", "AB", True, False),  # ... and it was not the W
    ("ABW", "A", True, False),  # two ops fewer
    ("ABWCD", "ABC", True, False),  # less its W and its last op
    ("AWBC", "AB", False, True),  # a step still running, blocked in B: W before it left out
    ("AWBC", "ABC", False, True),
    ("AWBC", "AXC", False, False),
    ("AWBC", "AW", False, False),  # a running step that follows the template so far left nothing out
    ("AWB", "AWB", False, False),
])
def test_one_op_left_out_of_a_step(template, seen, complete, expected):
    assert _one_left_out(tuple(template), tuple(seen), "W", complete) is expected


STEP = "SWWX"  # a pipeline stage's step: two microbatches' receives (W), then X


def test_a_running_step_less_one_wanted_op_is_left_out_after_three_alike():
    classes = STEP * 3 + "SWX"  # blocked in the last X, having left out one W
    assert _step_left_out(buf(classes), last(classes), "W") == (3, 4, "S")
    assert _step_left_out(buf(classes), last(classes), "X") is None  # the op left out was a W
    assert _step_left_out(buf(STEP * 2 + "SWX"), 10, "W") is None  # two steps only


def test_the_step_before_the_running_one_may_be_the_one_less_a_wanted_op():
    classes = STEP * 3 + "SWX" + "SW"  # the step after the short one follows the template so far
    assert _step_left_out(buf(classes), last(classes), "W") == (3, 4, "X")  # cut at X: a first step counted
    assert _step_left_out(buf(classes, wrapped=True), last(classes), "W") is None  # 2 known steps, first not whole
    astray = STEP * 3 + "SWX" + "SX"  # the step after it does not follow the template
    assert _step_left_out(buf(astray), last(astray), "W") is None


def test_steps_that_differ_before_the_deviant_one_are_no_template():
    classes = "SWWX" + "SWWXX" + "SWWX" + "SWWX" + "SWX"
    assert _step_left_out(buf(classes), last(classes), "W") is None


# ------------------------------------------------------------------------- following the step
def test_on_step_where_two_steps_and_the_first_of_a_buffer_never_wrapped_make_three():
    classes = "SWX" * 3 + "SW"  # X recurs least: steps X,S,W; the buffer starts with S,W
    assert on_step(buf(classes), last(classes)) == (("X", "S", "W"), ("X", "S", "W"), ("S", "W"))
    assert on_step(buf("SWX" * 2 + "SW"), 7) is None  # one step and a first: two


def test_on_step_needs_the_running_step_to_follow_the_template():
    classes = "SWX" * 3 + "SX"
    assert on_step(buf(classes), last(classes)) is None
    assert on_step(buf("SWX" * 4 + "SW", wrapped=True), 13) == (("X", "S", "W"), ("X", "S", "W"), ("S", "W"))


def test_on_step_tries_each_class_that_recurs_least():
    classes = "AXBABABAB"  # cut at A, the steps are unlike (A,X,B then A,B); cut at B, alike
    assert on_step(buf(classes), last(classes)) == (("B", "A"), ("B",), ("A", "X"))


def test_on_step_needs_every_complete_step_alike():
    classes = "SWX" + "SWYX" + "SWX" + "SWX" + "SW"  # X starts steps: X,S,W,Y once, then X,S,W twice
    assert on_step(buf(classes), last(classes)) is None


@pytest.mark.parametrize("classes, wanted, expected", [
    ("SWX" * 3 + "S", "W", (3, 2)),  # stopped 2 ops into a step (X, S), a W next: inside the loop
    ("SWX" * 3 + "S", "X", None),  # the op next is W, not X
    ("SWX" * 3, "S", None),  # stopped where a pass of the loop ends: the program may have ended
])
def test_a_rank_stopped_inside_its_loop_with_the_op_next(classes, wanted, expected):
    assert _stopped_in_step(buf(classes), last(classes), wanted) == expected
    assert _stopped_in_step(buf(classes, wrapped=True), last(classes), wanted) is None


# ------------------------------------------------------------------------- classes of entries
GROUP = Group("0", "default_pg", (4, 5, 6, 7))


def entry(index: int, op: str, sizes=((8,),), is_p2p: bool = False) -> Entry:
    return Entry(5, index, index, "0", "default_pg", index, 0, op, "gloo", sizes, sizes, ("Float",), ("Float",),
                 "completed", is_p2p)


def test_a_collective_class_is_its_group_op_and_sizes():
    assert _class_of_entry(entry(0, "all_reduce", ((8, 2),)), GROUP) == ("coll", GROUP, "all_reduce", ((8, 2),))


@pytest.mark.parametrize("op, expected", [
    ("send 0->3", ("p2p", GROUP, "send", 4, 7)),  # group-local numbers, global ranks; src, dst
    ("recv 2<-1", ("p2p", GROUP, "recv", 5, 6)),  # a recv names its own side first
    ("send 0->9", ("p2p", GROUP, "send", 4, None)),  # a peer the group lacks: unknown
    ("send a->1", ("p2p", GROUP, "send", None, None)),  # a name that is no number: both unknown
])
def test_a_p2p_class_is_its_group_kind_and_global_peers(op, expected):
    assert _class_of_entry(entry(0, op, is_p2p=True), GROUP) == expected


def test_a_buffer_marks_the_coalesced_end_of_a_batch_of_p2p_ops_only():
    dump = SimpleNamespace(entries=[entry(0, "coalesced"), entry(1, "send 0->1", is_p2p=True),
                                    entry(2, "coalesced"), entry(3, "all_reduce"), entry(4, "coalesced")], wrapped=True)
    read = buffer_of(dump, lambda e: None if e.index == 3 else GROUP)  # entry 3 in a group no view holds
    assert [(index, batch_end) for index, _, batch_end in read.ops] == [(0, False), (1, False), (2, True), (4, False)]
    assert read.wrapped is True and read.ops[1][1] == ("p2p", GROUP, "send", 4, 5)


# ------------------------------------------------------------------------- the rules on a graph
# OwnHistory is a mixin of waitgraph.WaitGraph: it reads the graph's blockers, dumps, waiters and
# the ops awaiting each rank. Graph gives it those, with buffers of one-letter collectives.
def op_class(letter: str) -> tuple:
    return _class_of_entry(entry(0, letter), GROUP)


def key(letter: str) -> tuple:
    return ("coll", letter)


class Graph(steps.OwnHistory):
    """`buffers`: rank -> its buffer's classes (never wrapped); `blocked`: rank -> (the letter of
    the op it is blocked in, its buffer index); `awaited`: rank -> the letters of the ops waiting
    for it; `waiters`: letter -> the ranks waiting in it; `op_of`: rank -> the letter of its op."""

    def __init__(self, buffers: dict, blocked: dict, awaited: dict | None = None, waiters: dict | None = None,
                 op_of: dict | None = None) -> None:
        self.dumps = {rank: SimpleNamespace(entries=[None] * len(classes)) for rank, classes in buffers.items()}
        self._buffers = {rank: _Buffer([(i, op_class(c), False) for i, c in enumerate(classes)], False)
                         for rank, classes in buffers.items()}
        self._steps: dict = {}
        self.blockers = {rank: SimpleNamespace(entry=entry(index, letter), group=GROUP, p2p=None)
                         for rank, (letter, index) in blocked.items()}
        letters = {c for classes in buffers.values() for c in classes} | {letter for letter, _ in blocked.values()}
        self.blocker_of_op = {key(c): SimpleNamespace(entry=entry(0, c), group=GROUP, p2p=None) for c in letters | {"Y"}}
        self.awaited = {rank: [key(c) for c in letters] for rank, letters in (awaited or {}).items()}
        self.waiters = {key(c): ranks for c, ranks in (waiters or {}).items()}
        self.op_of = {rank: key(c) for rank, c in (op_of or {}).items()}
        self.asked: list = []

    def _awaited_by(self, rank: int) -> list[tuple]:
        return self.awaited.get(rank, [])

    def _first_in_program(self, ops: list[tuple], cycle_ranks: set[int]) -> tuple | None:
        """The last of `ops`, as if the others' buffers showed it first (order.py votes, here not)."""
        self.asked.append((list(ops), set(cycle_ranks)))
        return ops[-1]


IN_EVERY_GAP = "BWBWXBWB"  # W between every two B, the steps unlike (no step repeated)
TWO_OF_ONE = "SWSX" * 3 + "S"  # one step X,S,W,S repeated; S twice a step, so W not between every two S


def test_a_rank_keeps_its_step_where_the_awaited_op_is_between_every_two_of_its_blocked_op():
    graph = Graph({0: IN_EVERY_GAP}, {0: ("B", 7)})
    assert graph._step_of(0) is None and graph._keeps_step(0, [key("W")]) is True
    assert graph._keeps_step(0, [key("X")]) is False and graph._keeps_step(0, [key("W"), key("X")]) is False


def test_a_rank_keeps_its_step_where_it_follows_the_step_it_repeats_which_holds_the_awaited_op():
    graph = Graph({1: TWO_OF_ONE}, {1: ("S", 12)})
    assert not _in_step(graph._buffer(1), op_class("S"), op_class("W"))
    assert graph._step_of(1) == ((op_class("X"), op_class("S"), op_class("W"), op_class("S")),
                                 (op_class("X"), op_class("S")), (op_class("S"), op_class("W"), op_class("S")))
    assert graph._keeps_step(1, [key("W")]) is True  # in the step, not in the part of it done
    assert graph._keeps_step(1, [key("W"), key("X")]) is True
    assert graph._keeps_step(1, [key("Y")]) is False and graph._keeps_step(1, [key("W"), key("Y")]) is False


def test_a_rank_not_blocked_or_without_a_dump_keeps_no_step():
    graph = Graph({1: TWO_OF_ONE}, {1: ("S", 12), 2: ("S", 12)})  # 2 is blocked, its dump not read
    assert graph._keeps_step(2, [key("W")]) is False and graph._step_of(2) is None
    assert graph._keeps_step(3, [key("W")]) is False and graph._step_of(3) is None  # 3: neither


def test_a_deviator_by_history_is_found_in_a_later_awaited_op_where_an_earlier_shows_nothing():
    classes = STEP * 3 + "SWX"  # blocked in the last X, one W left out of the step it is in
    graph = Graph({4: classes}, {4: ("X", last(classes)), 5: ("X", 0)}, awaited={4: "YW", 5: "W"})  # 5: no dump
    deviators, evidence = graph._deviators_by_history({4, 5})
    assert deviators == {4: key("W")}
    assert evidence == ["own history: rank 4's buffer repeats one step of 4 ops (from one S of default_pg to the next) "
                        "in its last 3 steps; the step it is in has one W of default_pg fewer"]


def test_a_deviator_by_history_where_its_latest_step_lacks_the_op_every_earlier_one_had():
    graph = Graph({6: "BWBWBWBB"}, {6: ("B", 7)}, awaited={6: "W"})
    assert graph._deviators_by_history({6}) == ({6: key("W")}, [
        "own history: rank 6's buffer shows W of default_pg between every two B of default_pg in its last 3 steps, and "
        "not before its latest one"])


ON_STEP = "SWX" * 3 + "S"  # on its step: X,S,W repeated, stopped 2 ops into one with W next


def test_the_one_rank_of_a_cycle_off_its_step_left_its_program_at_the_op_the_others_show_first():
    buffers = {0: IN_EVERY_GAP, 1: ON_STEP, 6: ON_STEP}
    blocked = {0: ("B", 7), 1: ("S", 9), 6: ("S", 9)}
    graph = Graph(buffers, blocked, awaited={0: "AC"}, waiters={"A": [1], "C": [6]})
    assert graph._left_by_history({0, 1, 6}) == (0, key("C"), [1, 6])  # C: what order.py's votes put first
    assert graph.asked == [([key("A"), key("C")], {0, 1, 6})]
    one = Graph(buffers, blocked, awaited={0: "DA"}, waiters={"A": [1], "D": [9]})  # D awaited from outside the cycle
    assert one._left_by_history({0, 1, 6}) == (0, key("A"), [1, 6])
    assert Graph(buffers, blocked, awaited={0: "D"}, waiters={"D": [9]})._left_by_history({0, 1, 6}) is None
    two_off = Graph({**buffers, 6: IN_EVERY_GAP}, {**blocked, 6: ("B", 7)}, awaited={0: "A"}, waiters={"A": [1]})
    assert two_off._left_by_history({0, 1, 6}) is None


def test_ranks_that_stayed_behind_inside_their_loop_while_the_issuers_went_on():
    from frtrace.analysis.align import ranks_word

    graph = Graph({10: ON_STEP, 11: ON_STEP + "W", 12: "SYWX" * 3 + "SYW", 13: "SWXSWX"},
                  {11: ("W", 10), 12: ("W", 14)}, op_of={11: "W", 12: "W", 13: "X"})
    said = graph._stayed_behind(key("W"), [11], [10])
    assert said == (f"own history: each of {ranks_word([10, 11])} repeats one step op for op, and stopped 2 ops into a "
                    "step of its own with W of default_pg next, before the end of its loop: rank 11 issued it there, "
                    "rank 10 stayed behind")
    apart = graph._stayed_behind(key("W"), [11, 12], [10])  # 12's step is another: 3 ops into a step of 4
    assert apart is not None and "and stopped inside a step of its own with W of default_pg next" in apart
    assert graph._stayed_behind(key("W"), [11, 13], [10]) is None  # 13 issued another op
    assert graph._stayed_behind(key("W"), [11], [10, 13]) is None  # 13 idle, but not inside its loop
