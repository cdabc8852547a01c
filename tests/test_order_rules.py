"""Program order's votes (analysis/order.py), on a stand-in of the graph it is a mixin of: where each
rank issued each op is given, so each rule is asked of the positions it decides on (issue 52: the
mutation run's survivors of order.py, session 33)."""

from __future__ import annotations

from frtrace.analysis.order import _NOT_REACHED, ProgramOrder

A, B, C = (("coll", "g", seq) for seq in (1, 2, 3))
SEND = ("p2p", "g", 0, 1)


class Order(ProgramOrder):
    """`positions`: (rank, op) -> the rank's buffer index of the op, or _NOT_REACHED; unknown where
    absent. Every rank named there has a dump, so votes."""

    def __init__(self, positions: dict, op_of: dict | None = None, awaited: dict | None = None) -> None:
        self.positions = positions
        self.dumps = {rank: None for rank, _ in positions}
        self.op_of = op_of or {}
        self.awaited = awaited or {}
        self.weak: set = set()
        self._unordered: set = set()

    def _position(self, rank: int, op: tuple) -> int | None:
        return self.positions.get((rank, op))

    def _awaited_by(self, rank: int) -> list[tuple]:
        return self.awaited.get(rank, [])

    def _keeps_step(self, rank: int, awaited: list[tuple]) -> bool:
        return False


def test_one_voter_that_issued_both_ops_orders_them():
    order = Order({(0, A): 3, (0, B): 7})
    assert order._order_votes(A, B, set()) == 1 and order._order_votes(B, A, set()) == -1
    assert order._first_in_program([B, A], set()) == A  # one vote is enough
    assert order._first_in_program([B, A], {0}) is None  # the one voter in the cycle: nobody votes


def test_a_lone_witness_that_never_reached_the_other_op_is_no_vote_but_two_are():
    lone = Order({(0, A): 3, (0, B): _NOT_REACHED})
    assert lone._votes(A, B, [0]) == [1] and lone._order_votes(A, B, set()) == 0
    two = Order({(0, A): 3, (0, B): _NOT_REACHED, (1, A): 4, (1, B): _NOT_REACHED})
    assert two._order_votes(A, B, set()) == 2 and two._first_in_program([B, A], set()) == A


def test_the_first_of_three_ops_is_the_one_before_both_others():
    order = Order({(0, A): 1, (0, B): 2, (0, C): 3, (1, A): 5, (1, B): 6, (1, C): 8})
    assert order._first_in_program([C, B, A], set()) == A
    tied = Order({(0, A): 2, (0, B): 1, (0, C): 3, (1, A): 1, (1, B): 2, (1, C): 3})  # A and B: one vote each way
    assert tied._first_in_program([C, B, A], set()) is None


def test_only_ranks_blocked_in_a_collective_are_asked_whether_they_deviated():
    positions = {(0, A): 1, (0, B): 2, (1, A): 1, (1, B): 2}  # ranks 0 and 1 show A before B
    order = Order(positions, op_of={5: B, 6: None, 7: SEND}, awaited={5: [A], 6: [A], 7: [A]})
    assert order._deviators_by_order({5, 6, 7}, set()) == ({5: A}, set())
    assert order._unordered == set()  # 7, blocked in a send, is asked nothing
    in_order = Order(positions, op_of={5: A}, awaited={5: [B]})
    assert in_order._deviators_by_order({5}, set()) == ({}, {5})
