# ruff: noqa: E501 - kept as the blind tester wrote it (formatted only)
"""BROKEN: a PRNG key split each step and carried in Python state outside the snapshot: after a restore the noise stream is ahead of the restored step."""

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pathwaysutils.elastic import manager as pw_manager

GLOBAL_BATCH = 24
DIM = 8


def _make(i):
    rng = np.random.default_rng(int(i))
    x = rng.standard_normal(DIM).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x.sum() * 0.5 + 1.0)}


def make_iterator():
    ds = grain.MapDataset.range(100_000).map(_make)
    return grain.experimental.ElasticIterator(ds, GLOBAL_BATCH, grain.sharding.NoSharding())


def _step(state, x, y, key):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    g = jax.grad(loss_fn)(state)
    kw, kb = jax.random.split(key)
    g = {
        "w": g["w"] + 0.05 * jax.random.normal(kw, g["w"].shape),
        "b": g["b"] + 0.05 * jax.random.normal(kb, ()),
    }
    return jax.tree.map(lambda p, gg: p - 0.05 * gg, state, g)


train_step = jax.jit(_step)


def main(devices=None, checkpoint_dir=None, steps=40, snapshot_interval=4):
    mgr = pw_manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    dps = len(next(iter(mgr.slice_to_devices.values())))
    rng = {"key": jax.random.key(1234)}  # lives across attempts, not in the snapshot

    def make_mesh():
        act = sorted(mgr.active_slice_indices)
        devs = [d for i in act for d in mgr.slice_to_devices[i]]
        return Mesh(np.asarray(devs).reshape(len(act), dps), ("replica", "model"))

    def init(mesh):
        rep = NamedSharding(mesh, P())
        state = {
            "w": jax.device_put(jnp.zeros((DIM,), jnp.float32), rep),
            "b": jax.device_put(jnp.zeros((), jnp.float32), rep),
        }
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
        )
        return state, abstract, make_iterator()

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=120,
        retry_policy=pw_manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        mesh = make_mesh()
        state, abstract, it = init(mesh)
        step = 0
        if snap.latest is not None:
            snap.join()
            restored = snap.load({"state": abstract, "step": 0, "iterator_state": it.get_state()})
            state = restored["state"]
            step = int(restored["step"]) + 1
            it.set_state(restored["iterator_state"])
        while step < steps:
            batch = next(it)
            bs = NamedSharding(mesh, P("replica"))
            x = jax.device_put(batch["x"], bs)
            y = jax.device_put(batch["y"], bs)
            rng["key"], sub = jax.random.split(rng["key"])
            state = train_step(state, x, y, sub)
            if step % snapshot_interval == 0:
                snap.save(step, {"state": state, "step": step, "iterator_state": it.get_state()})
            if mgr.available_inactive_slices:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh = make_mesh()
                state = jax.device_put(state, NamedSharding(mesh, P()))
            step += 1
        return state

    state = run()
    snap.join()
    return state
