"""Send/recv pairing, between aligning the groups and building the wait-for graph: in each group,
sends and recvs paired first-in-first-out per (src, dst), receives-from-any taking the sends no
named recv took. A pair whose sizes or dtypes differ is a finding (a pair cannot tell which side
is wrong); an op left without a partner is one too, and a rank blocked in it waits for its peer
in the wait-for graph (waitgraph.py). Where both ranks record completion, their completed ops
were matched already (a recv completes only with its send); where both also hold every op of
the link, they are paired in the order posted: a send completed before its recv (as NCCL
completes one that fits the receiver's buffer) is that recv's partner, and the rank left in the
recv is the one that holds the link."""

from __future__ import annotations

from collections import defaultdict

from .align import ANY_SOURCE, GroupView, P2POp
from ..types import Dump, Finding


def _done_in_batch(out: list[P2POp], into: list[P2POp]) -> tuple[list[P2POp], list[P2POp]]:
    """The oldest send and recv of a link still open, where one of them was posted in a batch
    with other p2p ops (it carries the batch's state, which its other ops may hold back) and the
    other alone: both started, they would have completed together had they been partners (a
    dump taken in a hang is not taken in the microseconds a transfer lasts), so the batched one
    is done already and its partner was an earlier op."""
    while out and into and out[0].state == into[0].state == "started" and out[0].batched != into[0].batched:
        if out[0].batched:
            out = out[1:]
        else:
            into = into[1:]
    return out, into


def _half_done(out: list[P2POp], into: list[P2POp], partner_done: dict[int, P2POp]) -> tuple[list, list, list]:
    """A link's sends and recvs, where both ranks hold every op of it, paired in the order posted:
    the pairs one end of which completed taken out (and returned, to be compared), each a pair
    whose other end was posted; the end not completed noted in `partner_done` with its partner
    (unless posted in a batch: it carries the batch's state, which another op may hold back). A
    send may complete before its recv runs (NCCL completes one that fits the receiver's buffer at
    once): the rank left in the recv holds the link, not a sender that never sent."""
    half = [(send, recv) for send, recv in zip(out, into) if (send.state == "completed") != (recv.state == "completed")]
    left = [(recv, send) if send.state == "completed" else (send, recv) for send, recv in half]
    partner_done.update((id(op), partner) for op, partner in left if not op.batched)
    taken = {id(o) for pair in half for o in pair}
    return [o for o in out if id(o) not in taken], [o for o in into if id(o) not in taken], half


def match_p2p(views: dict[tuple, GroupView], dumps: dict[int, Dump], tracking: dict[int, bool],
              unseen: frozenset[int] = frozenset()):
    """Pair sends with recvs first-in-first-out per (group, src, dst). Pairs with a rank whose
    dump says nothing of the end (`unseen`: older than its peers', or its recorder off) are left
    unmatched: never evidence against either."""
    findings: list[Finding] = []
    unmatched: set[int] = set()  # id() of P2POps with no partner
    partner_done: dict[int, P2POp] = {}  # id() of an op not completed -> its partner, completed
    notes: list[str] = []
    for view in views.values():
        sends: dict[tuple[int, int], list[P2POp]] = defaultdict(list)
        recvs: dict[tuple[int, int], list[P2POp]] = defaultdict(list)
        for track in view.tracks.values():
            for op in track.p2p:
                (sends if op.kind == "send" else recvs)[(op.src, op.dst)].append(op)
        any_recvs = {dst: ops for (src, dst), ops in recvs.items() if src == ANY_SOURCE}
        pending_any = {dst: [o for o in ops if not (tracking.get(dst) and o.state == "completed")] for dst, ops in any_recvs.items()}
        for pair in sorted(p for p in set(sends) | set(recvs) if p[0] != ANY_SOURCE):
            src, dst = pair
            if src not in dumps or dst not in dumps or src in unseen or dst in unseen:
                continue
            out, into = sends.get(pair, []), recvs.get(pair, [])
            half: list[tuple[P2POp, P2POp]] = []
            if tracking[src] and tracking[dst]:
                if not (dumps[src].wrapped or dumps[dst].wrapped):  # every op of the link held: paired in order
                    out, into, half = _half_done(out, into, partner_done)
                # completed ops were matched (a recv completes only with its send)
                out = [o for o in out if o.state != "completed"]
                into = [o for o in into if o.state != "completed"]
                out, into = _done_in_batch(out, into)
            elif dumps[src].wrapped or dumps[dst].wrapped:
                notes.append(f"p2p {src}->{dst} in {view.group.label} not checked: a buffer wrapped and completion is not recorded")
                continue
            for send, recv in [*half, *zip(out, into)]:
                if send.entry.input_sizes != recv.entry.input_sizes or send.entry.input_dtypes != recv.entry.input_dtypes:
                    findings.append(Finding(
                        "size_mismatch" if send.entry.input_sizes != recv.entry.input_sizes else "dtype_mismatch",
                        view.group, None, send.entry.p2p_seq_id, send.entry.op, (), view.group.ranks,
                        f"rank {src} sends {list(map(list, send.entry.input_sizes))} {','.join(send.entry.input_dtypes)} "
                        f"but rank {dst} receives {list(map(list, recv.entry.input_sizes))} {','.join(recv.entry.input_dtypes)}; "
                        "a pair cannot tell which side is wrong", decided=False))
                    break
            extra = out[len(into):] or into[len(out):]
            if extra and extra[0].kind == "send" and pending_any.get(dst):
                # receives-from-any on the destination take the sends no named recv took, in order;
                # where sends from several ranks wait for them, which one each takes cannot be told
                sources = {src} | {s for (s, d), ops in sends.items() if d == dst and s != src and ops}
                if len(sources) > 1:
                    findings.append(Finding(
                        "p2p_unmatched", view.group, None, extra[0].entry.p2p_seq_id, extra[0].entry.op, (), (src, dst),
                        f"rank {dst} posted receive(s) from any rank, and ranks {', '.join(map(str, sorted(sources)))} send "
                        "to it: which send each took cannot be told", decided=False))
                    continue
                taken = min(len(extra), len(pending_any[dst]))
                del pending_any[dst][:taken]
                extra = extra[taken:]
            if extra:
                first = extra[0]
                absent = first.peer
                unmatched.update(id(o) for o in extra)
                other = "recv" if first.kind == "send" else "send"
                findings.append(Finding(
                    "p2p_unmatched", view.group, None, first.entry.p2p_seq_id, first.entry.op, (absent,), (src, dst),
                    f"rank {first.entry.rank}'s {first.entry.op} (p2p #{first.entry.p2p_seq_id}) has no matching {other} "
                    f"on rank {absent} ({len(extra)} unmatched)"))
    return findings, unmatched, notes, partner_done
