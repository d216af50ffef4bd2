# ruff: noqa
"""Correct: optax.MultiSteps(k=2), one micro-batch per draw, snapshot after every draw (MultiSteps
state holds the accumulator) labelled with the optimizer step; deprecated Manager.pause_resume."""

import sys, os, warnings

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import jax
import optax
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
from common_bits import Rows, init_params, loss

K = 2
MTX = optax.MultiSteps(optax.adam(5e-3), every_k_schedule=K)


@jax.jit
def micro(p, o, x, y):
    g = jax.grad(loss)(p, x, y)
    u, o = MTX.update(g, o, p)
    return optax.apply_updates(p, u), o


def main(devices=None, draws=32):
    mgr = em.Manager(devices)
    snap = Snapshotter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        deco = mgr.pause_resume(max_retries=20, poll_interval=1)

    @deco
    def go():
        act = sorted(mgr.active_slice_indices)
        rep = NamedSharding(
            Mesh(np.array([mgr.slice_to_devices[s] for s in act]), ("replica", "d")), P()
        )
        p = jax.device_put(init_params(), rep)
        o = jax.device_put(MTX.init(p), rep)
        n, pos = 0, {"global_next_index": 0}
        if snap.latest is not None:
            snap.join()
            sds = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
            r = snap.load(
                {"p": jax.tree.map(sds, p), "o": jax.tree.map(sds, o), "n": 0, "pos": pos}
            )
            p, o, n, pos = r["p"], r["o"], r["n"], r["pos"]
        it = ElasticIterator(grain.MapDataset.source(Rows()), 8, grain.sharding.ShardOptions(0, 1))
        it.set_state(pos)
        while n < draws:
            b = next(it)
            p, o = micro(p, o, jax.device_put(b["x"], rep), jax.device_put(b["y"], rep))
            n += 1
            snap.save(n // K, {"p": p, "o": o, "n": n, "pos": it.get_state()})
        return {"p": p, "o": o}

    return go()
