"""Process-group membership: read from pg_config where it is useful, inferred where it is not.

Real gloo dumps carry a placeholder pg_config, so membership then comes from the entries of all
ranks: the default group spans the world, and a subgroup holds the ranks that recorded ops in it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from math import prod

from ..types import Dump, Group, GroupConfig, Kind

_GATHER_OPS = frozenset({"all_gather", "_all_gather_base", "all_gather_into_tensor", "all_gather_into_tensor_coalesced"})
_SCATTER_OPS = frozenset({"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced"})


@dataclass(frozen=True, slots=True)
class GroupTable:
    groups: tuple[Group, ...]
    by_rank: dict[tuple[int, str], Group]  # (global rank, pg name) -> its group
    world: tuple[int, ...]
    warnings: tuple[str, ...]
    # keys of groups inferred with fewer members than their shapes or same-desc siblings say: the
    # others are ranks without evidence (no dump, a recorder off) that could not be placed
    short: frozenset[tuple] = frozenset()

    def group_of(self, rank: int, pg_name: str) -> Group | None:
        return self.by_rank.get((rank, pg_name))


def is_default_group(name: str, desc: str) -> bool:
    """Whether a group is the job's world as PyTorch names it: desc "default_pg", or group "0"
    without a desc."""
    return desc == "default_pg" or (name == "0" and desc in ("", "undefined"))


def distinct_configs(dumps: dict[int, Dump]) -> Iterable[GroupConfig]:
    """Every pg_config the dumps hold, each object once: the loader shares one object among equal
    configs, so a config every rank lists is looked at once, not once a rank."""
    return {id(c): c for d in dumps.values() for c in d.group_configs}.values()


def replica_size(dumps: dict[int, Dump]) -> int | None:
    """The size of a torchft replica group, where the dumps are torchft's: each replica group runs
    as its own job, so every rank's default group lists the replica-LOCAL ranks 0..g-1, and the
    ranks beyond g (which those lists leave out) fill at least one other replica. None otherwise
    (one rank's odd list, a stray file of a higher rank: not a replica)."""
    lists = {c.ranks for c in distinct_configs(dumps) if c.desc == "default_pg"}
    if len(lists) != 1:
        return None
    (local,) = lists
    size = len(local)
    if local != tuple(range(size)) or all(r < size for r in dumps):
        return None
    replicas = Counter(r // size for r in dumps if r >= size)
    return size if any(count == size for count in replicas.values()) else None


def _kinds_counted(dumps: dict[int, Dump]) -> list[tuple[Kind, int]]:
    """Each kind of the dumps with how many times they list it, in the order first listed, by
    identity: the loader shares one object among equal kinds (wire.Unpacker), so a kind that
    every rank lists is looked at once, not once a rank."""
    listed = list(chain.from_iterable(dump.entries.kinds for dump in dumps.values()))
    by_id = dict(zip(map(id, listed), listed))
    return [(by_id[key], count) for key, count in Counter(map(id, listed)).items()]


def _size_hints(kinds: list[tuple[Kind, int]]) -> dict[str, int]:
    """Group sizes implied by the ops' own shapes, per group name: an all_gather's output is n
    times its input, a reduce_scatter's input n times its output. The size most of a group's
    ops imply, so that one rank's wrong size does not resize its group."""
    votes: dict[str, Counter] = defaultdict(Counter)
    for kind, count in kinds:
        if not (kind.input_sizes and kind.output_sizes):
            continue
        numel_in = sum(prod(s) for s in kind.input_sizes)
        numel_out = sum(prod(s) for s in kind.output_sizes)
        if kind.op in _GATHER_OPS and numel_in and numel_out % numel_in == 0:
            votes[kind.pg_name][numel_out // numel_in] += count
        elif kind.op in _SCATTER_OPS and numel_out and numel_in % numel_out == 0:
            votes[kind.pg_name][numel_in // numel_out] += count
    return {name: counts.most_common(1)[0][0] for name, counts in votes.items()}


def _entry_descs(kinds: list[tuple[Kind, int]]) -> dict[str, str]:
    """Group name -> the desc most of its entries' process_group give (other than "" and "undefined")."""
    votes: dict[str, Counter] = defaultdict(Counter)
    for kind, count in kinds:
        if kind.pg_desc not in ("", "undefined"):
            votes[kind.pg_name][kind.pg_desc] += count
    return {name: counts.most_common(1)[0][0] for name, counts in votes.items()}


def outvoted_configs(dumps: dict[int, Dump]) -> tuple[set[tuple[int, int]], list[str]]:
    """The (rank, id of its config) pairs whose membership most ranks' configs contradict, and a
    note for each (by id: a config's hash is its ranks', and the default group's are the world).

    A group's name with two member lists that share a rank is one group described two ways (rank 3
    lists 17 ranks where 15 others list 16): the list most ranks give stands, the others are set
    aside as notes, never evidence against anyone. On a tie no list stands, and membership is
    inferred from the entries. Lists that share no rank are different groups of one name
    (split_group), and all stand."""
    # the loader shares one object among equal configs: each distinct list is hashed once, not once a rank
    distinct = distinct_configs(dumps)
    if len({(c.name, c.ranks) for c in distinct}) == len({c.name for c in distinct}):  # no name lists two: none outvoted
        return set(), []
    by_object: dict[int, list[tuple[int, GroupConfig]]] = defaultdict(list)
    for rank, dump in dumps.items():
        for config in dump.group_configs:
            by_object[id(config)].append((rank, config))
    holders: dict[str, dict[tuple[int, ...], list[tuple[int, GroupConfig]]]] = defaultdict(lambda: defaultdict(list))
    for held in by_object.values():
        config = held[0][1]
        holders[config.name][config.ranks].extend(held)
    outvoted: set[tuple[int, int]] = set()
    notes: list[str] = []
    for name, lists in holders.items():
        if len(lists) < 2:
            continue
        for cluster in _overlapping(list(lists)):
            if len(cluster) < 2:
                continue
            ranked = sorted(cluster, key=lambda ranks: -len(lists[ranks]))
            winner = ranked[0] if len(lists[ranked[0]]) > len(lists[ranked[1]]) else None
            for ranks in ranked:
                if ranks == winner:
                    continue
                outvoted.update((rank, id(config)) for rank, config in lists[ranks])
                who = sorted(rank for rank, _ in lists[ranks])
                label = lists[ranks][0][1].desc or name
                if winner is None:
                    notes.append(f"the pg_configs of {_ranks_word(who)} list {len(ranks)} ranks in {label} (pg {name}), "
                                 "where other ranks' configs list others as often: no list is used, membership is "
                                 "inferred from the entries")
                else:
                    notes.append(f"{_ranks_word(who)}'s pg_config lists {len(ranks)} ranks in {label} (pg {name}) where "
                                 f"{len(lists[winner])} other ranks' configs list {len(winner)}: their list is used, "
                                 f"{'its' if len(who) == 1 else 'their'} config is not")
    return outvoted, notes


def _overlapping(member_lists: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """The lists in clusters of lists that share ranks, each list in one cluster."""
    cluster_of: dict[int, int] = {}  # rank -> cluster index
    clusters: list[list[tuple[int, ...]]] = []
    for ranks in sorted(member_lists, key=len, reverse=True):
        joined = sorted({cluster_of[r] for r in ranks if r in cluster_of})
        if not joined:
            target = len(clusters)
            clusters.append([])
        else:
            target = joined[0]
            for other in joined[1:]:  # this list links clusters: merge them into the first
                for moved in clusters[other]:
                    cluster_of.update((r, target) for r in moved)
                clusters[target].extend(clusters[other])
                clusters[other] = []
        clusters[target].append(ranks)
        cluster_of.update((r, target) for r in ranks)
    return [c for c in clusters if c]


def _ranks_word(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def resolve_groups(
    dumps: dict[int, Dump],
    ranks_named: frozenset[int] = frozenset(),
    ft_group_world_size: int | None = None,
) -> GroupTable:
    """Every process group of the job, and which group each rank's pg name refers to.

    `ft_group_world_size`: torchft replica groups; their default group lists replica-local ranks,
    which are shifted to global ranks (replica id = global rank // group world size).
    """
    warnings: list[str] = []
    groups: dict[tuple[str, tuple[int, ...]], Group] = {}
    by_rank: dict[tuple[int, str], Group] = {}

    def replica_base(rank: int) -> int:
        return (rank // ft_group_world_size) * ft_group_world_size if ft_group_world_size else 0

    # 1. configured groups: the membership most ranks agree on; a desc pg_config leaves empty
    # (PyTorch 2.15 lists split_group groups under a hash with desc "") is the one the entries say
    outvoted, disagreements = outvoted_configs(dumps)
    warnings.extend(disagreements)
    kinds = _kinds_counted(dumps)
    entry_descs = _entry_descs(kinds)
    group_of_config: dict[int, Group] = {}  # the loader shares one object among equal configs: each list hashed once
    for rank, dump in dumps.items():
        for config in dump.group_configs:
            if outvoted and (rank, id(config)) in outvoted:
                continue
            shifted = ft_group_world_size and config.desc == "default_pg"
            group = None if shifted else group_of_config.get(id(config))
            if group is None:
                ranks = tuple(r + replica_base(rank) for r in config.ranks) if shifted else config.ranks
                desc = config.desc if config.desc not in ("", "undefined") else entry_descs.get(config.name, config.desc)
                group = groups.setdefault((config.name, ranks), Group(config.name, desc, ranks))
                if not shifted:
                    group_of_config[id(config)] = group
            by_rank[(rank, config.name)] = group

    # 2. names used in entries that the rank's config does not describe: a group the other ranks'
    # configs name and list this rank in (its own pg_config is missing, empty or broken), else inferred
    configured: dict[str, list[Group]] = defaultdict(list)
    for group in groups.values():
        configured[group.name].append(group)
    borrowed: set[int] = set()
    users: dict[str, set[int]] = defaultdict(set)
    descs: dict[str, str] = {}
    for rank, dump in dumps.items():
        seen: set[str] = set()
        for kind in dump.entries.kinds:  # in the order of their first entries
            if kind.pg_name in seen:
                continue
            seen.add(kind.pg_name)
            if (rank, kind.pg_name) in by_rank:
                continue
            listing = [g for g in configured.get(kind.pg_name, ()) if rank in g.ranks]
            if len(listing) == 1:
                by_rank[(rank, kind.pg_name)] = listing[0]
                borrowed.add(rank)
            else:
                users[kind.pg_name].add(rank)
                if descs.get(kind.pg_name, "undefined") == "undefined":
                    descs[kind.pg_name] = kind.pg_desc
    borrowed.difference_update(rank for rank, _ in outvoted)  # said by their own note
    if borrowed:
        warnings.append(f"rank(s) {', '.join(map(str, sorted(borrowed)))}: pg_config missing, empty or without some "
                        "groups; membership taken from the other ranks' configs, which list them")

    hints = _size_hints(kinds)
    highest = max([*dumps, *ranks_named, *chain.from_iterable(g.ranks for g in groups.values())], default=-1)
    world_size = highest + 1
    for name in users:
        if is_default_group(name, descs.get(name, "")) and not ft_group_world_size:
            world_size = max(world_size, hints.get(name, 0))
    if not ft_group_world_size:  # no group is larger than the world
        world_size = max(world_size, *hints.values(), 0)
    family_size = _sibling_world(users, descs, hints)
    if family_size > world_size and not ft_group_world_size:
        warnings.append(f"the world has at least {family_size} ranks: its sibling groups (same desc) need that many, "
                        f"though dumps and file names show only {world_size}")
        world_size = family_size
    world = tuple(range(world_size))

    inferred: dict[str, set[int]] = {}
    for name, users_of_name in users.items():
        desc = descs.get(name, "")
        if is_default_group(name, desc):
            if ft_group_world_size:
                for base in sorted({replica_base(r) for r in users_of_name}):
                    members = tuple(r for r in world if replica_base(r) == base) or tuple(sorted(users_of_name))
                    group = groups.setdefault((name, members), Group(name, desc, members, inferred=True))
                    for r in users_of_name:
                        if replica_base(r) == base:
                            by_rank[(r, name)] = group
                continue
            inferred[name] = set(world)
        else:
            inferred[name] = set(users_of_name)

    _complete_siblings(inferred, descs, world, hints)
    with_evidence = {rank for rank, dump in dumps.items() if not dump.recorder_off}  # a recorder off shows no membership
    _complete_from_shapes(inferred, descs, world, hints, with_evidence, warnings)
    expected = _family_sizes(inferred, descs, hints)
    unplaced = _unplaced(inferred, descs, world, with_evidence)
    short: set[tuple] = set()
    for name, members in inferred.items():
        ranks = tuple(sorted(members))
        group = groups.setdefault((name, ranks), Group(name, descs.get(name, ""), ranks, inferred=True))
        for r in users[name]:
            by_rank[(r, name)] = group
        if not is_default_group(name, descs.get(name, "")) and (
                len(ranks) < max(expected.get(name, 0), hints.get(name, 0)) or name in unplaced):
            short.add(group.key)
        hinted = hints.get(name, 0)
        if hinted > len(ranks):
            warnings.append(
                f"group {group.label} (pg {name}): its all_gather shapes say {hinted} members, "
                f"the dumps show {len(ranks)}; the others are unknown"
            )
    if inferred:
        warnings.append(
            f"membership of {len(inferred)} group(s) inferred from the entries: the dumps' pg_config "
            "is empty or a placeholder (as in gloo dumps)"
        )
    ordered = tuple(sorted(groups.values(), key=lambda g: (_numeric(g.name), g.ranks)))
    return GroupTable(ordered, by_rank, world, tuple(warnings), frozenset(short))


def _unplaced(inferred: dict[str, set[int]], descs: dict[str, str], world: tuple[int, ...], with_evidence: set[int]) -> set[str]:
    """The inferred groups of each same-desc family that leaves ranks without evidence (no dump, a
    recorder off) uncovered: any of them may be one of its members."""
    by_desc: dict[str, list[str]] = defaultdict(list)
    for name in inferred:
        desc = descs.get(name, "")
        if desc and desc not in ("undefined", "default_pg"):
            by_desc[desc].append(name)
    found: set[str] = set()
    for names in by_desc.values():
        if len(names) < 2:
            continue
        covered = set().union(*(inferred[n] for n in names))
        if set(world) - covered - with_evidence:
            found.update(names)
    return found


def _family_sizes(inferred: dict[str, set[int]], descs: dict[str, str], hints: dict[str, int]) -> dict[str, int]:
    """Each inferred group's size as its same-desc siblings say (replicas share one), where it has
    siblings (_expected_size)."""
    by_desc: dict[str, list[str]] = defaultdict(list)
    for name in inferred:
        desc = descs.get(name, "")
        if desc and desc not in ("undefined", "default_pg"):
            by_desc[desc].append(name)
    sizes = {}
    for names in by_desc.values():
        if len(names) < 2:
            continue
        size = max(max(len(inferred[n]) for n in names), *(hints.get(n, 0) for n in names))
        sizes.update((n, _expected_size(n, size, hints)) for n in names)
    return sizes


def _sibling_world(users: dict[str, set[int]], descs: dict[str, str], hints: dict[str, int]) -> int:
    """The fewest ranks a world can have whose same-desc groups (tp, dp, pp replicas) are as the
    dumps show them: such groups are disjoint, share one size (the largest seen, or what their
    all_gather and reduce_scatter shapes say) and together cover the world."""
    families: dict[str, list[str]] = defaultdict(list)
    for name, members in users.items():
        desc = descs.get(name, "")
        if desc and desc not in ("undefined", "default_pg"):
            families[desc].append(name)
    needed = 0
    for names in families.values():
        if len(names) < 2:
            continue
        seen = [users[n] for n in names]
        if sum(map(len, seen)) != len(set().union(*seen)):  # overlapping: not replicas of one layout
            continue
        size = max(max(map(len, seen)), *(hints.get(n, 0) for n in names))
        needed = max(needed, sum(_expected_size(n, size, hints) for n in names))
    return needed


def _expected_size(name: str, family_size: int, hints: dict[str, int]) -> int:
    """A same-desc group's size: what its own all_gather or reduce_scatter shapes say, where they
    do (two `io` groups of 3 and 5 ranks share a desc), else its family's."""
    return hints.get(name) or family_size


def _complete_siblings(inferred: dict[str, set[int]], descs: dict[str, str], world: tuple[int, ...], hints: dict[str, int]) -> None:
    """Give a short inferred group the ranks its same-desc siblings leave uncovered.

    Replicas (tp, dp, pp groups) share a desc and a size and together cover the world. A group
    whose rank skipped every op in it, or whose dump is missing, shows fewer members than its
    siblings; when exactly one group is short and exactly the missing count of ranks is left
    uncovered by all of them, those ranks are its members.
    """
    by_desc: dict[str, list[str]] = defaultdict(list)
    for name in inferred:
        desc = descs.get(name, "")
        if desc and desc not in ("undefined", "default_pg"):
            by_desc[desc].append(name)
    for names in by_desc.values():
        if len(names) < 2:
            continue
        size = max(max(len(inferred[n]) for n in names), *(hints.get(n, 0) for n in names))
        short = [n for n in names if len(inferred[n]) < _expected_size(n, size, hints)]
        covered = set().union(*(inferred[n] for n in names))
        leftover = set(world) - covered
        if len(short) == 1 and len(leftover) == _expected_size(short[0], size, hints) - len(inferred[short[0]]):
            inferred[short[0]] |= leftover


def _complete_from_shapes(inferred: dict[str, set[int]], descs: dict[str, str], world: tuple[int, ...],
                          hints: dict[str, int], with_dump: set[int], warnings: list[str]) -> None:
    """Give a group whose all_gather or reduce_scatter shapes say it has more members than the
    dumps show the ranks without a dump, when exactly that many are not in a sibling group."""
    for name, members in inferred.items():
        short = hints.get(name, 0) - len(members)
        desc = descs.get(name, "")
        if short <= 0 or is_default_group(name, desc):
            continue
        taken = set().union(*(m for n, m in inferred.items() if n != name and descs.get(n) == desc))
        candidates = [r for r in world if r not in with_dump and r not in members and r not in taken]
        if len(candidates) == short:
            members.update(candidates)
            warnings.append(f"group {desc or name} (pg {name}): its shapes say {hints[name]} members; "
                            f"{'rank' if short == 1 else 'ranks'} {', '.join(map(str, candidates))}, "
                            "which left no dump, taken as the missing ones")


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)
