# ruff: noqa
"""Correct: optimizer rebuilt per attempt with an LR schedule offset by the restored step;
metrics history list kept across attempts (truncated on restore); returns a dict of metrics."""

import numpy as np
import jax
import jax.numpy as jnp
import optax
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

sched = optax.warmup_cosine_decay_schedule(0.0, 0.05, 5, 40, 0.001)


class Tokens:
    def __len__(self):
        return 3000

    def __getitem__(self, i):
        i = int(i)
        return {
            "id": np.int64(i),
            "x": np.float32([i % 7, i % 11, i % 13, 1.0]) / 10.0,
            "y": np.float32((i % 5) / 5.0),
        }

    def __repr__(self):
        return "Tokens()"


def make_tx(offset):
    return optax.chain(
        optax.scale_by_adam(), optax.scale_by_learning_rate(lambda c: sched(c + offset))
    )


def main(devices=None, steps=30, batch=12):
    mgr = em.Manager(devices)
    snap = Snapshotter()
    history = []  # python floats, one per committed step

    @mgr.elastic_retry(
        minimum_slice_count=1, poll_interval=1, retry_policy=em.ElasticRetryLimit(20)
    )
    def attempt():
        nonlocal history
        act = sorted(mgr.active_slice_indices)
        mesh = Mesh(
            np.array([mgr.slice_to_devices[s] for s in act]).reshape(len(act), -1), ("replica", "x")
        )
        rep = NamedSharding(mesh, P())
        w = jax.device_put(jnp.zeros((4,)), rep)
        adam0 = jax.device_put(optax.scale_by_adam().init(w), rep)
        start, pos = 0, {"global_next_index": 0}
        if snap.latest is not None:
            snap.join()
            sds = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
            r = snap.load({"w": sds(w), "adam": jax.tree.map(sds, adam0), "step": 0, "pos": pos})
            w, adam0, start, pos = r["w"], r["adam"], r["step"] + 1, r["pos"]
        history = history[:start]
        tx = make_tx(start)
        opt_state = (adam0, jax.device_put(tx.init(w)[1], rep))

        @jax.jit
        def step_fn(w, opt_state, x, y):
            loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
            u, opt_state = tx.update(g, opt_state, w)
            return optax.apply_updates(w, u), opt_state, loss

        it = ElasticIterator(
            grain.MapDataset.source(Tokens()), batch, grain.sharding.ShardOptions(0, 1)
        )
        it.set_state(pos)
        loss = None
        for s in range(start, steps):
            b = next(it)
            w, opt_state, loss = step_fn(
                w, opt_state, jax.device_put(b["x"], rep), jax.device_put(b["y"], rep)
            )
            history.append(float(loss))
            snap.save(s, {"w": w, "adam": opt_state[0], "step": s, "pos": it.get_state()})
        return {
            "final_loss": loss,
            "mean_loss": jnp.asarray(np.mean(history), jnp.float32),
            "lr": jnp.asarray(sched(steps - 1)),
            "w_norm": jnp.linalg.norm(w),
        }

    return attempt()
