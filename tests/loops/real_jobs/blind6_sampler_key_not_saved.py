# ruff: noqa
import functools
import os
import signal
import threading
from pathlib import Path

import numpy as np

FEAT = 4


def rec(i):
    i = int(i)
    x = np.sin(np.arange(1, FEAT + 1, dtype=np.float64) * 0.21 * i + 0.3).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.tanh(x.sum() * 0.4))}


def grain_data(n=50_000):
    import grain

    return grain.MapDataset.range(n).map(rec)


def live_devices(mgr):
    return [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]


def mesh_of(mgr, names=("replica", "model")):
    import jax

    dps = len(mgr.slice_to_devices[0])
    return jax.sharding.Mesh(np.array(live_devices(mgr), dtype=object).reshape(-1, dps), names)


def init():
    import jax
    import jax.numpy as jnp

    return {"w": jax.random.normal(jax.random.key(21), (FEAT, 6)) * 0.3, "o": jnp.full((6,), 0.2)}


def make_step():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(p, x, y):
        g = jax.grad(lambda p: jnp.mean((jnp.tanh(x @ p["w"]) @ p["o"] - y) ** 2))(p)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)

    return step


def abstract_of(rep):
    import jax

    return jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), jax.eval_shape(init)
    )


"""BROKEN: batches are sampled (with replacement) from a python list using a jax PRNG key that
is split every step; the key lives in a python variable outside the snapshot, so after a restore
it is NOT rewound: the data order after resume differs from the fault-free run."""

RECORDS = [rec(i) for i in range(3000)]


def sampler(key_box, bs):
    import jax

    while True:
        key_box[0], sub = jax.random.split(key_box[0])
        idx = np.asarray(jax.random.randint(sub, (bs,), 0, len(RECORDS)))
        chunk = [RECORDS[i] for i in idx]
        yield {
            "ids": idx.astype(np.int64),
            "x": np.stack([r["x"] for r in chunk]),
            "y": np.array([r["y"] for r in chunk]),
        }


def main(devices=None, checkpoint_dir=None, steps=20):
    import jax
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from pathwaysutils.elastic import manager

    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    step = make_step()
    key_box = [jax.random.key(123)]

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=5,
        timeout=300,
        retry_policy=manager.ElasticRetryLimit(6),
    )
    def run():
        mesh = mesh_of(mgr)
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P("replica"))
        if snap.latest is not None:
            snap.join()
            r = snap.load({"p": abstract_of(rep), "s": 0})
            p, s0 = r["p"], r["s"] + 1
        else:
            p, s0 = jax.device_put(init(), rep), 0
        gen = sampler(key_box, int(mgr.scale_by_active_slices(16)))
        for s in range(s0, steps):
            b = next(gen)
            p = step(p, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh))
            if s % 3 == 0:
                snap.save(s, {"p": p, "s": s})
        return p

    p = run()
    snap.join()
    return jax.device_get(p)
