"""Dataset position continuity in grain's ElasticIterator itself; a loop's committed batches
are searched by test_loop_properties.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pathways_chaos.harness import properties
from pathways_chaos.harness.judging.data_checks import BatchShardingError, elastic_iterator

if TYPE_CHECKING:
    from pathways_chaos.harness.properties.dataset import IteratorPhase


@properties.share_of_profile(2)
@given(run=properties.iterator_runs())
def test_elastic_iterator_across_shard_count_changes(
    run: tuple[int, bool, list[IteratorPhase]],
) -> None:
    properties.check_iterator_continuity(*run)


@given(
    batch=st.integers(1, 64),
    shards=st.integers(2, 16),
)
def test_a_batch_that_does_not_divide_is_a_clear_error_with_sizes_that_work(
    batch: int, shards: int
) -> None:
    import grain
    from grain.experimental import ElasticIterator

    dataset = grain.MapDataset.range(256)
    options = grain.sharding.ShardOptions(0, shards)
    if batch % shards == 0:
        next(iter(elastic_iterator(dataset, batch, options)))
        return
    with pytest.raises(ValueError, match="not divisible"):  # grain's own rule, stated bare
        next(iter(ElasticIterator(dataset, batch, options)))
    with pytest.raises(BatchShardingError) as raised:
        elastic_iterator(dataset, batch, options)
    message = str(raised.value)
    assert f"global batch size {batch} does not divide by the shard count {shards}" in message
    assert "multiple of the shard count" in message
    suggested = message.split("use a global batch of ")[1].split(",")[0].split(" or ")
    for size in map(int, suggested):
        assert size % shards == 0
        next(iter(elastic_iterator(dataset, size, options)))  # the sizes offered do work
