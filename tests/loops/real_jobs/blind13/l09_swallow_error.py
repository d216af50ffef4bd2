# ruff: noqa
"""BROKEN: the step is wrapped in try/except that logs and skips the batch on any runtime error,
so a slice-down error is swallowed and training goes on with stale state."""

import sys, os, logging

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import jax
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
from common_bits import Rows, init_params, step, TX

log = logging.getLogger("l09")


def main(devices=None, steps=30):
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
        first, pos = 0, {"global_next_index": 0}
        if snap.latest is not None:
            snap.join()
            sds = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
            r = snap.load(
                {"p": jax.tree.map(sds, p), "o": jax.tree.map(sds, o), "s": 0, "data": pos}
            )
            p, o, first, pos = r["p"], r["o"], r["s"] + 1, r["data"]
        it = ElasticIterator(grain.MapDataset.source(Rows()), 16, grain.sharding.ShardOptions(0, 1))
        it.set_state(pos)
        for s in range(first, steps):
            b = next(it)
            try:
                p2, o2 = step(p, o, jax.device_put(b["x"], rep), jax.device_put(b["y"], rep))
                jax.block_until_ready(p2)
                p, o = p2, o2
            except jax.errors.JaxRuntimeError as e:  # BUG: "flaky step, skip it"
                log.warning("step %d failed, skipping batch: %s", s, str(e)[:60])
                continue
            snap.save(s, {"p": p, "o": o, "s": s, "data": it.get_state()})
        return p, o

    return go()
