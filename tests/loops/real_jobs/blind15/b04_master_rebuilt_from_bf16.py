# ruff: noqa: E501 - kept as the blind tester wrote it (formatted only)
"""BROKEN (made here from the tester's l04): the fp32 master is rebuilt from the bf16 copy after a restore; step written with jax.shard_map (pmean over the replica axis); bf16 working params with an fp32 master copy."""

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


def _local_step(state, x, y):
    def loss_fn(p):
        pred = x.astype(jnp.bfloat16) @ p["w"] + p["b"]
        return jnp.mean((pred.astype(jnp.float32) - y) ** 2)

    g = jax.grad(loss_fn)(state["bf16"])
    g = jax.lax.pmean(jax.tree.map(lambda a: a.astype(jnp.float32), g), "replica")
    master = jax.tree.map(lambda m, gg: m - 0.05 * gg, state["master"], g)
    return {"master": master, "bf16": jax.tree.map(lambda m: m.astype(jnp.bfloat16), master)}


_compiled = {}


def train_step(mesh, state, x, y):
    key = (tuple(d.id for d in mesh.devices.flat), mesh.devices.shape)
    if key not in _compiled:
        _compiled[key] = jax.jit(
            jax.shard_map(
                _local_step, mesh=mesh, in_specs=(P(), P("replica"), P("replica")), out_specs=P()
            )
        )
    return _compiled[key](state, x, y)


def main(devices=None, checkpoint_dir=None, steps=40, snapshot_interval=4):
    mgr = pw_manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    dps = len(next(iter(mgr.slice_to_devices.values())))

    def make_mesh():
        act = sorted(mgr.active_slice_indices)
        devs = [d for i in act for d in mgr.slice_to_devices[i]]
        return Mesh(np.asarray(devs).reshape(len(act), dps), ("replica", "model"))

    def init(mesh):
        rep = NamedSharding(mesh, P())
        master = {"w": jnp.zeros((DIM,), jnp.float32), "b": jnp.zeros((), jnp.float32)}
        state = jax.device_put(
            {"master": master, "bf16": jax.tree.map(lambda m: m.astype(jnp.bfloat16), master)}, rep
        )
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
            # the bug: the fp32 master is rebuilt from the bf16 copy (its low bits are lost)
            state = {
                "bf16": state["bf16"],
                "master": jax.tree.map(lambda a: a.astype(jnp.float32), state["bf16"]),
            }
            step = int(restored["step"]) + 1
            it.set_state(restored["iterator_state"])
        while step < steps:
            batch = next(it)
            bs = NamedSharding(mesh, P("replica"))
            x = jax.device_put(batch["x"], bs)
            y = jax.device_put(batch["y"], bs)
            state = train_step(mesh, state, x, y)
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
