# ruff: noqa
"""BROKEN: no grain; batches are numpy slices data[i*B:(i+1)*B] with i an attempt-local counter that
restarts at 0, while model/opt/step are restored (data replayed from the start after a failure)."""

import sys, os

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
from common_bits import Rows, init_params, step, TX

R = Rows(1000)
X = np.stack([R[i]["x"] for i in range(len(R))])
Y = np.stack([R[i]["y"] for i in range(len(R))])
B = 16


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
        first = 0
        if snap.latest is not None:
            snap.join()
            sds = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
            r = snap.load({"p": jax.tree.map(sds, p), "o": jax.tree.map(sds, o), "s": 0})
            p, o, first = r["p"], r["o"], r["s"] + 1
        for i, s in enumerate(range(first, steps)):  # BUG: slices by i, not s
            x, y = X[i * B : (i + 1) * B], Y[i * B : (i + 1) * B]
            p, o = step(p, o, jax.device_put(x, rep), jax.device_put(y, rep))
            snap.save(s, {"p": p, "o": o, "s": s})
        return p, o

    return go()
