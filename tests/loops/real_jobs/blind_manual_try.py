# ruff: noqa: E741, B023, RUF059
# Written blind by a tester who did not read the toolkit's code (2026-12-06); kept as written.
"""No elastic_retry decorator: the loop catches slice-down errors itself in a while/try loop,
waits for slices with pathwaysutils.elastic.wait_for_slices, restores from a Snapshotter.
Data: grain MapDataset -> to_iter_dataset().batch(); plain jnp params dict, hand-written SGD."""

import gc

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pathwaysutils.elastic import elastic
from pathwaysutils.elastic import manager as pw_manager

GB = 24
N = GB * 300


def rec(i):
    r = np.random.default_rng(1000 + int(i))
    x = r.standard_normal(4).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.sin(x).sum())}


def make_it():
    return (
        grain.MapDataset.range(N)
        .map(rec)
        .to_iter_dataset()
        .batch(GB, drop_remainder=True)
        .__iter__()
    )


def init_params():
    k1, k2 = jax.random.split(jax.random.key(7))
    return {
        "w1": np.asarray(jax.random.normal(k1, (4, 8)) * 0.5),
        "b1": np.zeros(8, np.float32),
        "w2": np.asarray(jax.random.normal(k2, (8,)) * 0.5),
        "b2": np.zeros((), np.float32),
    }


@jax.jit
def sgd_step(p, x, y):
    def loss(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), l


def _main(devices=None, steps=24, every=2, variant="ok", **kwargs):
    mgr = pw_manager.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    mgr.start_monitoring(2)
    mesh = None
    failures = 0
    p0 = init_params()
    params = None
    try:
        while True:
            try:
                if mesh is None or variant != "stale_mesh":
                    devs = [
                        d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]
                    ]
                    mesh = Mesh(np.asarray(devs).reshape(-1, per_slice), ("replica", "model"))
                rep = NamedSharding(mesh, P())
                dsh = NamedSharding(mesh, P(("replica", "model")))
                it = make_it()
                if variant == "swallow" and params is not None:
                    pass  # BUG: carry on with the arrays of the failed attempt
                else:
                    params = jax.device_put(p0, rep)
                    step = 0
                    if snap.latest is not None:
                        snap.join()
                        abstract = jax.tree.map(
                            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), params
                        )
                        r = snap.load({"params": abstract, "step": 0, "data": it.get_state()})
                        params, step = r["params"], r["step"] + 1
                        it.set_state(r["data"])
                while step < steps:
                    b = next(it)
                    x, y = jax.device_put((b["x"], b["y"]), dsh)
                    params, l = sgd_step(params, x, y)
                    if step % every == 0:
                        snap.save(step, {"params": params, "step": step, "data": it.get_state()})
                    if mgr.available_inactive_slices:
                        mgr.active_slice_indices = (
                            mgr.active_slice_indices | mgr.available_inactive_slices
                        )
                        mgr.available_inactive_slices = frozenset()
                        devs = [
                            d
                            for i in sorted(mgr.active_slice_indices)
                            for d in mgr.slice_to_devices[i]
                        ]
                        mesh = Mesh(np.asarray(devs).reshape(-1, per_slice), ("replica", "model"))
                        rep = NamedSharding(mesh, P())
                        dsh = NamedSharding(mesh, P(("replica", "model")))
                        params = jax.device_put(params, rep)
                    step += 1
                snap.join()
                return params
            except jax.errors.JaxRuntimeError as e:
                if not elastic.is_error_due_to_slice_down(e) or failures >= 6:
                    raise
                failures += 1
                if variant != "swallow":
                    params = None
                    x = y = b = None
                gc.collect()
                mgr.active_slice_indices = elastic.wait_for_slices(
                    slice_count=1,
                    slice_to_devices=mgr.slice_to_devices,
                    poll_interval=2,
                    timeout=600,
                )
                mgr.available_inactive_slices = frozenset()
    finally:
        mgr.close()


def main(**kw):
    return _main(**kw)


def broken_swallow(**kw):
    return _main(variant="swallow", **kw)


def broken_stale_mesh(**kw):
    return _main(variant="stale_mesh", **kw)
