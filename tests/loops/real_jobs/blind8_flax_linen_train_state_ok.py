# ruff: noqa
"""Correct: linen TrainState + optax chain (clip, adamw w/ warmup-cosine), dropout key folded
from state.step, snapshot of {state, step, iterator}, guide-style replica resize + scale-up."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import flax.linen as nn
from flax.training import train_state
import grain
from grain.experimental import ElasticIterator
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager as elastic_manager_lib
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

GLOBAL_BATCH = 12
SNAPSHOT_EVERY = 2


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x, *, train):
        x = nn.Dense(16)(x)
        x = nn.relu(x)
        x = nn.Dropout(0.1, deterministic=not train)(x)
        return nn.Dense(1)(x)[..., 0]


class TrainState(train_state.TrainState):
    dropout_key: jax.Array


def _example(i):
    rng = np.random.default_rng(int(i))
    x = rng.standard_normal(4).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x.sum() * 0.5)}


def make_iterator():
    ds = grain.MapDataset.range(4096).map(_example)
    return ElasticIterator(ds, GLOBAL_BATCH, grain.sharding.NoSharding())


def make_mesh(mgr, per_slice):
    devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
    return Mesh(
        np.asarray(devs).reshape(len(mgr.active_slice_indices), per_slice), ("replica", "model")
    )


def make_tx(total_steps):
    sched = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 5, total_steps, 1e-3)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=1e-4))


def train_step(state, x, y):
    dkey = jax.random.fold_in(state.dropout_key, state.step)

    def loss_fn(params):
        pred = state.apply_fn({"params": params}, x, train=True, rngs={"dropout": dkey})
        return jnp.mean((pred - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def init_loop(mesh, model, tx):
    repl = NamedSharding(mesh, P())
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)), train=False)["params"]
    state = TrainState.create(
        apply_fn=model.apply, params=params, tx=tx, dropout_key=jax.random.PRNGKey(1)
    )
    state = jax.device_put(state, repl)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), state)
    state_sh = jax.tree.map(lambda a: a.sharding, abstract)
    step_fn = jax.jit(train_step, out_shardings=(state_sh, repl))
    return state, abstract, step_fn, make_iterator(), NamedSharding(mesh, P("replica"))


def main(*, devices=None, steps=30, **_):
    mgr = elastic_manager_lib.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    model, tx = (
        MLP(),
        make_tx(steps),
    )  # built once: TrainState's static fields must match on restore

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=2,
        timeout=300,
        retry_policy=elastic_manager_lib.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        mesh = make_mesh(mgr, per_slice)
        state, abstract, step_fn, it, bsh = init_loop(mesh, model, tx)
        step = 0
        if snapshotter.latest is not None:
            snapshotter.join()
            restored = snapshotter.load(
                {"state": abstract, "step": step, "iterator": it.get_state()}
            )
            state = restored["state"]
            step = int(restored["step"]) + 1
            it.set_state(restored["iterator"])
        while step < steps:
            batch = next(it)
            x = jax.device_put(batch["x"], bsh)
            y = jax.device_put(batch["y"], bsh)
            state, loss = step_fn(state, x, y)
            if step % SNAPSHOT_EVERY == 0:
                snapshotter.save(step, {"state": state, "step": step, "iterator": it.get_state()})
            if mgr.available_inactive_slices:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh = make_mesh(mgr, per_slice)
                it_state = it.get_state()
                _, abstract, step_fn, it, bsh = init_loop(mesh, model, tx)
                it.set_state(it_state)
                state = jax.device_put(state, jax.tree.map(lambda a: a.sharding, abstract))
            step += 1
        return state

    state = run()
    snapshotter.join()
    return state
