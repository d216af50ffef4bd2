# ruff: noqa
"""CORRECT: explicit in_shardings/out_shardings + donate_argnums, mesh from
mesh_utils.create_device_mesh over the manager's ACTIVE devices, rebuilt in every
elastic_retry attempt (replica-resize mode). Snapshotter + ElasticIterator, the
snapshot holds state, step and iterator position. SIGTERM -> orbax
CheckpointManager save into checkpoint_dir, resumed on the next run.

Ported from a multi-controller job that used mesh_utils.create_device_mesh; the
only change was passing devices=<active devices> and building jit per attempt.
"""

import os
import signal

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.experimental import mesh_utils
from jax.sharding import NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as elastic_manager_lib

D, H = 8, 16
GLOBAL_BATCH = 24
N_RECORDS = 4000


def make_example(i):
    rng = np.random.default_rng(int(i))
    x = rng.normal(size=(D,)).astype(np.float32)
    y = np.float32(np.sin(x.sum()))
    return {"id": np.int64(i), "x": x, "y": y}


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (D, H)) * 0.3,
        "b1": jnp.zeros((H,)),
        "w2": jax.random.normal(k2, (H,)) * 0.3,
    }


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


TX = optax.adamw(1e-2)


def main(devices=None, checkpoint_dir=None, steps=40, snapshot_interval=2):
    mgr = elastic_manager_lib.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))

    preempted = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: preempted.__setitem__("flag", True))

    ckpt_mgr = None
    if checkpoint_dir:
        ckpt_mgr = ocp.CheckpointManager(
            os.path.join(checkpoint_dir, "ckpt"),
            options=ocp.CheckpointManagerOptions(max_to_keep=2),
        )

    def active_devices():
        return [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]

    def build(mesh):
        rep = NamedSharding(mesh, P())
        data_sh = NamedSharding(mesh, P(("replica", "model")))
        params = jax.jit(init_params, out_shardings=rep)(jax.random.key(0))
        opt_state = jax.jit(TX.init, out_shardings=rep)(params)
        state = {"params": params, "opt": opt_state}
        state_sh = jax.tree.map(lambda _: rep, state)

        def train_step(state, x, y):
            loss, g = jax.value_and_grad(loss_fn)(state["params"], x, y)
            upd, opt = TX.update(g, state["opt"], state["params"])
            return {"params": optax.apply_updates(state["params"], upd), "opt": opt}, loss

        step_fn = jax.jit(
            train_step,
            in_shardings=(state_sh, data_sh, data_sh),
            out_shardings=(state_sh, rep),
            donate_argnums=(0,),
        )
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state, state_sh
        )
        return state, abstract, step_fn, data_sh

    def make_iter():
        ds = grain.MapDataset.range(N_RECORDS).map(make_example)
        return grain.experimental.ElasticIterator(ds, GLOBAL_BATCH, grain.sharding.NoSharding())

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        timeout=300,
        retry_policy=elastic_manager_lib.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        devs = active_devices()
        mesh = jax.sharding.Mesh(
            mesh_utils.create_device_mesh((len(devs) // per_slice, per_slice), devices=devs),
            ("replica", "model"),
        )
        state, abstract, step_fn, data_sh = build(mesh)
        it = make_iter()
        step = 0
        if snapshotter.latest is not None:
            snapshotter.join()
            r = snapshotter.load({"state": abstract, "step": 0, "iter": it.get_state()})
            state, step = r["state"], int(r["step"]) + 1
            it.set_state(r["iter"])
        elif ckpt_mgr is not None and ckpt_mgr.latest_step() is not None:
            last = ckpt_mgr.latest_step()
            r = ckpt_mgr.restore(
                last,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
                ),
            )
            state, step = r["state"], int(r["meta"]["step"]) + 1
            it.set_state(r["meta"]["iter"])

        while step < steps:
            batch = next(it)
            state, loss = step_fn(state, batch["x"], batch["y"])
            if step % snapshot_interval == 0:
                snapshotter.save(step, {"state": state, "step": step, "iter": it.get_state()})
            if preempted["flag"] and ckpt_mgr is not None:
                ckpt_mgr.save(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardSave(state),
                        meta=ocp.args.JsonSave({"step": step, "iter": it.get_state()}),
                    ),
                    force=True,
                )
                ckpt_mgr.wait_until_finished()
                return None
            if mgr.available_inactive_slices:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                devs = active_devices()
                mesh = jax.sharding.Mesh(
                    mesh_utils.create_device_mesh(
                        (len(devs) // per_slice, per_slice), devices=devs
                    ),
                    ("replica", "model"),
                )
                pos = it.get_state()
                _, abstract, step_fn, data_sh = build(mesh)
                it = make_iter()
                it.set_state(pos)
                state = jax.device_put(state, jax.tree.map(lambda a: a.sharding, abstract))
            step += 1
        return state

    state = run()
    snapshotter.join()
    if ckpt_mgr is not None:
        ckpt_mgr.close()
    return state
