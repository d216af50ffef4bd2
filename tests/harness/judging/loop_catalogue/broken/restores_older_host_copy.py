# ruff: noqa: B905, B020 - a tester's code, in its own style
"""Restores the second-newest of its own host copies (model, step and data position, each
consistent with the others) instead of the newest, with device_put and set_state, not through
the Snapshotter: it trains finished steps again. Written by a black-box tester; the judge used to
say it "started over" and "skipped" samples it never skipped. Functional manual SGD, resize mode,
a batch that scales with the slices, bf16 working and f32 master weights, a snapshot every 3
steps.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

CAUSE = "restore-not-latest"
SCENARIO = "data_loss@batch=10:slice=1:repair_after_polls=3"

DIM = 6


def rec(i):
    i = int(i)
    x = np.cos(np.arange(DIM) * (i % 97 + 1) * 0.11).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.sin(i * 0.01))}


def init():
    master = jnp.linspace(-0.2, 0.2, DIM * 4, dtype=jnp.float32).reshape(DIM, 4)
    head = jnp.ones((4,), jnp.float32) * 0.1
    return {
        "master": (master, head),
        "work": [master.astype(jnp.bfloat16), head.astype(jnp.bfloat16)],
        "count": jnp.zeros((), jnp.int32),
        "key": jax.random.key_data(jax.random.PRNGKey(7)),  # uint32[2]
    }


def shard_specs(mesh):
    r = NamedSharding(mesh, P())
    m = NamedSharding(mesh, P(None, "model"))
    return {
        "master": (m, NamedSharding(mesh, P("model"))),
        "work": [m, NamedSharding(mesh, P("model"))],
        "count": r,
        "key": r,
    }


def step_fn(s, x, y):
    key = jax.random.fold_in(jax.random.wrap_key_data(s["key"]), s["count"])
    keep = jax.random.bernoulli(key, 0.8, (4,)).astype(jnp.float32) / 0.8

    def loss(work):
        w, h = work
        hid = jnp.tanh(x.astype(jnp.bfloat16) @ w).astype(jnp.float32) * keep
        return jnp.mean((hid @ h.astype(jnp.float32) - y) ** 2)

    g = jax.grad(loss)(s["work"])
    master = tuple(m - 0.05 * gi.astype(jnp.float32) for m, gi in zip(s["master"], g))
    return {
        "master": master,
        "work": [m.astype(jnp.bfloat16) for m in master],
        "count": s["count"] + 1,
        "key": s["key"],
    }


def main(devices=None, checkpoint_dir=None, steps=24, per_slice_batch=4, every=3):
    import grain
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    dps = len(mgr.slice_to_devices[0])
    ds = grain.MapDataset.range(1 << 16).map(rec)
    stop = threading.Event()
    history = {}
    old = (
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        if threading.current_thread() is threading.main_thread()
        else None
    )

    def build():
        devs = [d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]]
        mesh = jax.sharding.Mesh(
            np.array(devs, dtype=object).reshape(-1, dps), ("replica", "model")
        )
        sh = shard_specs(mesh)
        fn = jax.jit(step_fn, out_shardings=sh)
        it = ElasticIterator(ds, 8, grain.sharding.NoSharding())
        return mesh, sh, fn, it

    def ckpts():
        if not checkpoint_dir or not os.path.isdir(checkpoint_dir):
            return []
        return sorted(p for p in Path(checkpoint_dir).glob("pre-*") if p.is_dir())

    @mgr.elastic_retry(
        minimum_slice_count=None,
        poll_interval=5,
        timeout=300,
        retry_policy=manager.ElasticRetryLimit(max_attempts=15),
    )
    def attempt():
        mesh, sh, fn, it = build()
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init),
            sh,
        )
        done = 0
        if len(history) >= 2:
            # "the newest snapshot may be half-written when the slice died": take the one before
            snap.join()
            key = sorted(history)[-2]
            host = history[key]
            state = jax.device_put(host["model"], sh)
            done = int(host["done"])
            it.set_state(host["data"])
            for k in sorted(history)[-1:]:
                del history[k]
        elif snap.latest is not None:
            snap.join()
            got = snap.load({"model": abstract, "done": 0, "data": it.get_state()})
            state, done = got["model"], int(got["done"])
            it.set_state(got["data"])
        elif ckpts():
            from orbax.checkpoint import v1 as o1

            got = o1.load_pytree(
                ckpts()[-1], {"model": abstract, "done": 0, "data": it.get_state()}
            )
            state, done = got["model"], int(got["done"])
            it.set_state(got["data"])
        else:
            state = jax.device_put(init(), sh)
        for done in range(done, steps):
            b = next(it)
            xs = NamedSharding(mesh, P("replica"))
            state = fn(state, jax.device_put(b["x"], xs), jax.device_put(b["y"], xs))
            if (done + 1) % every == 0:
                snap.save(done + 1, {"model": state, "done": done + 1, "data": it.get_state()})
                history[done + 1] = {
                    "model": jax.device_get(state),
                    "done": done + 1,
                    "data": it.get_state(),
                }
            if stop.is_set():
                from orbax.checkpoint import v1 as o1

                o1.save_pytree(
                    Path(checkpoint_dir) / f"pre-{done + 1:06d}",
                    {"model": state, "done": done + 1, "data": it.get_state()},
                )
                return None
            if mgr.available_inactive_slices:
                mgr.active_slice_indices = mgr.active_slice_indices | mgr.available_inactive_slices
                pos = it.get_state()
                mesh, sh, fn, it = build()
                it.set_state(pos)
                state = jax.device_put(state, sh)
        return state

    try:
        out = attempt()
        snap.join()
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return None if out is None else jax.device_get(out)
