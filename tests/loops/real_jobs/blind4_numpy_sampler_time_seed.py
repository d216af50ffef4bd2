# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fifth session, first tester); kept as written.
"""Own numpy data pipeline (BROKEN): the sampler is seeded by time.time_ns(), so a resumed run draws other batches than the ones it would have drawn.
Generator seeded by (base seed, step), so a resumed run re-draws exactly the batch the
fault-free run drew at that step. The snapshot holds only the step (that is the data position).
Sample ids can legitimately repeat across (and within) batches because of replacement.
Flax nnx model + nnx.Optimizer(adam w/ warmup-cosine); state moved through nnx.split/merge.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as elastic_manager

SEED_BY_TIME = True  # BUG: "fresh randomness" each batch; not reproducible after a restore
POOL = 500
BATCH = 16
_X = np.random.default_rng(0).normal(size=(POOL, 3)).astype(np.float32)
_Y = (_X @ np.array([0.3, -1.0, 2.0], np.float32))[:, None]


def batches(start_step, seed):
    step = start_step
    while True:
        if SEED_BY_TIME:
            rng = np.random.default_rng(time.time_ns())
        else:
            rng = np.random.default_rng([seed, step])
        ids = rng.integers(0, POOL, size=BATCH)
        yield {"ids": ids, "x": _X[ids], "y": _Y[ids]}
        step += 1


class Model(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(3, 16, rngs=rngs)
        self.l2 = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.relu(self.l1(x)))


def main(devices=None, steps=30, checkpoint_dir=None, seed=1234):
    mgr = elastic_manager.Manager(devices)
    snapper = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    sched = optax.warmup_cosine_decay_schedule(0.0, 2e-2, 4, steps)

    def fresh():
        model = Model(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(sched), wrt=nnx.Param)

    graphdef, abstract_state = nnx.split(nnx.eval_shape(fresh))

    @jax.jit
    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)

        def loss_fn(m):
            return jnp.mean((m(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    @mgr.elastic_retry(minimum_slice_count=None, poll_interval=10, timeout=600)
    def attempt():
        act = sorted(mgr.active_slice_indices)
        mesh = Mesh(np.array([mgr.slice_to_devices[s] for s in act]), ("replica", "model"))
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P("replica"))
        if snapper.latest is None:
            _, state = nnx.split(fresh())
            state = jax.device_put(state, rep)
            step = 0
        else:
            snapper.join()
            target = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), abstract_state
            )
            r = snapper.load({"opt": target, "step": 0})
            state, step = r["opt"], r["step"] + 1
        gen = batches(step, seed)
        while step < steps:
            b = next(gen)
            state, loss = train_step(
                state, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh)
            )
            if step % 4 == 0:
                snapper.save(step, {"opt": state, "step": step})
            step += 1
        return state

    final = attempt()
    snapper.join()
    return final
