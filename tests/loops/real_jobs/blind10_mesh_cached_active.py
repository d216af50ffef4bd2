# ruff: noqa
"""BROKEN (variant of l06 that builds the cached mesh from the manager's active
slices at the first call, so nothing reads jax.devices()): the mesh is cached across a slice loss. Ported from multi-controller
code where the mesh never changed: get_mesh() is functools.lru_cache'd and built
with jax.make_mesh((num_slices, devices_per_slice), ...) once, at the first
call. Everything else follows the guide (elastic_retry in replica-resize mode,
Snapshotter with state/step/iterator, jit per attempt). After a slice is lost
the next attempt still shards the batch and restores onto the cached mesh that
holds the dead slice.
"""

import functools
import os
import signal

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager

NUM_SLICES = 4
DEVICES_PER_SLICE = 2
BATCH = 24
_term = {"x": False}


_MESH = {}


def get_mesh(em):
    if "mesh" not in _MESH:  # compiled-program caches key on the mesh: keep it stable
        devs = [d for s in sorted(em.active_slice_indices) for d in em.slice_to_devices[s]]
        _MESH["mesh"] = jax.sharding.Mesh(
            np.array(devs).reshape(-1, DEVICES_PER_SLICE), ("data", "model")
        )
    return _MESH["mesh"]


def rec(i):
    v = np.random.default_rng(int(i) * 31 + 1).normal(size=(5,)).astype(np.float32)
    return {"id": np.int64(i), "x": v, "y": np.float32(v[0] * v[1] - v[2])}


TX = optax.adam(1e-2)


def main(devices=None, checkpoint_dir=None, steps=40):
    signal.signal(signal.SIGTERM, lambda *_: _term.update(x=True))
    em = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ckpt = ocp.CheckpointManager(os.path.join(checkpoint_dir, "c")) if checkpoint_dir else None

    @em.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=600,
        retry_policy=manager.ElasticRetryLimit(max_attempts=6),
    )
    def run():
        mesh = get_mesh(em)
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P("data"))

        def init():
            p = {"w": jnp.full((5, 8), 0.1), "v": jnp.full((8,), 0.1)}
            return {"p": p, "o": TX.init(p)}

        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), jax.eval_shape(init)
        )
        state = jax.jit(init, out_shardings=jax.tree.map(lambda a: a.sharding, abstract))()

        @jax.jit
        def step_fn(st, x, y):
            l, g = jax.value_and_grad(lambda p: jnp.mean((jnp.sin(x @ p["w"]) @ p["v"] - y) ** 2))(
                st["p"]
            )
            u, o = TX.update(g, st["o"], st["p"])
            return {"p": optax.apply_updates(st["p"], u), "o": o}, l

        it = grain.experimental.ElasticIterator(
            grain.MapDataset.range(5000).map(rec), BATCH, grain.sharding.NoSharding()
        )
        step = 0
        if snap.latest is not None:
            snap.join()
            r = snap.load({"s": abstract, "step": 0, "it": it.get_state()})
            state, step = r["s"], int(r["step"]) + 1
            it.set_state(r["it"])
        elif ckpt is not None and ckpt.latest_step() is not None:
            r = ckpt.restore(
                ckpt.latest_step(),
                args=ocp.args.Composite(
                    s=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
                ),
            )
            state, step = r.s, r.meta["step"] + 1
            it.set_state(r.meta["it"])
        while step < steps:
            b = next(it)
            state, _ = step_fn(state, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh))
            if step % 2 == 0:
                snap.save(step, {"s": state, "step": step, "it": it.get_state()})
            if _term["x"] and ckpt is not None:
                ckpt.save(
                    step,
                    args=ocp.args.Composite(
                        s=ocp.args.StandardSave(state),
                        meta=ocp.args.JsonSave({"step": step, "it": it.get_state()}),
                    ),
                )
                ckpt.wait_until_finished()
                return None
            step += 1
        return state

    out = run()
    snap.join()
    if ckpt is not None:
        ckpt.close()
    return out
