# ruff: noqa
"""Correct: flax.nnx model + nnx.Optimizer (optax chain: clip + adam w/ exponential decay),
nnx Dropout driven by the model's own Rngs stream (snapshotted with nnx.state), guide-style loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
import grain
from grain.experimental import ElasticIterator
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager as elastic_manager_lib
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

GLOBAL_BATCH = 12


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(4, 16, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)
        self.l2 = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(nnx.relu(self.l1(x))))[..., 0]


def _example(i):
    rng = np.random.default_rng(int(i))
    x = rng.standard_normal(4).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x.sum() * 0.5)}


def make_iterator():
    return ElasticIterator(
        grain.MapDataset.range(4096).map(_example), GLOBAL_BATCH, grain.sharding.NoSharding()
    )


def make_mesh(mgr, per_slice):
    devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
    return Mesh(
        np.asarray(devs).reshape(len(mgr.active_slice_indices), per_slice), ("replica", "model")
    )


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def build(mesh, total_steps):
    model = Model(nnx.Rngs(params=0, dropout=1))
    sched = optax.exponential_decay(3e-3, transition_steps=total_steps, decay_rate=0.3)
    optimizer = nnx.Optimizer(
        model, optax.chain(optax.clip_by_global_norm(1.0), optax.adam(sched)), wrt=nnx.Param
    )
    repl = NamedSharding(mesh, P())
    state = jax.device_put(nnx.state((model, optimizer)), repl)
    nnx.update((model, optimizer), state)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), state)
    return model, optimizer, abstract, NamedSharding(mesh, P("replica"))


def main(*, devices=None, steps=30, **_):
    mgr = elastic_manager_lib.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=2,
        timeout=300,
        retry_policy=elastic_manager_lib.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        mesh = make_mesh(mgr, per_slice)
        model, optimizer, abstract, bsh = build(mesh, steps)
        it = make_iterator()
        step = 0
        if snapshotter.latest is not None:
            snapshotter.join()
            restored = snapshotter.load({"nnx": abstract, "step": step, "data": it.get_state()})
            nnx.update((model, optimizer), restored["nnx"])
            it.set_state(restored["data"])
            step = restored["step"] + 1
        while step < steps:
            batch = next(it)
            train_step(
                model, optimizer, jax.device_put(batch["x"], bsh), jax.device_put(batch["y"], bsh)
            )
            if step % 3 == 0:
                snapshotter.save(
                    step,
                    {"nnx": nnx.state((model, optimizer)), "step": step, "data": it.get_state()},
                )
            if mgr.available_inactive_slices:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh = make_mesh(mgr, per_slice)
                repl = NamedSharding(mesh, P())
                nnx.update((model, optimizer), jax.device_put(nnx.state((model, optimizer)), repl))
                bsh = NamedSharding(mesh, P("replica"))
            step += 1
        return nnx.state((model, optimizer))

    state = run()
    snapshotter.join()
    return state
