"""Correct: a class-based trainer that accumulates 2 micro-batches per optimizer step, so its step
counter moves once per 2 batches. Written by a black-box tester who did not read the judges; the
resume-step judge counted one step per batch and failed it in 9 of 10 scenarios ("it resumed at
step 3, not step 5") until it learned the batches per step from attempts that restored nothing.
Registered-dataclass TrainState (the step on device as int32), pause-and-resume mode, fixed
batch, a snapshot every 2 optimizer steps, a v1 save_pytree checkpoint on SIGTERM."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def make_record(i):
    i = int(i)
    rng = np.random.default_rng(i)
    x = rng.standard_normal(3).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x.sum() * 0.5 - 0.1)}


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainState:
    w: Any
    b: Any
    vel_w: Any
    vel_b: Any
    step: Any  # int32 scalar on device


class Trainer:
    def __init__(
        self,
        devices=None,
        checkpoint_dir=None,
        total_steps=14,
        micro_batch=8,
        accum=2,
        snapshot_every=2,
        lr=0.1,
    ):
        import orbax.checkpoint as ocp
        from pathwaysutils.elastic import manager

        self.manager = manager.Manager(devices)
        self.snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        self.per_slice = len(self.manager.slice_to_devices[0])
        self.checkpoint_dir = checkpoint_dir
        self.total_steps = total_steps
        self.micro_batch = micro_batch
        self.accum = accum
        self.snapshot_every = snapshot_every
        self.lr = lr
        import grain

        self.data = grain.MapDataset.range(50_000).map(make_record)
        self.preempted = threading.Event()

    # -- mesh and shardings
    def mesh(self):
        devs = [
            d
            for s in sorted(self.manager.active_slice_indices)
            for d in self.manager.slice_to_devices[s]
        ]
        arr = np.asarray(devs, dtype=object).reshape(
            self.manager.active_slice_count, self.per_slice
        )
        return jax.sharding.Mesh(arr, ("replica", "model"))

    def shardings(self, mesh):
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        rep = NamedSharding(mesh, P())
        return TrainState(
            w=NamedSharding(mesh, P(None, "model")),
            b=rep,
            vel_w=NamedSharding(mesh, P(None, "model")),
            vel_b=rep,
            step=rep,
        )

    @staticmethod
    def fresh_state():
        w = jnp.full((3, 4), 0.05, jnp.float32) * jnp.arange(1, 5, dtype=jnp.float32)
        return TrainState(
            w=w,
            b=jnp.zeros((), jnp.float32),
            vel_w=jnp.zeros_like(w),
            vel_b=jnp.zeros((), jnp.float32),
            step=jnp.zeros((), jnp.int32),
        )

    @staticmethod
    def grads(state, x, y):
        def loss(w, b):
            pred = jnp.sum(x @ w, axis=1) / 4 + b
            return jnp.mean((pred - y) ** 2)

        return jax.grad(loss, argnums=(0, 1))(state.w, state.b)

    def apply(self, state, gw, gb):
        vw = 0.8 * state.vel_w + gw
        vb = 0.8 * state.vel_b + gb
        return TrainState(
            w=state.w - self.lr * vw,
            b=state.b - self.lr * vb,
            vel_w=vw,
            vel_b=vb,
            step=state.step + 1,
        )

    def compile(self, mesh):
        sh = self.shardings(mesh)
        grad_fn = jax.jit(self.grads)
        add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
        apply = jax.jit(
            lambda s, gw, gb: self.apply(s, gw / self.accum, gb / self.accum), out_shardings=sh
        )
        return sh, grad_fn, add, apply

    def new_iterator(self):
        import grain
        from grain.experimental import ElasticIterator

        return ElasticIterator(self.data, self.micro_batch, grain.sharding.NoSharding())

    def place(self, batch, mesh):
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        s = NamedSharding(mesh, P("replica"))
        return jax.device_put(batch["x"], s), jax.device_put(batch["y"], s)

    def payload(self, state, it):
        return {"state": state, "iterator": it.get_state()}

    # -- one attempt
    def attempt(self):
        mesh = self.mesh()
        sh, grad_fn, add, apply = self.compile(mesh)
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(self.fresh_state),
            sh,
        )
        it = self.new_iterator()
        ckpt = self.latest_ckpt()
        if self.snapshotter.latest is not None:
            self.snapshotter.join()
            got = self.snapshotter.load({"state": abstract, "iterator": it.get_state()})
            state = got["state"]
            it.set_state(got["iterator"])
        elif ckpt is not None:
            from orbax.checkpoint import v1 as ocp1

            got = ocp1.load_pytree(ckpt, {"state": abstract, "iterator": it.get_state()})
            state = got["state"]
            it.set_state(got["iterator"])
        else:
            state = jax.device_put(self.fresh_state(), sh)

        n = int(state.step)
        while n < self.total_steps:
            gw = gb = None
            for _ in range(self.accum):
                mb = next(it)
                g = grad_fn(state, *self.place(mb, mesh))
                if gw is None:
                    gw, gb = g
                else:
                    gw, gb = add((gw, gb), g)
            state = apply(state, gw, gb)
            n += 1
            if n % self.snapshot_every == 0:
                self.snapshotter.save(n, self.payload(state, it))
            if self.preempted.is_set():
                self.write_ckpt(state, it, n)
                return None
        return state

    def latest_ckpt(self):
        d = self.checkpoint_dir
        if not d or not os.path.isdir(d):
            return None
        c = sorted(p for p in Path(d).iterdir() if p.name.startswith("ckpt_") and p.is_dir())
        return c[-1] if c else None

    def write_ckpt(self, state, it, n):
        from orbax.checkpoint import v1 as ocp1

        if not self.checkpoint_dir:
            raise RuntimeError("no checkpoint_dir")
        ocp1.save_pytree(Path(self.checkpoint_dir) / f"ckpt_{n:06d}", self.payload(state, it))

    def fit(self):
        from pathwaysutils.elastic import manager

        prev = None
        if threading.current_thread() is threading.main_thread():
            prev = signal.signal(signal.SIGTERM, lambda *_: self.preempted.set())
        run = self.manager.elastic_retry(
            minimum_slice_count=None,
            poll_interval=5,
            timeout=300,
            retry_policy=manager.ElasticRetryLimit(max_attempts=12),
        )(self.attempt)
        try:
            out = run()
            self.snapshotter.join()
        finally:
            if prev is not None:
                signal.signal(signal.SIGTERM, prev)
        if out is None:
            return None
        return dataclasses.asdict(jax.device_get(out))


def main(devices=None, checkpoint_dir=None, **kw):
    return Trainer(devices=devices, checkpoint_dir=checkpoint_dir, **kw).fit()
