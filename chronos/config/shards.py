"""The shards: several Postgres databases, each holding the messages of a set of the input topic's
partitions (docs/shards.md). ``CHRONOS_DATABASE_URL`` names them, shard 0 first, separated by
spaces (a URL holds no space; a multi-host URL's commas stay its own); ``CHRONOS_SHARD_MAP``
says which shard holds each input partition: ``mod`` (partition p in shard p mod the number of
shards), ``mod:K`` (p mod K: the shards from K on hold no partition of the map, only those moved
to them: a database added), or explicit ranges, ``0-5:0,6-11:1``. One URL is one shard: today's
deployment.

A cancel or a reschedule shares its message's key, so it reaches the same partition and so the
same shard: what makes a message's whole life one shard's.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

MOD = "mod"
MOD_OF = re.compile(r"^mod:(\d+)$")
RANGE = re.compile(r"^(\d+)(?:-(\d+))?:(\d+)$")


@dataclass(frozen=True)
class ShardMap:
    """Which shard holds each input partition. ``spec`` is its canonical text, recorded in every
    shard (``chronos_shard``) and compared by each node at start."""

    shards: int
    spec: str = MOD
    ranges: tuple[tuple[int, int, int], ...] = ()  # (first, last, shard), in partition order
    modulus: int = 0  # ``mod:K``'s K (0: the number of shards)

    def shard_of(self, partition: int) -> int:
        """The shard of ``partition``; an explicit map that does not list it raises KeyError
        (start-up checks the map covers every partition of the input topic: ``uncovered``)."""
        if not self.ranges:
            return partition % (self.modulus or self.shards)
        for first, last, shard in self.ranges:
            if first <= partition <= last:
                return shard
        raise KeyError(partition)

    def places_as(self, other: ShardMap) -> bool:
        """Every partition is in the same shard by this map as by ``other`` (an explicit map's:
        the partitions it lists; one of them explicit, the partitions that one lists)."""
        if not self.ranges and not other.ranges:
            return (self.modulus or self.shards) == (other.modulus or other.shards)
        listed = {
            p for first, last, _ in self.ranges + other.ranges for p in range(first, last + 1)
        }
        try:
            return all(self.shard_of(p) == other.shard_of(p) for p in listed)
        except KeyError:
            return False

    def uncovered(self, partitions: int) -> list[int]:
        """The partitions among ``0 .. partitions - 1`` the map gives no shard."""
        if not self.ranges:
            return []
        covered = {p for first, last, _ in self.ranges for p in range(first, last + 1)}
        return [p for p in range(partitions) if p not in covered]


def split_urls(text: str) -> list[str]:
    """The shards' database URLs in ``CHRONOS_DATABASE_URL`` (space-separated, shard 0 first)."""
    return text.split()


def parse_shard_map(text: str, shards: int) -> ShardMap:
    """``CHRONOS_SHARD_MAP`` for ``shards`` databases; ValueError names what is wrong."""
    text = text.strip()
    if text in ("", MOD):
        return ShardMap(shards)
    mod_of = MOD_OF.match(text)
    if mod_of is not None:
        modulus = int(mod_of[1])
        if not 1 <= modulus <= shards:
            raise ValueError(
                f"{text!r}: K must be 1 to the number of databases CHRONOS_DATABASE_URL names "
                f"({shards})"
            )
        return ShardMap(shards) if modulus == shards else ShardMap(shards, text, modulus=modulus)
    ranges: list[tuple[int, int, int]] = []
    for part in text.split(","):
        match = RANGE.match(part.strip())
        if match is None:
            raise ValueError(
                f"{part.strip()!r} is not a range of partitions and a shard "
                "(e.g. 0-5:0,6-11:1), nor 'mod' or 'mod:K'"
            )
        first, last, shard = int(match[1]), int(match[2] or match[1]), int(match[3])
        if last < first:
            raise ValueError(f"{part.strip()!r}: the range ends before it starts")
        if shard >= shards:
            raise ValueError(
                f"{part.strip()!r} names shard {shard}, but CHRONOS_DATABASE_URL names "
                f"{shards} database{'s' if shards > 1 else ''} (shards 0 to {shards - 1})"
            )
        ranges.append((first, last, shard))
    ranges.sort()
    for (_, last, _), (first, _, _) in itertools.pairwise(ranges):
        if first <= last:
            raise ValueError(f"partition {first} is given two shards")
    spec = ",".join(f"{a}-{b}:{s}" if a != b else f"{a}:{s}" for a, b, s in ranges)
    return ShardMap(shards, spec, tuple(ranges))


def describe(shard: int, shards: int, spec: str) -> str:
    return f"shard {shard} of {shards} (map {spec})"


def record_mismatch(
    recorded: tuple[int, int, str] | None, shard: int, layout: ShardMap
) -> str | None:
    """Why the database given as ``shard`` of ``layout`` is not that shard (its ``chronos_shard``
    row: ``recorded``), or None when it is. No row is one shard's (before shards, or a
    deployment that never had several)."""
    expected = (shard, layout.shards, layout.spec)
    if recorded is None:
        if layout.shards == 1:
            return None
        return (
            f"database {shard} of CHRONOS_DATABASE_URL has no shard recorded: run `chronos "
            "migrate` with the same CHRONOS_DATABASE_URL and CHRONOS_SHARD_MAP first"
        )
    if tuple(recorded) == expected:
        return None
    return (
        f"database {shard} of CHRONOS_DATABASE_URL is recorded as {describe(*recorded)}, but "
        f"CHRONOS_DATABASE_URL and CHRONOS_SHARD_MAP make it {describe(*expected)}: give the "
        "databases in the order `chronos migrate` recorded them, with the same map (a new "
        "layout moves partitions; a database added is recorded by `chronos migrate`: "
        "docs/shards.md)"
    )


def grows(recorded: tuple[int, int, str], shard: int, layout: ShardMap) -> bool:
    """``layout`` adds databases to the recorded one and leaves every partition in its shard
    (``mod:K``, or the same ranges): ``chronos migrate`` records it in place of the old one."""
    was_shard, was_shards, was_spec = recorded
    if was_shard != shard or layout.shards <= was_shards:
        return False
    try:
        return parse_shard_map(was_spec, was_shards).places_as(layout)
    except ValueError:
        return False


def layout(settings_urls: str, spec: str) -> tuple[list[str], ShardMap]:
    """The shards' URLs and map from the two settings' values (validated before)."""
    urls = split_urls(settings_urls)
    return urls, parse_shard_map(spec, max(len(urls), 1))
