# ruff: noqa
"""Port that forgot to drop the multi-controller bootstrap."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager

mgr = manager.Manager()


def mesh():
    devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
    return Mesh(np.asarray(devs).reshape(len(mgr.active_slice_indices), -1), ("data", "model"))


@mgr.elastic_retry(minimum_slice_count=2, retry_policy=manager.ElasticRetryLimit(max_attempts=5))
def loop(steps=100):
    m = mesh()
    w = jnp.zeros((16, 16))
    for step in range(steps):
        w = w + 1.0
        if step % 10 == 0:
            multihost_utils.sync_global_devices(f"step{step}")
    return w


def main():
    # on GKE multi-controller every host ran this; on Pathways it blocks waiting for a coordinator
    jax.distributed.initialize()
    loop()


if __name__ == "__main__":
    main()
