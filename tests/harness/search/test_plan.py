"""Shard index to work: seeds disjoint between shards, every property searched, bad input
one line."""

from __future__ import annotations

import itertools

import pytest

from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.search.plan import (
    PROPERTIES,
    SEED_SPAN,
    base_seed,
    deal_properties,
    make_plan,
    parse_shard,
)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 8])
def test_every_property_is_searched_and_seeds_never_meet(count: int) -> None:
    plans = [make_plan(i, count, seed=7) for i in range(count)]
    dealt = [p for plan in plans for p in plan.properties]
    assert sorted(set(dealt)) == sorted(PROPERTIES)
    if count <= len(PROPERTIES):
        assert sorted(dealt) == sorted(PROPERTIES)  # each once: no family searched twice
    seeds = [{plan.seed(r) for r in (0, 1, SEED_SPAN - 1)} for plan in plans]
    for a, b in itertools.combinations(seeds, 2):
        assert not a & b
    with pytest.raises(ChaosConfigError, match="ran out"):
        plans[0].seed(SEED_SPAN)


def test_more_shards_than_properties_share_a_family_on_other_seeds() -> None:
    assert [deal_properties(i, 8, PROPERTIES) for i in range(8)] == [(p,) for p in PROPERTIES] * 2
    assert deal_properties(0, 3, PROPERTIES) == ("snapshot", "stateful")


def test_the_index_comes_from_the_flag_or_the_indexed_job() -> None:
    assert parse_shard("2/4", None, env={}) == (2, 4)
    assert parse_shard(None, 4, env={"JOB_COMPLETION_INDEX": "3"}) == (3, 4)
    assert parse_shard(None, None, env={}) == (0, 1)
    assert parse_shard("1/4", 4, env={"JOB_COMPLETION_INDEX": "0"}) == (1, 4)  # the flag wins


@pytest.mark.parametrize(
    ("text", "shards", "env", "message"),
    [
        ("2of4", None, {}, "write INDEX/COUNT"),
        ("4/4", None, {}, "outside 0..3"),
        ("1/4", 3, {}, "disagree"),
        (None, 4, {}, "no shard index"),
        (None, 4, {"JOB_COMPLETION_INDEX": "x"}, "not a shard index"),
        (None, 2, {"JOB_COMPLETION_INDEX": "2"}, "outside 0..1"),
        (None, 0, {}, "at least 1"),
    ],
)
def test_bad_shards_are_one_line(
    text: str | None, shards: int | None, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ChaosConfigError, match=message) as info:
        parse_shard(text, shards, env=env)
    assert "\n" not in str(info.value)


def test_shards_of_one_run_agree_on_the_base_seed() -> None:
    assert base_seed(None, "uid-1") == base_seed(None, "uid-1") != base_seed(None, "uid-2")
    assert base_seed(5, "uid-1") == 5
    with pytest.raises(ChaosConfigError, match=">= 0"):
        base_seed(-1, None)
    with pytest.raises(ChaosConfigError, match="use some of"):
        make_plan(0, 1, properties=("dataset", "mesh_rebuild"))
