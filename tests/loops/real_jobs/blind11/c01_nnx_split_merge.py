# ruff: noqa
# INTENDED VERDICT: CORRECT (should survive every scenario).
#
# Ported-from-a-real-job style: a flax nnx model, nnx.split once into (graphdef, params),
# a plain jax.jit step that nnx.merge's the module inside, optax SGD+momentum.
# Replica-resize mode; the mesh is rebuilt from the manager's active slices in every attempt;
# the Snapshotter holds params, optimizer state, step and the ElasticIterator position;
# rejoining slices are claimed in place (the guide's recipe); SIGTERM writes a checkpoint.
import jax
import jax.numpy as jnp
import optax
from flax import nnx
import grain
import grain.experimental as gex
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager as pw_manager

import sys as _sys, pathlib as _pathlib  # kept as written but for this line: the

_sys.path.insert(0, str(_pathlib.Path(__file__).parent))  # tester's helper sits beside it
import jobutil

WORKAROUND_ALIAS = False


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(jobutil.FEATURES, 16, rngs=rngs)
        self.out = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))[..., 0]


def main(devices=None, checkpoint_dir=None, steps=30, snapshot_every=3, global_batch=12):
    elastic = pw_manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    preempt = jobutil.PreemptionCheckpoint(checkpoint_dir)

    graphdef, host_params = nnx.split(MLP(nnx.Rngs(0)), nnx.Param)
    if WORKAROUND_ALIAS:
        # pull the init params to host numpy: a device array on slice 0 that a replicated
        # device_put aliased was deleted by the fake when another slice was lost (see README)
        host_params = jax.device_get(host_params)
    tx = optax.sgd(0.05, momentum=0.9)

    @jax.jit
    def train_step(params, opt_state, x, y):
        def loss_fn(p):
            model = nnx.merge(graphdef, p)
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def fresh_iterator():
        return gex.ElasticIterator(
            jobutil.source_dataset(), global_batch, grain.sharding.ShardOptions(0, 1)
        )

    @elastic.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        retry_policy=pw_manager.ElasticRetryLimit(max_attempts=12),
    )
    def run():
        mesh = jobutil.active_mesh(elastic)
        rep = jobutil.replicated(mesh)
        params = jax.device_put(host_params, rep)
        opt_state = jax.device_put(tx.init(host_params), rep)
        data = fresh_iterator()
        step = 0

        if snapshotter.latest is not None:
            snapshotter.join()
            restored = snapshotter.load(
                {
                    "params": jobutil.abstract_like(params),
                    "opt": jobutil.abstract_like(opt_state),
                    "step": 0,
                    "data": data.get_state(),
                }
            )
            params, opt_state = restored["params"], restored["opt"]
            step = int(restored["step"]) + 1
            data.set_state(restored["data"])
        elif preempt.available():
            st, last, data_state = preempt.restore(
                jobutil.abstract_like({"params": params, "opt": opt_state})
            )
            params, opt_state = st["params"], st["opt"]
            step = last + 1
            data.set_state(data_state)

        while step < steps:
            batch = next(data)
            bs = jobutil.batch_sharding(mesh)
            x = jax.device_put(batch["x"], bs)
            y = jax.device_put(batch["y"], bs)
            params, opt_state, _ = train_step(params, opt_state, x, y)

            if step % snapshot_every == 0:
                snapshotter.save(
                    step,
                    {"params": params, "opt": opt_state, "step": step, "data": data.get_state()},
                )

            if preempt.requested:
                preempt.save(step, {"params": params, "opt": opt_state}, data.get_state())
                return None

            if elastic.available_inactive_slices:
                elastic.active_slice_indices |= elastic.available_inactive_slices
                mesh = jobutil.active_mesh(elastic)
                rep = jobutil.replicated(mesh)
                params = jax.device_put(params, rep)
                opt_state = jax.device_put(opt_state, rep)
            step += 1

        return {"params": params, "opt": opt_state}

    out = run()
    snapshotter.join()
    preempt.close()
    return out
