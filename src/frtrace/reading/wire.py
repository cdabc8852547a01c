"""What a worker sends the main process for one dump, and how the main process takes it.

Most of a dump is its columns: arrays and bytes, which cross the pipe as buffers. The rest are
values that many ranks hold alike: the kinds of their entries, their states, their group configs
(every rank lists the default group, all of its ranks) and their stacks. Sent whole with every
dump, these made the main process's cost per dump grow with the world: a 16,384-rank default
group is 16,384 ints to unpickle, hash and compare in each of 16,384 dumps. So each such value is
named by a digest of its content, sent in full only the first time its worker meets it, and the
main process keeps one object per digest: it decodes a value once per worker at most, and its
cost per dump stays flat whatever the size of the job. A dump's kinds are named one by one as
well as together: a kind names its group, so in a job of tensor- and data-parallel groups no two
ranks' tuples of kinds may be alike, yet each kind is shared by every rank of its group.

The columns themselves are named the same way, by a digest of their bytes: ranks running one
program hold the same record ids, seq ids, kind and state codes and runs, entry for entry (all but
the few that differ where the job stopped), and the main process then receives, keeps and writes
one object for each distinct column, however many ranks hold it (a database pickles a shared
object once). The outputs are the same whichever worker read which file: the main process keeps
the first object of each digest, and equal columns are the same object in every run.

Times (three timestamps and a duration per entry, 64 of a 2,000-entry dump's 107 kB of columns)
cross only where an output reads them: the report, the JSON, the Markdown and the database never
do, and a column the main process never takes costs it nothing to receive or keep.

The digest is BLAKE2b over the value's marshalled form (plain tuples, strings and ints that the
worker itself built from a checked dump): equal digests are equal values. marshal may write two
equal values differently (a string shared or not); they then only get two digests.
"""

from __future__ import annotations

import marshal
from array import array
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from ..types import Dump, EntryColumns, Frame, GroupConfig, GroupMoment, Kind, Unread
from .runs import Run

try:  # hashlib's own: importing hashlib loads OpenSSL's bindings as well (3 ms of every run)
    from _blake2 import blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b

_DIGEST_BYTES = 16
_COLUMN = b"frtrace column"  # the digests' personalization: a column's never equals a marshalled value's
_COLUMNS = b"frtrace columns"  # ... nor a dump's columns' together
_KINDS = b"frtrace kinds"  # ... nor a dump's kinds' together
_KEPT_CONFIGS = 1024  # configs whose digests a worker remembers by identity (each holds its ranks)


def _plain_stacks(stacks: tuple[tuple[Frame, ...], ...]) -> tuple:
    return tuple(tuple((f.name, f.filename, f.line) for f in stack) for stack in stacks)


class Packer:
    """The worker's side: a dump as one plain tuple, each shared value sent whole once, and
    the entries' times only where `times`."""

    def __init__(self, times: bool = True) -> None:
        self.times = times
        self.sent: set[bytes] = set()
        self.config_digests: dict[int, tuple[GroupConfig, bytes]] = {}  # id -> the config (kept: its id stays its own), digest

    def _shared(self, plain: tuple) -> tuple[bytes, bytes | None]:
        blob = marshal.dumps(plain)
        digest = blake2b(blob, digest_size=_DIGEST_BYTES).digest()
        if digest in self.sent:
            return digest, None
        self.sent.add(digest)
        return digest, blob

    def _kinds(self, kinds: tuple[Kind, ...]) -> tuple[bytes, tuple | None, tuple]:
        """A dump's kinds as (digest of the tuple, each kind's digest, those sent whole now) the
        first time the tuple is met, else (digest, None, ()): ranks of other groups hold other
        tuples (a kind names its group), yet share each kind with their group's ranks."""
        digests, new = _split(self._shared(tuple(kind)) for kind in kinds)
        digest = blake2b(b"".join(digests), digest_size=_DIGEST_BYTES, person=_KINDS).digest()
        if digest in self.sent:  # and so was each of its kinds: `new` is empty
            return digest, None, ()
        self.sent.add(digest)
        return digest, digests, new

    def _config(self, config: GroupConfig) -> tuple[bytes, bytes | None]:
        """A config, by its digest: the loader gives the same object for the same ranks text
        (every dump's default group), whose digest is then made once."""
        known = self.config_digests.get(id(config))
        if known is not None and known[0] is config:  # sent whole when its digest was made
            return known[1], None
        plain = (config.name, config.desc, config.ranks)
        named = self._shared(plain)
        if len(self.config_digests) >= _KEPT_CONFIGS:
            self.config_digests.clear()
        self.config_digests[id(config)] = (config, named[0])
        return named

    def _column(self, column: Any, digests: dict[int, bytes]) -> tuple:
        """A column of bytes or an array as (digest, itself the first time, else None); any
        other (a range, a tuple holding None) as (None, itself). `digests`: id -> digest of the
        columns of this dump already named (a run's codes are often its dump's own column)."""
        if not isinstance(column, (bytes, array)):
            return None, column
        digest = digests.get(id(column))
        if digest is None:
            hashed = blake2b(column, digest_size=_DIGEST_BYTES, person=_COLUMN)
            hashed.update(b"b" if isinstance(column, bytes) else column.typecode.encode())
            digest = digests[id(column)] = hashed.digest()
        if digest in self.sent:
            return digest, None
        self.sent.add(digest)
        return digest, column

    def _columns(self, body: tuple) -> tuple[bytes | None, tuple | None]:
        """A dump's columns and runs (body, each column named) as (digest, body the first time,
        else None): ranks running one program hold them all alike, and then send 16 bytes for
        them. (None, body) where a column is neither bytes nor an array nor a range nor a plain
        tuple (none is)."""
        try:
            plain = marshal.dumps((*map(_key, body[:6]), None if body[6] is None else
                                   tuple((_key(p), first, _key(k), _key(s)) for p, first, k, s in body[6])))
        except ValueError:
            return None, body
        digest = blake2b(plain, digest_size=_DIGEST_BYTES, person=_COLUMNS).digest()
        if digest in self.sent:
            return digest, None
        self.sent.add(digest)
        return digest, body

    def pack(self, part: Any) -> tuple:
        """A loader.CompactDump as the tuple Unpacker.dump takes."""
        entries = part.entries
        digests: dict[int, bytes] = {}

        def named(column: Any) -> tuple:
            return self._column(column, digests)

        times = None  # each rank's own: named one by one, first
        if self.times:
            times = tuple(map(named, (entries.time_created_ns, entries.time_started_ns, entries.time_completed_ns,
                                      entries.duration_ms)))
        body = (*map(named, (entries.kind, entries.state, entries.record_id, entries.collective_seq_id,
                             entries.p2p_seq_id, entries.stack_id)),
                None if entries.runs is None else
                tuple((named(run.positions), run.first_seq, named(run.kinds), named(run.states)) for run in entries.runs.values()))
        columns = (times, *self._columns(body), None if entries.runs is None else tuple(entries.runs))
        shared = (self._kinds(entries.kinds), self._shared(tuple(entries.states)),
                  _split(map(self._config, part.group_configs)), self._shared(_plain_stacks(part.stacks)))
        return (part.rank, part.path, part.file_format, part.version, columns, shared, part.notes,
                part.health, part.restarted, part.seq_counter, tuple(map(tuple, part.moments)), part.recorder_off)


def _split(named: Iterable[tuple[bytes, bytes | None]]) -> tuple[tuple[bytes, ...], tuple[tuple[bytes, bytes], ...]]:
    """Values each named by _shared as (their digests, (digest, blob) of those sent whole now): the
    main process takes the first in one look-up each, and decodes the second (Unpacker._named)."""
    named = tuple(named)
    return tuple(digest for digest, _ in named), tuple(pair for pair in named if pair[1] is not None)


def _key(named: tuple) -> Any:
    """What a named column's digest says of it, for the digest of a dump's columns: its own
    digest, or the value itself where it has none (a range as its three numbers)."""
    digest, value = named
    if digest is not None:
        return digest
    if isinstance(value, range):
        return ("range", value.start, value.stop, value.step)
    if type(value) is tuple:
        return value
    raise ValueError("a column of no known type")


# a GroupMoment from the plain tuple Packer.pack made of one (all its fields): made in C, where
# GroupMoment._make is a call of Python's (2 us of each dump's 11 to take, for its three groups)
_moment = partial(tuple.__new__, GroupMoment)


def _stacks(plain: tuple) -> tuple:
    return tuple(tuple(Frame(*f) for f in stack) for stack in plain)


class Unpacker:
    """The main process's side: one object per distinct shared value, across every dump of a load
    (and each kind, state and config interned by value too, where two values hold some alike)."""

    def __init__(self) -> None:
        self.by_digest: dict[bytes, tuple] = {}
        self.values: dict = {}
        self.unread: dict[int, tuple[Unread, ...]] = {}  # a count of entries -> the four times' columns not taken

    def _unread(self, length: int) -> tuple[Unread, ...]:
        found = self.unread[length] = (Unread(length),) * 4  # one object for the dumps of one length: it holds only that
        return found

    def _interned(self, items: Any) -> tuple:
        return tuple(self.values.setdefault(item, item) for item in items)

    def _shared(self, digest: bytes, blob: bytes | None, make: Callable[[tuple], tuple]) -> tuple:
        found = self.by_digest.get(digest)
        if found is None:
            if blob is None:  # never: a worker sends a value whole before naming it alone
                raise ValueError("a worker named a value it never sent")
            found = self.by_digest[digest] = make(marshal.loads(blob))
        return found

    def _named(self, digests: tuple[bytes, ...], new: tuple[tuple[bytes, bytes], ...], make: Callable[[tuple], tuple]) -> tuple:
        """The values named by `digests` (Packer: _split), `new` decoded first: sent whole by now."""
        for digest, blob in new:
            self._shared(digest, blob, make)
        try:
            return tuple(map(self.by_digest.__getitem__, digests))
        except KeyError:  # never: a worker sends a value whole before naming it alone
            raise ValueError("a worker named a value it never sent") from None

    def _kinds(self, digest: bytes, digests: tuple[bytes, ...] | None, new: tuple) -> tuple[Kind, ...]:
        """A dump's kinds, from Packer._kinds' answer: one tuple for each digest, one object for
        each kind."""
        found = self.by_digest.get(digest)
        if found is None:
            if digests is None:  # never: a worker sends a dump's kinds named one by one before naming them alone
                raise ValueError("a worker named kinds it never sent")
            found = self.by_digest[digest] = self._named(digests, new, self._kind)
        return found

    def _kind(self, plain: tuple) -> Kind:
        kind = Kind._make(plain)
        return self.values.setdefault(kind, kind)

    def _config(self, plain: tuple) -> GroupConfig:
        config = GroupConfig(*plain)
        return self.values.setdefault(config, config)

    def _column(self, named: tuple) -> Any:
        digest, column = named
        if digest is None:
            return column
        found = self.by_digest.get(digest)
        if found is None:
            if column is None:  # never: a worker sends a column whole before naming it alone
                raise ValueError("a worker named a column it never sent")
            found = self.by_digest[digest] = column
        return found

    def _body(self, digest: bytes | None, body: tuple | None) -> tuple:
        """A dump's columns and runs, from Packer._columns' answer: one tuple for each digest."""
        if digest is not None:
            found = self.by_digest.get(digest)
            if found is not None:
                return found
            if body is None:  # never: a worker sends a dump's columns whole before naming them alone
                raise ValueError("a worker named columns it never sent")
        column = self._column  # in the order Packer.pack named them: each is sent whole where first named
        resolved = (*map(column, body[:6]), None if body[6] is None else
                    tuple(Run(column(p), first, column(k), column(s)) for p, first, k, s in body[6]))
        if digest is not None:
            self.by_digest[digest] = resolved
        return resolved

    def dump(self, packed: tuple) -> Dump:
        """The Dump a Packer's tuple describes."""
        (rank, path, file_format, version, columns, shared, notes, health, restarted, seq_counter, moments,
         recorder_off) = packed
        (kinds_at, states_at, configs_at, stacks_at) = shared
        kinds = self._kinds(*kinds_at)
        states = self._shared(*states_at, self._interned)
        configs = self._named(*configs_at, self._config)
        stacks = self._shared(*stacks_at, _stacks)
        times, digest, body, names = columns
        timed = tuple(map(self._column, times)) if times else None  # before the body: Packer.pack named them first
        kind, state, record_id, collective_seq_id, p2p_seq_id, stack_id, runs = self._body(digest, body)
        created, started, completed, duration = timed or self.unread.get(len(kind)) or self._unread(len(kind))
        entries = EntryColumns(rank, kinds, kind, states, state, record_id, collective_seq_id, p2p_seq_id, created, started,
                               completed, duration, stack_id, None if runs is None else dict(zip(names, runs)))
        return Dump(rank, path, file_format, version, entries, configs, stacks, notes, health, restarted, seq_counter,
                    tuple(map(_moment, moments)), recorder_off)
