# ruff: noqa: E741, RUF059
# Written blind by a tester who did not read the toolkit's code (2026-12-06); kept as written.
"""Pause-resume mode (minimum_slice_count=None), a hand-written batch source class whose
__next__ returns (ids, (x, y)) pairs with its own cursor, dropout keyed by fold_in(key, step),
optax chain with a warmup-cosine schedule, Snapshotter."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pathwaysutils.elastic import manager as pw_manager

GB = 16


class Batches:
    def __init__(self, cursor=0):
        self.cursor = cursor

    def __iter__(self):
        return self

    def __next__(self):
        ids = np.arange(self.cursor, self.cursor + GB, dtype=np.int64)
        self.cursor += GB
        r = np.random.default_rng(ids[0] + 77)
        x = r.uniform(-2, 2, (GB, 3)).astype(np.float32)
        y = (x[:, 0] * x[:, 1] - x[:, 2]).astype(np.float32)
        return ids, (x, y)


class DictBatches(Batches):
    def __next__(self):
        ids, (x, y) = super().__next__()
        return {"ids": ids, "x": x, "y": y}


def gen_pairs(cursor):
    b = Batches(cursor)
    while True:
        yield next(b)


TX = optax.chain(
    optax.clip_by_global_norm(1.0), optax.adam(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 40))
)


def init():
    k = jax.random.split(jax.random.key(11), 3)
    p = {"w1": jax.random.normal(k[0], (3, 16)) * 0.4, "w2": jax.random.normal(k[1], (16,)) * 0.4}
    p = jax.device_get(p)
    return {"params": p, "opt": jax.device_get(TX.init(p))}


@jax.jit
def step_fn(state, x, y, step):
    key = jax.random.fold_in(jax.random.key(99), step)

    def loss(p):
        h = jax.nn.relu(x @ p["w1"])
        keep = jax.random.bernoulli(key, 0.9, h.shape)
        h = jnp.where(keep, h / 0.9, 0.0)
        return jnp.mean((h @ p["w2"] - y) ** 2)

    l, g = jax.value_and_grad(loss)(state["params"])
    u, o = TX.update(g, state["opt"], state["params"])
    return {"params": optax.apply_updates(state["params"], u), "opt": o}, l


def _main(devices=None, steps=20, every=2, bug=None, source="class", **kw):
    mgr = pw_manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    s0 = init()

    @mgr.elastic_retry(
        poll_interval=2, timeout=900, retry_policy=pw_manager.ElasticRetryLimit(max_attempts=6)
    )
    def attempt():
        devs = [d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]]
        mesh = Mesh(
            np.asarray(devs).reshape(mgr.active_slice_count, per_slice), ("replica", "model")
        )
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P(("replica", "model")))
        state = jax.device_put(s0, rep)
        step, cursor = 0, 0
        if snap.latest is not None:
            snap.join()
            abs_state = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), state
            )
            r = snap.load({"state": abs_state, "step": 0, "cursor": 0})
            state, step, cursor = r["state"], r["step"] + 1, r["cursor"]
            if bug == "skip":
                cursor += GB  # BUG: thinks the saved cursor points at the batch of the saved step
            elif bug == "repeat":
                cursor = r["step"] * GB  # BUG: recomputes the cursor from the step, off by one
        start_step = step
        data = Batches(cursor)
        if source == "dict":
            data = DictBatches(cursor)
        elif source == "gen":
            data = gen_pairs(cursor)
        while step < steps:
            if source == "dict":
                d = next(data)
                ids, x, y = d["ids"], d["x"], d["y"]
            else:
                ids, (x, y) = next(data)
            x, y = jax.device_put((x, y), dsh)
            state, l = step_fn(state, x, y, step)
            if step % every == 0:
                snap.save(
                    step,
                    {
                        "state": state,
                        "step": step,
                        "cursor": (step + 1) * GB + (cursor - start_step * GB),
                    },
                )
            step += 1
        return state

    out = attempt()
    snap.join()
    return out


def main(**kw):
    return _main(**kw)


def broken_skip(**kw):
    return _main(bug="skip", **kw)


def broken_repeat(**kw):
    return _main(bug="repeat", **kw)
