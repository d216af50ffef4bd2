# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session, fourth tester); kept as written.
"""A: resize mode, per-slice batch 8 (global batch = 8 * active slices).
LR warmup keyed on TOKENS SEEN (host-side python int, restored from the snapshot),
dropout key = fold_in(base_key, step). Saves an initial snapshot at step 0 and
ALWAYS restores at attempt start (also the first attempt). Returns a pytree with
non-array leaves."""

import numpy as np
import jax
import jax.numpy as jnp
import grain
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager

PER_SLICE = 8
BASE_KEY = 1234


def make_ds(n=4000):
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(n, 4)).astype(np.float32)
    ys = (xs @ np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)).astype(np.float32)
    return grain.MapDataset.source(list(range(n))).map(
        lambda i: {"ids": np.int32(i), "x": xs[i], "y": ys[i]}
    )


@jax.jit
def train_step(params, mom, x, y, lr, key):
    def loss(p):
        keep = jax.random.bernoulli(key, 0.9, x.shape)
        xd = jnp.where(keep, x / 0.9, 0.0)
        return jnp.mean((xd @ p["w"] + p["b"] - y) ** 2)

    g = jax.grad(loss)(params)
    m = jax.tree.map(lambda m, g: 0.9 * m + g, mom, g)
    p = jax.tree.map(lambda p, m: p - lr * m, params, m)
    return p, m


def lr_for(tokens):
    return 0.05 * min(1.0, (tokens + 1) / 100.0)


def main(devices=None, steps=30, snapshot_every=4, **_):
    mgr = manager.Manager(devices)
    dps = len(next(iter(mgr.slice_to_devices.values())))
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds = make_ds()
    base = jax.random.PRNGKey(BASE_KEY)

    def mesh_of():
        devs = np.asarray(
            [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        ).reshape(mgr.active_slice_count, dps)
        return Mesh(devs, ("replica", "model"))

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=60,
        retry_policy=manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        mesh = mesh_of()
        repl, dsh = NamedSharding(mesh, P()), NamedSharding(mesh, P("replica"))
        it = grain.experimental.ElasticIterator(
            ds, PER_SLICE * mgr.active_slice_count, grain.sharding.NoSharding()
        )
        p0 = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
        params = jax.device_put(p0, repl)
        mom = jax.device_put(jax.tree.map(jnp.zeros_like, p0), repl)
        step, tokens = 0, 0
        if snap.latest is None:
            snap.save(
                0, {"params": params, "mom": mom, "step": 0, "tokens": 0, "it": it.get_state()}
            )
        snap.join()
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl),
            {"params": params, "mom": mom},
        )
        r = snap.load({**abstract, "step": 0, "tokens": 0, "it": it.get_state()})
        params, mom = r["params"], r["mom"]
        step, tokens = int(r["step"]), int(r["tokens"])
        it.set_state(r["it"])
        while step < steps:
            b = next(it)
            key = jax.random.fold_in(base, step)
            params, mom = train_step(
                params,
                mom,
                jax.device_put(b["x"], dsh),
                jax.device_put(b["y"], dsh),
                lr_for(tokens),
                key,
            )
            tokens += len(b["ids"])
            step += 1
            if step % snapshot_every == 0:
                snap.save(
                    step,
                    {
                        "params": params,
                        "mom": mom,
                        "step": step,
                        "tokens": tokens,
                        "it": it.get_state(),
                    },
                )
            if mgr.available_inactive_slices:
                pos = it.get_state()
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh = mesh_of()
                repl, dsh = NamedSharding(mesh, P()), NamedSharding(mesh, P("replica"))
                it = grain.experimental.ElasticIterator(
                    ds, PER_SLICE * mgr.active_slice_count, grain.sharding.NoSharding()
                )
                it.set_state(pos)
                params, mom = jax.device_put((params, mom), repl)
        return {
            "params": params,
            "mom": mom,
            "step": step,
            "tokens": tokens,
            "name": "run-a",
            "extra": None,
        }

    out = run()
    snap.join()
    return out
