# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session, second tester); kept as written.
"""Loop 5y (BROKEN): l5 plus dropout on the inputs, with a PRNG key split and
carried in a local variable, NOT in the snapshot: every attempt restarts it from
PRNGKey(7), so after a recovery the dropout masks differ from an uninterrupted run.
Loop 5: resize mode, per-slice batch fixed (8), so the global batch is
8 * active slices; the learning rate follows the linear-scaling rule
lr = base_lr * active/total, passed to the jitted step as an argument.
The state is a NamedTuple (params, momentum, step); snapshot holds it whole."""

from typing import NamedTuple
import numpy as np
import jax
import jax.numpy as jnp
import grain
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager

PER_SLICE = 8
DPS = 2
BASE_LR = 0.05


class State(NamedTuple):
    params: dict
    momentum: dict
    step: jax.Array


def make_ds(n=4000):
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(n, 4)).astype(np.float32)
    ys = (xs @ np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)).astype(np.float32)
    return grain.MapDataset.source(list(range(n))).map(
        lambda i: {"ids": np.int32(i), "x": xs[i], "y": ys[i]}
    )


@jax.jit
def train_step(state, x, y, lr, key):
    keep = jax.random.bernoulli(key, 0.8, x.shape)
    x = jnp.where(keep, x / 0.8, 0.0)

    def loss(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    g = jax.grad(loss)(state.params)
    m = jax.tree.map(lambda m, g: 0.9 * m + g, state.momentum, g)
    p = jax.tree.map(lambda p, m: p - lr * m, state.params, m)
    return State(p, m, state.step + 1)


def init():
    p = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
    return State(p, jax.tree.map(jnp.zeros_like, p), jnp.zeros((), jnp.int32))


def mesh_of(mgr):
    devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
    return Mesh(np.asarray(devs).reshape(mgr.active_slice_count, DPS), ("replica", "model"))


def main(devices=None, steps=30, snapshot_every=4, **_):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds = make_ds()

    def setup():
        mesh = mesh_of(mgr)
        gb = PER_SLICE * mgr.active_slice_count
        lr = BASE_LR * mgr.active_slice_count / mgr.total_slice_count
        it = grain.experimental.ElasticIterator(ds, gb, grain.sharding.NoSharding())
        return mesh, NamedSharding(mesh, P()), NamedSharding(mesh, P("replica")), it, lr

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=60,
        retry_policy=manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        mesh, repl, dsh, it, lr = setup()
        state = jax.device_put(init(), repl)
        if snap.latest is not None:
            snap.join()
            abstract = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), state
            )
            r = snap.load({"state": abstract, "it": it.get_state()})
            state = r["state"]
            it.set_state(r["it"])
        step = int(state.step)
        key = jax.random.PRNGKey(7)  # BUG: not saved in / restored from the snapshot
        while step < steps:
            b = next(it)
            key, sub = jax.random.split(key)
            state = train_step(
                state, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh), lr, sub
            )
            step += 1
            if step % snapshot_every == 0:
                snap.save(step, {"state": state, "it": it.get_state()})
            if mgr.available_inactive_slices:
                pos = it.get_state()
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh, repl, dsh, it, lr = setup()
                it.set_state(pos)
                state = jax.device_put(state, repl)
        return state

    out = run()
    snap.join()
    return out
