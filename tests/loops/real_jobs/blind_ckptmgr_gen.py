# ruff: noqa: RUF059
# Written blind by a tester who did not read the toolkit's code (2026-12-06); kept as written.
"""linen TrainState, orbax CheckpointManager (async) on disk, plain numpy generator with own
cursor, elastic_retry in pause-resume mode, SIGTERM handler that checkpoints and returns None."""

import os
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pathwaysutils.elastic import manager as pw_manager

GB = 24
W = np.linspace(-1.0, 1.0, 6).astype(np.float32)


def batches(cursor):
    """A plain generator over a synthetic dataset; sample i is a function of i."""
    while True:
        ids = np.arange(cursor, cursor + GB, dtype=np.int64)
        rng = np.random.default_rng(ids[0])
        x = (
            rng.standard_normal((GB, 6)).astype(np.float32)
            + (ids[:, None] % 7).astype(np.float32) * 0.1
        )
        yield {"ids": ids, "x": x, "y": (x @ W).astype(np.float32)}
        cursor += GB


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.tanh(nn.Dense(12)(x)))[:, 0]


def _main(devices=None, checkpoint_dir=None, steps=24, save_every=4, variant="ok", **kwargs):
    preempted = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *a: preempted.__setitem__("flag", True))
    ckdir = os.path.join(checkpoint_dir, "ckpts")
    ckpt = ocp.CheckpointManager(
        ckdir,
        options=ocp.CheckpointManagerOptions(
            save_interval_steps=save_every, max_to_keep=4, enable_async_checkpointing=True
        ),
    )
    mgr = pw_manager.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    model = Net()
    tx = optax.sgd(0.05, momentum=0.9)
    params0 = jax.device_get(model.init(jax.random.key(1), jnp.zeros((1, 6)))["params"])

    @jax.jit
    def train_step(ts, x, y):
        def loss_fn(p):
            return jnp.mean((ts.apply_fn({"params": p}, x) - y) ** 2)

        loss, g = jax.value_and_grad(loss_fn)(ts.params)
        return ts.apply_gradients(grads=g), loss

    @mgr.elastic_retry(
        minimum_slice_count=None,
        poll_interval=2,
        timeout=600,
        retry_policy=pw_manager.ElasticRetryLimit(max_attempts=10),
    )
    def run():
        devs = [d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]]
        mesh = Mesh(np.asarray(devs).reshape(-1, per_slice), ("replica", "model"))
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P(("replica", "model")))
        ts = train_state.TrainState.create(apply_fn=model.apply, params=params0, tx=tx)
        ts = jax.device_put(ts, rep)
        cursor, step = 0, 0
        ckpt.wait_until_finished()
        steps_saved = ckpt.all_steps()
        if steps_saved:
            latest = ckpt.latest_step()
            which = latest
            if variant == "older" and len(steps_saved) > 1:
                which = sorted(steps_saved)[-2]  # BUG: restores the one before the latest
            abstract = jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep), ts
            )
            r = ckpt.restore(
                which,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
                ),
            )
            ts = r.state
            cursor = r.data["cursor"]
            step = which + 1
            if variant == "cursor0":
                cursor = 0  # BUG: data position lost after a restore
        gen = batches(cursor)
        while step < steps:
            b = next(gen)
            cursor += GB
            x, y = jax.device_put((b["x"], b["y"]), dsh)
            ts, loss = train_step(ts, x, y)
            if preempted["flag"]:
                ckpt.save(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardSave(ts), data=ocp.args.JsonSave({"cursor": cursor})
                    ),
                    force=True,
                )
                ckpt.wait_until_finished()
                return None
            ckpt.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(ts), data=ocp.args.JsonSave({"cursor": cursor})
                ),
            )
            step += 1
        return ts

    ts = run()
    ckpt.wait_until_finished()
    ckpt.close()
    if ts is None:
        return None
    return {"params": ts.params, "opt_state": ts.opt_state, "step": ts.step}


def main(**kw):
    return _main(**kw)


def broken_older(**kw):
    return _main(variant="older", **kw)


def broken_cursor0(**kw):
    return _main(variant="cursor0", **kw)
