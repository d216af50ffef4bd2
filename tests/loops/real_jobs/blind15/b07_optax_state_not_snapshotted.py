# ruff: noqa: E501, E741 - kept as the blind tester wrote it (formatted only)
"""BROKEN (snapshot holds params but not the optax state; the restore re-inits adamw, resetting moments and the schedule count). Was: a Trainer class; optax adamw with a warmup-cosine schedule (count lives in the optax state,
which is snapshotted); gradient noise from jax.random.fold_in(base_key, step) so it depends only on the step."""

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pathwaysutils.elastic import manager as pw_manager

DIM = 8
GLOBAL_BATCH = 24


def _make(i):
    rng = np.random.default_rng(int(i))
    x = rng.standard_normal(DIM).astype(np.float32)
    return {"ids": np.int64(i), "x": x, "y": np.float32(np.tanh(x[:3]).sum())}


class Trainer:
    def __init__(self, devices=None, steps=40, snapshot_interval=5, seed=0):
        self.steps = steps
        self.snapshot_interval = snapshot_interval
        self.manager = pw_manager.Manager(devices)
        self.snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        self.dps = len(next(iter(self.manager.slice_to_devices.values())))
        self.base_key = jax.random.key(seed)  # host-constant: noise is fold_in(base_key, step)
        sched = optax.warmup_cosine_decay_schedule(0.0, 0.05, 5, steps)
        self.tx = optax.adamw(sched, weight_decay=1e-3)
        self._step = jax.jit(self._train_step)

    # ---- pieces ----
    def mesh(self):
        act = sorted(self.manager.active_slice_indices)
        devs = [d for i in act for d in self.manager.slice_to_devices[i]]
        return Mesh(np.asarray(devs).reshape(len(act), self.dps), ("replica", "model"))

    def init_state(self, mesh):
        params = {
            "w1": jnp.full((DIM, 16), 0.1, jnp.float32),
            "w2": jnp.full((16,), 0.1, jnp.float32),
        }
        state = {"params": params, "opt": self.tx.init(params)}
        return jax.device_put(state, NamedSharding(mesh, P()))

    def data(self):
        ds = grain.MapDataset.range(50_000).map(_make)
        return grain.experimental.ElasticIterator(ds, GLOBAL_BATCH, grain.sharding.NoSharding())

    def _train_step(self, state, x, y, step):
        def loss_fn(p):
            h = jnp.tanh(x @ p["w1"])
            return jnp.mean((h @ p["w2"] - y) ** 2)

        _loss, g = jax.value_and_grad(loss_fn)(state["params"])
        k = jax.random.fold_in(self.base_key, step)
        leaves, tdef = jax.tree.flatten(g)
        ks = jax.random.split(k, len(leaves))
        g = jax.tree.unflatten(
            tdef,
            [l + 1e-3 * jax.random.normal(kk, l.shape) for l, kk in zip(leaves, ks, strict=False)],
        )
        upd, opt = self.tx.update(g, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], upd), "opt": opt}

    # ---- the elastic part ----
    def fit(self):
        @self.manager.elastic_retry(
            minimum_slice_count=2,
            poll_interval=1,
            timeout=120,
            retry_policy=pw_manager.ElasticRetryLimit(max_attempts=8),
        )
        def attempt():
            mesh = self.mesh()
            state = self.init_state(mesh)
            it = self.data()
            step = 0
            if self.snapshotter.latest is not None:
                self.snapshotter.join()
                abstract = jax.tree.map(
                    lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
                )
                r = self.snapshotter.load(
                    {"params": abstract["params"], "step": 0, "data": it.get_state()}
                )
                params, step = r["params"], int(r["step"]) + 1
                state = jax.device_put(
                    {"params": params, "opt": self.tx.init(params)}, NamedSharding(mesh, P())
                )
                it.set_state(r["data"])
            while step < self.steps:
                b = next(it)
                shard = NamedSharding(mesh, P("replica"))
                state = self._step(
                    state, jax.device_put(b["x"], shard), jax.device_put(b["y"], shard), step
                )
                if step % self.snapshot_interval == 0:
                    self.snapshotter.save(
                        step, {"params": state["params"], "step": step, "data": it.get_state()}
                    )
                if self.manager.available_inactive_slices:
                    self.manager.active_slice_indices = (
                        self.manager.active_slice_indices | self.manager.available_inactive_slices
                    )
                    mesh = self.mesh()
                    state = jax.device_put(state, NamedSharding(mesh, P()))
                step += 1
            return state

        out = attempt()
        self.snapshotter.join()
        return out


def main(devices=None, steps=40):
    return Trainer(devices=devices, steps=steps).fit()
