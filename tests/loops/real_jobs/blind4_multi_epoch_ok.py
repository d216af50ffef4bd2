# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fifth session, first tester); kept as written.
"""CORRECT: multi-epoch training on a small dataset (120 records, 6 epochs in 30 steps): grain MapDataset.shuffle(seed).repeat(10), so every sample id legitimately appears once per epoch. Based on style 1: flax.linen MLP + optax adamw(warmup_cosine), state as a dict pytree,
Pathways Snapshotter + grain ElasticIterator, resize mode, scale-up in loop, donate_argnums.

The LR schedule reads opt_state's own count, which is in the snapshot.
"""

import functools

import flax.linen as nn
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as pw_manager

N_RECORDS = 120  # small dataset: 30 steps x 24 = 6 epochs
GLOBAL_BATCH = 24
SNAPSHOT_EVERY = 5


def make_record(i):
    rng = np.random.default_rng(int(i))
    x = rng.normal(size=(4,)).astype(np.float32)
    y = np.array([x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)], np.float32)
    return {"id": np.int32(i), "x": x, "y": y}


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(16)(x)
        x = nn.gelu(x)
        return nn.Dense(1)(x)


def build_mesh(mgr):
    devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    return Mesh(
        np.asarray(devs).reshape(len(mgr.active_slice_indices), per_slice), ("replica", "model")
    )


def main(devices=None, steps=30, checkpoint_dir=None):
    mgr = pw_manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    model = MLP()
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, 3e-2, warmup_steps=5, decay_steps=steps, end_value=1e-3
    )
    tx = optax.adamw(schedule, weight_decay=1e-3)
    # multi-epoch: shuffle within each epoch (seeded per epoch by grain), repeat 10 epochs
    ds = grain.MapDataset.range(N_RECORDS).shuffle(seed=7).repeat(10).map(make_record)

    def init_state():
        params = model.init(jax.random.key(0), jnp.zeros((1, 4)))["params"]
        return {"params": params, "opt_state": tx.init(params)}

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state, x, y):
        def loss_fn(p):
            pred = model.apply({"params": p}, x)
            return jnp.mean((pred - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        return {
            "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state,
        }, loss

    def setup(mesh):
        repl = NamedSharding(mesh, P())
        abstract = jax.eval_shape(init_state)
        shardings = jax.tree.map(lambda _: repl, abstract)
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
        )
        it = grain.experimental.ElasticIterator(ds, GLOBAL_BATCH, grain.sharding.NoSharding())
        return abstract, shardings, it

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=10,
        timeout=300,
        retry_policy=pw_manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        mesh = build_mesh(mgr)
        abstract, shardings, it = setup(mesh)
        data_sh = NamedSharding(mesh, P(("replica", "model")))
        step = 0
        if snap.latest is not None:
            snap.join()
            restored = snap.load({"state": abstract, "step": 0, "data": it.get_state()})
            state = restored["state"]
            step = int(restored["step"]) + 1
            it.set_state(restored["data"])
        else:
            state = jax.device_put(init_state(), shardings)

        while step < steps:
            batch = next(it)
            x = jax.device_put(batch["x"], data_sh)
            y = jax.device_put(batch["y"], data_sh)
            state, loss = train_step(state, x, y)
            if step % SNAPSHOT_EVERY == 0:
                snap.save(step, {"state": state, "step": step, "data": it.get_state()})
            if mgr.available_inactive_slices:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh = build_mesh(mgr)
                pos = it.get_state()
                abstract, shardings, it = setup(mesh)
                it.set_state(pos)
                data_sh = NamedSharding(mesh, P(("replica", "model")))
                state = jax.device_put(state, shardings)
            step += 1
        return state

    state = run()
    snap.join()
    return state
