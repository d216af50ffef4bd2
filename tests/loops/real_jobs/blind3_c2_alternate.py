# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session, fourth tester); kept as written.
"""C2 (control): sources alternate every step. Otherwise as C: mixture where one source is only used for a warm-up phase: steps 0..5 draw from
a 'warmup' grain ElasticIterator (ids 100000+), later steps from the 'main' one
(ids 0..). Both iterator states are saved in every snapshot and restored.
Resize mode, global batch = 8 * active slices, momentum SGD."""

import numpy as np
import jax
import jax.numpy as jnp
import grain
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager

PER_SLICE = 8
WARMUP_STEPS = 6


def make_ds(seed, id0, n=3000):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 4)).astype(np.float32)
    ys = (xs @ np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)).astype(np.float32)
    return grain.MapDataset.source(list(range(n))).map(
        lambda i: {"ids": np.int32(id0 + i), "x": xs[i], "y": ys[i]}
    )


@jax.jit
def train_step(params, mom, x, y, lr):
    g = jax.grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
    m = jax.tree.map(lambda m, g: 0.9 * m + g, mom, g)
    return jax.tree.map(lambda p, m: p - lr * m, params, m), m


def main(devices=None, steps=24, snapshot_every=4, **_):
    mgr = manager.Manager(devices)
    dps = len(next(iter(mgr.slice_to_devices.values())))
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds_w, ds_m = make_ds(1, 100000), make_ds(2, 0)

    def build():
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        mesh = Mesh(np.asarray(devs).reshape(mgr.active_slice_count, dps), ("replica", "model"))
        gb = PER_SLICE * mgr.active_slice_count
        its = {
            "warmup": grain.experimental.ElasticIterator(ds_w, gb, grain.sharding.NoSharding()),
            "main": grain.experimental.ElasticIterator(ds_m, gb, grain.sharding.NoSharding()),
        }
        return NamedSharding(mesh, P()), NamedSharding(mesh, P("replica")), its

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=60,
        retry_policy=manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        repl, dsh, its = build()
        p0 = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
        params, mom = jax.device_put((p0, jax.tree.map(jnp.zeros_like, p0)), repl)
        step = 0
        if snap.latest is not None:
            snap.join()
            ab = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), (params, mom)
            )
            r = snap.load(
                {
                    "params": ab[0],
                    "mom": ab[1],
                    "step": 0,
                    "warmup": its["warmup"].get_state(),
                    "main": its["main"].get_state(),
                }
            )
            params, mom, step = r["params"], r["mom"], int(r["step"])
            its["warmup"].set_state(r["warmup"])
            its["main"].set_state(r["main"])
        while step < steps:
            src = "warmup" if step % 2 == 0 else "main"
            b = next(its[src])
            lr = 0.01 if src == "warmup" else 0.05
            params, mom = train_step(
                params, mom, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh), lr
            )
            step += 1
            if step % snapshot_every == 0:
                snap.save(
                    step,
                    {
                        "params": params,
                        "mom": mom,
                        "step": step,
                        "warmup": its["warmup"].get_state(),
                        "main": its["main"].get_state(),
                    },
                )
            if mgr.available_inactive_slices:
                pos = {k: v.get_state() for k, v in its.items()}
                mgr.active_slice_indices |= mgr.available_inactive_slices
                repl, dsh, its = build()
                for k in its:
                    its[k].set_state(pos[k])
                params, mom = jax.device_put((params, mom), repl)
        return {"params": params, "mom": mom}

    out = run()
    snap.join()
    return out
