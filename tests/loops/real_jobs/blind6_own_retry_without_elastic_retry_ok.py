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


"""CORRECT. A hand-written retry loop instead of the elastic_retry decorator: catches
JaxRuntimeError, re-raises anything that is not a slice-down error
(pathwaysutils.elastic.elastic.is_error_due_to_slice_down), waits for slices with
elastic.wait_for_slices, and restores the newest snapshot before drawing its next batch."""


def init():
    import jax
    import jax.numpy as jnp

    return {"w": jax.random.normal(jax.random.key(12), (FEAT, 4)) * 0.3, "o": jnp.full((4,), 0.25)}


def main(devices=None, checkpoint_dir=None, steps=20):
    import grain
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding, PartitionSpec as P
    from pathwaysutils.elastic import elastic, manager

    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = grain_data()

    @jax.jit
    def step(p, x, y):
        g = jax.grad(lambda p: jnp.mean((jnp.tanh(x @ p["w"]) @ p["o"] - y) ** 2))(p)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)

    def train_once():
        mesh = mesh_of(mgr)
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P("replica"))
        it = ElasticIterator(data, int(mgr.scale_by_active_slices(16)), grain.sharding.NoSharding())
        if snap.latest is not None:
            snap.join()
            abstract = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), jax.eval_shape(init)
            )
            r = snap.load({"p": abstract, "s": 0, "it": it.get_state()})
            p, s0 = r["p"], r["s"] + 1
            it.set_state(r["it"])
        else:
            p, s0 = jax.device_put(init(), rep), 0
        for s in range(s0, steps):
            b = next(it)
            p = step(p, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh))
            if s % 3 == 0:
                snap.save(s, {"p": p, "s": s, "it": it.get_state()})
        return p

    attempt = 0
    while True:
        attempt += 1
        mgr.active_slice_indices = elastic.wait_for_slices(
            slice_count=1, slice_to_devices=mgr.slice_to_devices, poll_interval=5, timeout=300
        )
        try:
            with jax.default_device(mgr.default_device):
                p = train_once()
            break
        except jax.errors.JaxRuntimeError as e:
            if not elastic.is_error_due_to_slice_down(e) or attempt >= 8:
                raise
            print(f"attempt {attempt}: slice down, retrying: {e}")
    snap.join()
    return jax.device_get(p)
