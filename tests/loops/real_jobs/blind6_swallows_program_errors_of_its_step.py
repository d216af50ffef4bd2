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


"""BROKEN: the step is wrapped in try/except jax.errors.JaxRuntimeError; slice-down errors are
re-raised correctly (so elastic_retry works), but any OTHER runtime error (e.g. INVALID_ARGUMENT,
a real program bug) is logged and the batch is silently skipped: the run 'completes'."""


def main(devices=None, checkpoint_dir=None, steps=20):
    import grain
    import jax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding, PartitionSpec as P
    from pathwaysutils.elastic import elastic, manager

    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = grain_data()
    step = make_step()

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
        it = ElasticIterator(data, int(mgr.scale_by_active_slices(16)), grain.sharding.NoSharding())
        if snap.latest is not None:
            snap.join()
            r = snap.load({"p": abstract_of(rep), "s": 0, "it": it.get_state()})
            p, s0 = r["p"], r["s"] + 1
            it.set_state(r["it"])
        else:
            p, s0 = jax.device_put(init(), rep), 0
        for s in range(s0, steps):
            b = next(it)
            try:
                p = step(p, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh))
            except jax.errors.JaxRuntimeError as e:
                if elastic.is_error_due_to_slice_down(e):
                    raise
                print(f"step {s}: transient runtime error, skipping batch: {e}")
                continue
            if s % 3 == 0:
                snap.save(s, {"p": p, "s": s, "it": it.get_state()})
        return p

    p = run()
    snap.join()
    return jax.device_get(p)
