"""The shards' settings (docs/shards.md): several database URLs, the map from input partition to
shard, what a node compares with the shard recorded in each database, and the refusals (exit 2,
naming the setting)."""

from __future__ import annotations

import pytest

from chronos import cli
from chronos.config.settings import Secret, load
from chronos.config.shards import ShardMap, grows, layout, parse_shard_map, record_mismatch
from chronos.config.validation import validate
from chronos.errors import ConfigError

A, B, C = (f"postgresql://chronos@db{i}:5432/chronos" for i in range(3))


def test_one_url_is_one_shard_and_every_partition_is_its() -> None:
    urls, shard_map = layout(A, "mod")
    assert urls == [A] and shard_map == ShardMap(1)
    assert {shard_map.shard_of(p) for p in range(12)} == {0}


def test_several_urls_spread_the_partitions_by_mod_by_default() -> None:
    urls, shard_map = layout(f"  {A}\n{B}   {C} ", "mod")
    assert urls == [A, B, C]
    assert [shard_map.shard_of(p) for p in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert shard_map.uncovered(100) == []


def test_an_explicit_map_gives_ranges_and_its_canonical_text_is_sorted() -> None:
    shard_map = parse_shard_map(" 6-11:1, 0-5:0 ,12:2", 3)
    assert shard_map.spec == "0-5:0,6-11:1,12:2"
    assert [shard_map.shard_of(p) for p in (0, 5, 6, 11, 12)] == [0, 0, 1, 1, 2]
    assert shard_map.uncovered(15) == [13, 14]
    with pytest.raises(KeyError):
        shard_map.shard_of(13)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0-5", "not a range of partitions and a shard"),
        ("5-0:0,6-7:1", "ends before it starts"),
        ("0-5:0,6-11:2", "names shard 2, but CHRONOS_DATABASE_URL names 2 databases"),
        ("0-5:0,5-11:1", "partition 5 is given two shards"),
        ("mod:3", "K must be 1 to the number of databases CHRONOS_DATABASE_URL names (2)"),
        ("mod:0", "K must be 1 to the number of databases"),
    ],
)
def test_a_bad_map_is_refused_naming_the_setting(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        validate(load(environ={}, database_url=Secret(f"{A} {B}"), shard_map=text))
    assert "CHRONOS_SHARD_MAP" in str(raised.value) and says in str(raised.value)


@pytest.mark.parametrize(
    ("urls", "migration", "says"),
    [
        (f"{A} mysql://db1/chronos", "", "CHRONOS_DATABASE_URL / --database-url must be"),
        (A, "postgresql://owner@db0/chronos http://x", "CHRONOS_MIGRATION_DATABASE_URL"),
        (f"{A} {B}", A, "CHRONOS_MIGRATION_DATABASE_URL names 1 databases and"),
    ],
)
def test_bad_urls_are_refused_naming_the_setting(urls: str, migration: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        validate(
            load(environ={}, database_url=Secret(urls), migration_database_url=Secret(migration))
        )


def test_chronos_run_exits_2_on_a_bad_map(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHRONOS_DATABASE_URL", f"{A} {B}")
    monkeypatch.setenv("CHRONOS_SHARD_MAP", "0-5:3")
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert "CHRONOS_SHARD_MAP" in err and "Traceback" not in err


def test_the_recorded_shard_is_compared_with_the_settings() -> None:
    two = ShardMap(2)
    assert record_mismatch(None, 0, ShardMap(1)) is None  # a one-database deployment
    assert record_mismatch((0, 1, "mod"), 0, ShardMap(1)) is None
    assert record_mismatch((1, 2, "mod"), 1, two) is None
    unrecorded = record_mismatch(None, 1, two)
    assert unrecorded is not None and "run `chronos migrate`" in unrecorded
    swapped = record_mismatch((1, 2, "mod"), 0, two)
    assert swapped is not None
    assert "recorded as shard 1 of 2 (map mod)" in swapped
    assert "make it shard 0 of 2 (map mod)" in swapped
    grown = record_mismatch((0, 1, "mod"), 0, two)
    assert grown is not None and "shard 0 of 1" in grown


def test_mod_k_leaves_the_added_shards_without_partitions_of_the_map() -> None:
    grown = parse_shard_map("mod:2", 3)
    assert grown.spec == "mod:2" and grown.shards == 3
    assert [grown.shard_of(p) for p in range(5)] == [0, 1, 0, 1, 0]
    assert parse_shard_map("mod:3", 3) == ShardMap(3)  # K the number of databases: mod


def test_a_layout_that_adds_databases_and_moves_no_partition_grows_the_recorded_one() -> None:
    assert grows((0, 2, "mod"), 0, parse_shard_map("mod:2", 3))
    assert grows((1, 2, "0-5:0,6-11:1"), 1, parse_shard_map("0-5:0,6-11:1", 4))
    assert grows((1, 2, "mod"), 1, parse_shard_map("0:0,1:1,2:0,3:1", 3))
    assert not grows((0, 2, "mod"), 0, ShardMap(3))  # mod over 3 moves partitions
    assert not grows((0, 2, "mod"), 1, parse_shard_map("mod:2", 3))  # another shard
    assert not grows((0, 3, "mod:2"), 0, parse_shard_map("mod", 2))  # fewer databases
    assert not grows((0, 2, "0-5:0,6-11:1"), 0, parse_shard_map("0-6:0,7-11:1", 3))
