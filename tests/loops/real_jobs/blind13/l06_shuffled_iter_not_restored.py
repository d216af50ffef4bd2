# ruff: noqa
"""BROKEN: grain MapDataset shuffle -> ElasticIterator created once, outside the retried function;
model/opt/step restored from the snapshot, iterator position never set back."""

import sys, os

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import jax
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
from common_bits import Rows, init_params, step, TX


def main(devices=None, steps=30):
    mgr = em.Manager(devices)
    snap = Snapshotter()
    ds = grain.MapDataset.source(Rows()).shuffle(seed=1234)
    it = ElasticIterator(ds, 16, grain.sharding.ShardOptions(0, 1))

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
                    "s": 0,
                    "data": {"global_next_index": 0},
                }
            )
            p, o, first = r["p"], r["o"], r["s"] + 1
            # BUG: r["data"] is never given back to `it`
        for s in range(first, steps):
            b = next(it)
            p, o = step(p, o, jax.device_put(b["x"], rep), jax.device_put(b["y"], rep))
            snap.save(s, {"p": p, "o": o, "s": s, "data": it.get_state()})
        return p, o

    return go()
