# ruff: noqa
"""Correct: snapshot every 3 steps holding only params/opt/step (as a replicated int32 device array);
the data position is recomputed as (step+1)*GLOBAL_BATCH (the global batch never changes)."""

import sys, os

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import jax
import jax.numpy as jnp
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
from common_bits import Rows, init_params, step, TX

GLOBAL_BATCH = 16


def main(devices=None, steps=30, every=3):
    mgr = em.Manager(devices)
    snap = Snapshotter()

    @mgr.elastic_retry(
        minimum_slice_count=1, poll_interval=1, retry_policy=em.ElasticRetryLimit(20)
    )
    def go():
        act = sorted(mgr.active_slice_indices)
        rep = NamedSharding(
            Mesh(np.array([mgr.slice_to_devices[s] for s in act]), ("replica", "d")), P()
        )
        p = jax.device_put(init_params(), rep)
        o = jax.device_put(TX.init(p), rep)
        first = 0
        if snap.latest is not None:
            snap.join()
            sds = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
            r = snap.load(
                {
                    "p": jax.tree.map(sds, p),
                    "o": jax.tree.map(sds, o),
                    "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
                }
            )
            p, o, first = r["p"], r["o"], int(r["step"]) + 1
        it = ElasticIterator(
            grain.MapDataset.source(Rows()), GLOBAL_BATCH, grain.sharding.ShardOptions(0, 1)
        )
        it.set_state({"global_next_index": first * GLOBAL_BATCH})
        for s in range(first, steps):
            b = next(it)
            p, o = step(p, o, jax.device_put(b["x"], rep), jax.device_put(b["y"], rep))
            if s % every == every - 1:
                snap.save(s, {"p": p, "o": o, "step": jax.device_put(jnp.int32(s), rep)})
        return p, o

    return go()
