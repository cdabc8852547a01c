"""What a worker sends for a dump (reading/wire.py): every value arrives as it was, and a value
many ranks share crosses the pipe whole once per worker, then by its digest alone."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from conftest import make_dump, ops, write_dumps
from frtrace.loader import compact, load_dumps, read_raw
from frtrace.reading import wire
from frtrace.reading.discover import find_dump_files
from frtrace.types import GroupMoment

WORLD = 64


def _world_dump(rank: int, tp_group: str) -> dict:
    frames = [{"name": "train_step", "filename": "train.py", "line": 88}]
    raw = make_dump(ops(4, pg=tp_group, desc="tp", frames=frames) + ops(3, frames=frames))
    raw["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(WORLD)))},
                        tp_group: {"name": tp_group, "desc": "tp", "ranks": str([rank - rank % 2, rank - rank % 2 + 1])}}
    return raw


@pytest.fixture()
def parts(tmp_path):
    write_dumps(tmp_path, {r: _world_dump(r, str(1 + r // 2)) for r in range(6)})
    found = []
    for rank in range(6):
        path = str(tmp_path / f"nccl_trace_rank_{rank}")
        raw, file_format = read_raw(path)
        found.append(compact(raw, rank, path, file_format))
    return found


def _sizes(packed: tuple) -> list[int]:
    """The bytes of each shared value a packed dump carries whole (0 where it names it alone)."""
    (_, kinds, new_kinds), states, (configs, new_configs), stacks = packed[5]
    sent = dict((*new_kinds, *new_configs))
    return [len(sent.get(digest, b"")) for digest in (*(kinds or ()), *configs)] + [len(blob or b"") for _, blob in (states, stacks)]


def _sent(named: tuple) -> dict:
    """digest -> blob of the values a (digests, sent whole) pair names, None where named alone."""
    digests, new = named
    sent = dict(new)
    return {digest: sent.get(digest) for digest in digests}


def test_a_shared_value_is_sent_whole_once_then_by_its_digest(parts):
    packer = wire.Packer()
    first, second = packer.pack(parts[0]), packer.pack(parts[1])  # ranks 0 and 1: one tp group, the same kinds
    world = first[5][2][0][0]
    world_blob = _sent(first[5][2])[world]
    assert world_blob is not None and len(world_blob) > WORLD  # the world's 64 ranks, in full
    assert _sizes(second) == [0] * len(_sizes(second))  # everything rank 1 shares with rank 0: digests only
    third = packer.pack(parts[2])  # rank 2: another tp group, so other kinds and config; the world again by digest
    assert list(_sent(third[5][2]).items())[0] == (world, None)
    assert list(_sent(third[5][2]).values())[1] is not None and third[5][0][1] is not None
    assert _sent(wire.Packer().pack(parts[1])[5][2])[world] == world_blob  # a new worker has sent nothing yet


def test_the_main_process_gets_every_value_back_and_one_object_per_shared_value(parts):
    packer, unpacker = wire.Packer(), wire.Unpacker()
    dumps = [unpacker.dump(pickle.loads(pickle.dumps(packer.pack(part), -1))) for part in parts]
    for part, dump in zip(parts, dumps):
        assert (dump.rank, dump.path, dump.version, dump.notes, dump.restarted) == (
            part.rank, part.path, part.version, part.notes, part.restarted)
        assert dump.group_configs == part.group_configs and dump.stacks == part.stacks
        assert dump.entries == part.entries and dump.entries.runs == part.entries.runs
        assert dump.moments == part.moments and {type(m) for m in dump.moments} == {GroupMoment}  # crossed as plain tuples
    assert all(part.moments for part in parts)
    worlds = {id(d.group_configs[0]) for d in dumps}
    assert len(worlds) == 1  # one config object for the world, however many dumps list it
    assert dumps[0].entries.kinds is dumps[1].entries.kinds  # same tp group, same kinds: one tuple
    assert dumps[0].entries.kinds is not dumps[2].entries.kinds
    assert dumps[0].entries.kinds[-1] is dumps[2].entries.kinds[-1]  # a world kind: one object in both tuples


def test_two_workers_each_send_a_value_whole_and_the_main_process_keeps_one(parts):
    unpacker = wire.Unpacker()
    one, two = wire.Packer(), wire.Packer()
    a = unpacker.dump(one.pack(parts[0]))
    b = unpacker.dump(two.pack(parts[1]))
    c = unpacker.dump(one.pack(parts[2]))
    assert a.group_configs[0] is b.group_configs[0] is c.group_configs[0]


@pytest.mark.parametrize("left_out", ["the kinds", "a kind", "the states", "a config"])
def test_a_digest_never_sent_whole_is_refused(parts, left_out):
    packed = wire.Packer().pack(parts[0])
    (digest, kinds, new_kinds), states, (configs, new_configs), stacks = packed[5]
    if left_out == "the kinds":
        kinds = None
    elif left_out == "a kind":
        new_kinds = new_kinds[1:]
    elif left_out == "a config":
        new_configs = new_configs[:-1]
    else:
        states = (states[0], None)
    unsent = packed[:5] + (((digest, kinds, new_kinds), states, (configs, new_configs), stacks),) + packed[6:]
    with pytest.raises(ValueError, match="never sent"):
        wire.Unpacker().dump(unsent)


def test_a_rank_of_another_group_sends_only_the_kinds_it_does_not_share(parts):
    """Rank 2's tp group is not rank 0's: its tuple of kinds is its own, but its world kinds
    cross as digests alone."""
    packer = wire.Packer()
    first, third = packer.pack(parts[0]), packer.pack(parts[2])
    kinds_0, kinds_2 = _sent(first[5][0][1:]), _sent(third[5][0][1:])
    assert all(blob is not None for blob in kinds_0.values())
    assert [blob is None for blob in kinds_2.values()] == [kind.pg_name == "0" for kind in parts[2].entries.kinds]
    assert any(kind.pg_name == "0" for kind in parts[2].entries.kinds)


def test_a_whole_load_in_workers_reads_as_in_one_process(tmp_path):
    write_dumps(tmp_path, {r: _world_dump(r, str(1 + r // 2)) for r in range(8)})
    discovery = find_dump_files(str(tmp_path))
    in_workers = load_dumps(discovery, workers=2).dumps
    in_process = load_dumps(discovery, workers=0).dumps
    assert list(in_workers) == list(range(8))
    for rank, dump in in_workers.items():
        other = in_process[rank]
        assert dump.entries == other.entries and dump.group_configs == other.group_configs and dump.stacks == other.stacks
    assert len({id(d.group_configs[0]) for d in in_workers.values()}) == 1


def test_times_not_asked_for_stay_in_the_worker_and_read_as_not_loaded(parts):
    packer, unpacker = wire.Packer(times=False), wire.Unpacker()
    packed = packer.pack(parts[0])
    assert len(pickle.dumps(packed, -1)) < len(pickle.dumps(wire.Packer().pack(parts[0]), -1))
    entries = unpacker.dump(pickle.loads(pickle.dumps(packed, -1))).entries
    whole = parts[0].entries
    assert whole.has_times and not entries.has_times and len(entries.time_created_ns) == len(whole)
    assert whole[0].time_created_ns is not None  # make_dump writes times: there were some to leave out
    untimed = [e._replace(time_created_ns=None, time_started_ns=None, time_completed_ns=None, duration_ms=None) for e in whole]
    assert list(entries) == untimed and [entries[i] for i in range(len(whole))] == untimed
    assert entries.at([2, 0]) == [untimed[2], untimed[0]]
    for column in (entries.time_created_ns, entries.time_started_ns, entries.time_completed_ns, entries.duration_ms):
        with pytest.raises(LookupError, match="times were not loaded"):
            column[0]
        with pytest.raises(LookupError):
            list(column)


def test_a_whole_load_without_times_reads_as_with_them_but_for_the_times(tmp_path):
    write_dumps(tmp_path, {r: _world_dump(r, str(1 + r // 2)) for r in range(4)})
    discovery = find_dump_files(str(tmp_path))
    for workers in (0, 2):
        timed, untimed = load_dumps(discovery, workers=workers).dumps, load_dumps(discovery, workers=workers, times=False).dumps
        for rank, dump in timed.items():
            assert dump.entries.has_times and not untimed[rank].entries.has_times
            assert [e[:15] + e[19:] for e in dump.entries] == [e[:15] + e[19:] for e in untimed[rank].entries]
            assert {e[15:19] for e in untimed[rank].entries} == {(None,) * 4}


COLUMNS = ("kind", "state", "record_id", "collective_seq_id", "p2p_seq_id", "stack_id")


def test_a_column_ranks_hold_alike_is_sent_whole_once_and_is_one_object_in_the_main_process(parts):
    packer, unpacker = wire.Packer(), wire.Unpacker()
    sent = [pickle.dumps(packer.pack(part), -1) for part in parts]
    dumps = [unpacker.dump(pickle.loads(blob)) for blob in sent]
    for part, dump in zip(parts, dumps):
        assert dump.entries == part.entries and dump.entries.runs == part.entries.runs
    for name in COLUMNS:  # every rank of _world_dump records the same ops in the same order
        assert len({id(getattr(d.entries, name)) for d in dumps}) == 1, name
    runs = [d.entries.runs[name] for d in dumps for name in d.entries.runs if name == "0"]
    assert len({id(run.positions) for run in runs}) == 1 and len({id(run.states) for run in runs}) == 1
    whole = sum(len(bytes(getattr(parts[0].entries, name))) for name in COLUMNS)
    assert whole > 40 and len(sent[1]) < len(sent[0]) - whole  # rank 1 names each column by its digest alone


def test_a_column_that_differs_is_its_own_and_two_workers_columns_are_one_object(parts):
    unpacker, one, two = wire.Unpacker(), wire.Packer(), wire.Packer()
    first = unpacker.dump(one.pack(parts[0]))
    other = parts[1].entries
    changed = type(other.state)(other.state[:-1]) + type(other.state)([other.state[-1] ^ 1])
    moved = replace(parts[1], entries=replace(other, state=changed, runs=None))
    second = unpacker.dump(one.pack(moved))
    assert second.entries.state == changed and second.entries.state is not first.entries.state
    assert second.entries.kind is first.entries.kind and second.entries.runs is None
    third = unpacker.dump(two.pack(parts[2]))  # the other worker sends each column whole: the first object is kept
    assert third.entries.kind is first.entries.kind and third.entries.record_id is first.entries.record_id


def test_a_column_named_twice_in_one_dump_by_two_objects_unpacks_in_order(parts):
    """A run's codes equal to a column of the dump, yet another object: the first named is sent
    whole and the second by its digest, and the main process reads them in the order sent."""
    entries = parts[0].entries
    runs = {name: run._replace(states=type(run.states)(run.states)) for name, run in entries.runs.items()}
    copied = replace(parts[0], entries=replace(entries, state=type(entries.state)(entries.state), runs=runs))
    dump = wire.Unpacker().dump(pickle.loads(pickle.dumps(wire.Packer().pack(copied), -1)))
    assert dump.entries == entries and dump.entries.runs == entries.runs


def test_a_column_digest_never_sent_whole_is_refused(parts):
    packed = wire.Packer().pack(parts[0])
    times, digest, body, names = packed[4]
    for unsent in ((times, digest, None, names), (times, None, ((body[0][0], None),) + body[1:], names)):
        with pytest.raises(ValueError, match="never sent"):
            wire.Unpacker().dump(packed[:4] + (unsent,) + packed[5:])


def test_a_dump_whose_columns_are_all_known_sends_one_digest_for_them(parts):
    packer = wire.Packer()
    first, other = packer.pack(parts[0]), packer.pack(parts[2])  # rank 2: another tp group's name, the same columns
    assert first[4][2] is not None and other[4][1] == first[4][1] and other[4][2] is None
    unpacker = wire.Unpacker()
    one, two = unpacker.dump(first), unpacker.dump(other)
    assert two.entries == parts[2].entries and two.entries.runs == parts[2].entries.runs
    assert list(two.entries.runs) == list(parts[2].entries.runs) != list(one.entries.runs)  # the rank's own names
    assert all(a is b for a, b in zip(one.entries.runs.values(), two.entries.runs.values()))  # one Run each
