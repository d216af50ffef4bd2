# ruff: noqa
"""One entry point for the old GCE multi-controller job and the new Pathways job.

The Pathways image sets PATHWAYS=1; the legacy branch never runs there.
"""

import os

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager

ON_PATHWAYS = os.environ.get("PATHWAYS", "1") == "1"
LEGACY_HOSTS = 8


def sampler(n):
    if ON_PATHWAYS:
        shard = grain.sharding.NoSharding()
    else:  # legacy multi-controller path, kept until the GCE job is retired
        shard = grain.sharding.ShardOptions(jax.process_index(), LEGACY_HOSTS)
    return grain.samplers.IndexSampler(num_records=n, shard_options=shard, shuffle=True, seed=0)


def main():
    if not ON_PATHWAYS:
        jax.distributed.initialize()
    mgr = manager.Manager()
    ckpt = ocp.CheckpointManager(
        "gs://acme-ckpt/run7",
        options=ocp.CheckpointManagerOptions(
            save_interval_steps=100, enable_async_checkpointing=True
        ),
    )

    @mgr.elastic_retry(
        minimum_slice_count=1, retry_policy=manager.ElasticRetryLimit(max_attempts=4)
    )
    def fit():
        s = sampler(1000)
        return s

    return fit()


if __name__ == "__main__":
    main()
