# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session, fourth tester); kept as written.
"""F: keep the EFFECTIVE global batch constant (64 samples per optimizer step):
each draw is 8 * active slices samples, and the loop accumulates
64 / (8 * active) micro-batches per optimizer step (1 on 8 slices... here: 4 slices ->
2 micro-batches of 32; 2 slices -> 4 micro-batches of 16). The optimizer sees the same
64 samples per step in the same order whatever the slice count. Resize mode, optax sgd
with momentum; step / iterator / opt state restored from the snapshot."""

import numpy as np
import jax
import jax.numpy as jnp
import optax
import grain
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager

PER_SLICE = 8
GLOBAL = 64
TX = optax.sgd(0.05, momentum=0.9)


def make_ds(n=4000):
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(n, 4)).astype(np.float32)
    ys = (xs @ np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)).astype(np.float32)
    return grain.MapDataset.source(list(range(n))).map(
        lambda i: {"ids": np.int32(i), "x": xs[i], "y": ys[i]}
    )


@jax.jit
def grad_sum(params, x, y):
    # sum of per-sample gradients (so accumulation is exact up to rounding)
    return jax.grad(lambda p: jnp.sum((x @ p["w"] + p["b"] - y) ** 2))(params)


@jax.jit
def apply(params, opt, gsum):
    g = jax.tree.map(lambda a: a / GLOBAL, gsum)
    u, opt = TX.update(g, opt, params)
    return optax.apply_updates(params, u), opt


def main(devices=None, steps=12, snapshot_every=2, **_):
    mgr = manager.Manager(devices)
    dps = len(next(iter(mgr.slice_to_devices.values())))
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds = make_ds()

    def build():
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        mesh = Mesh(np.asarray(devs).reshape(mgr.active_slice_count, dps), ("replica", "model"))
        micro = PER_SLICE * mgr.active_slice_count
        assert GLOBAL % micro == 0, (GLOBAL, micro)
        it = grain.experimental.ElasticIterator(ds, micro, grain.sharding.NoSharding())
        return NamedSharding(mesh, P()), NamedSharding(mesh, P("replica")), it, GLOBAL // micro

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=60,
        retry_policy=manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        repl, dsh, it, k = build()
        p0 = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
        state = jax.device_put({"params": p0, "opt": TX.init(p0)}, repl)
        step = 0
        if snap.latest is not None:
            snap.join()
            ab = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), state
            )
            r = snap.load({"state": ab, "step": 0, "it": it.get_state()})
            state, step = r["state"], int(r["step"])
            it.set_state(r["it"])
        while step < steps:
            acc = None
            for _ in range(k):
                b = next(it)
                g = grad_sum(
                    state["params"], jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh)
                )
                acc = g if acc is None else jax.tree.map(jnp.add, acc, g)
            p, o = apply(state["params"], state["opt"], acc)
            state = {"params": p, "opt": o}
            step += 1
            if step % snapshot_every == 0:
                snap.save(step, {"state": state, "step": step, "it": it.get_state()})
        return state

    out = run()
    snap.join()
    return out
