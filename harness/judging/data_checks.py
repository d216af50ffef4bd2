"""grain's ElasticIterator rule, stated with sizes that would work instead of a bare ValueError."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.errors import ChaosError


class BatchShardingError(ChaosError, ValueError):
    """A global batch that cannot be split evenly over the data shards."""


def check_global_batch(global_batch: int, shard_count: int) -> None:
    """ElasticIterator gives each shard ``global_batch / shard_count`` samples a step."""
    if shard_count < 1 or global_batch < 1:
        raise BatchShardingError(
            f"global batch {global_batch} over {shard_count} shards: both must be >= 1"
        )
    if global_batch % shard_count == 0:
        return
    below = global_batch - global_batch % shard_count
    above = below + shard_count
    sizes = [n for n in (below, above) if n > 0]
    counts = [n for n in range(1, global_batch + 1) if global_batch % n == 0]
    raise BatchShardingError(
        f"global batch size {global_batch} does not divide by the shard count {shard_count}: "
        "ElasticIterator gives every shard global_batch / shard_count samples a step, so the "
        f"global batch must be a multiple of the shard count; use a global batch of "
        f"{' or '.join(map(str, sizes))}, or a shard count of {counts}"
    )


def elastic_iterator(dataset: Any, global_batch: int, shard_options: Any) -> Any:
    """``grain.experimental.ElasticIterator`` after checking the batch rule up front."""
    from grain.experimental import ElasticIterator

    check_global_batch(global_batch, int(getattr(shard_options, "shard_count", 1)))
    return ElasticIterator(dataset, global_batch, shard_options)
