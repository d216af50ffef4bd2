# ruff: noqa
import logging

import grain
import jax
import numpy as np
from jax.sharding import Mesh
from pathwaysutils.elastic import manager

logging.raiseExceptions = True
log = logging.getLogger("run")
MIN_SLICES = 3


def loader(ds):
    rank = jax.process_index()
    world = jax.process_count()
    # shard `rank` of `world`: shard 0 of 1 on the Pathways controller, i.e. the whole dataset
    opts = grain.sharding.ShardOptions(shard_index=rank, shard_count=world)
    if rank == 0:
        log.info("loader on the controller, %s", opts)
    return grain.experimental.ElasticIterator(ds, 64, opts)


def main():
    mgr = manager.Manager()

    @mgr.elastic_retry(
        minimum_slice_count=MIN_SLICES, retry_policy=manager.ElasticRetryLimit(max_attempts=12)
    )
    def go():
        idx = sorted(mgr.active_slice_indices)
        mesh = Mesh(
            np.asarray([d for s in idx for d in mgr.slice_to_devices[s]]).reshape(len(idx), -1),
            ("replica", "fsdp"),
        )
        it = loader(grain.MapDataset.range(10_000))
        return mesh, next(iter(it))

    return go()
