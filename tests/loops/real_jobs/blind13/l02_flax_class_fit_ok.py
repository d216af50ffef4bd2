# ruff: noqa
"""Correct: flax.linen TrainState, typed PRNG key carried in the state (dropout), Trainer class with fit(); pause-resume."""

import numpy as np
import jax
import jax.numpy as jnp
import optax
import flax.linen as nn
from flax.training import train_state
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter


class Src:
    def __init__(self, n=2048):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        i = int(i)
        x = np.sin(np.arange(6, dtype=np.float32) * (i + 1) * 0.01)
        return {"ids": np.int32(i), "x": x, "y": np.float32(np.cos(i * 0.02))}

    def __repr__(self):
        return f"Src(n={self.n})"


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x, train, rngs_key=None):
        h = nn.relu(nn.Dense(16)(x))
        h = nn.Dropout(0.2, deterministic=not train)(h, rng=rngs_key)
        return nn.Dense(1)(h)[..., 0]


class TS(train_state.TrainState):
    key: jax.Array


class Trainer:
    def __init__(self, devices=None, steps=24, batch=8):
        self.steps, self.batch = steps, batch
        self.model = MLP()
        self.tx = optax.adam(3e-3)
        self.mgr = em.Manager(devices)
        self.snap = Snapshotter()
        self._step = jax.jit(self._train_step)

    def _train_step(self, st, x, y):
        key, sub = jax.random.split(st.key)

        def lf(p):
            pred = st.apply_fn({"params": p}, x, True, sub)
            return jnp.mean((pred - y) ** 2)

        loss, g = jax.value_and_grad(lf)(st.params)
        st = st.apply_gradients(grads=g).replace(key=key)
        return st, loss

    def _fresh(self, rep):
        k = jax.random.key(42)
        k, init_k = jax.random.split(k)
        params = self.model.init(init_k, jnp.zeros((1, 6)), False)["params"]
        st = TS.create(apply_fn=self.model.apply, params=params, tx=self.tx, key=k)
        return jax.device_put(st, rep)

    def _attempt(self):
        act = sorted(self.mgr.active_slice_indices)
        mesh = Mesh(np.array([self.mgr.slice_to_devices[s] for s in act]), ("r", "d"))
        rep = NamedSharding(mesh, P())
        st = self._fresh(rep)
        pos, start = {"global_next_index": 0}, 0
        if self.snap.latest is not None:
            self.snap.join()
            target = {
                "st": jax.tree.map(
                    lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), st
                ),
                "pos": pos,
                "next": 0,
            }
            got = self.snap.load(target)
            st, pos, start = got["st"], got["pos"], got["next"]
        it = ElasticIterator(
            grain.MapDataset.source(Src()), self.batch, grain.sharding.ShardOptions(0, 1)
        )
        it.set_state(pos)
        for s in range(start, self.steps):
            b = next(it)
            st, loss = self._step(st, jax.device_put(b["x"], rep), jax.device_put(b["y"], rep))
            self.snap.save(s, {"st": st, "pos": it.get_state(), "next": s + 1})
        return st

    def fit(self):
        return self.mgr.elastic_retry(poll_interval=1, retry_policy=em.ElasticRetryLimit(20))(
            self._attempt
        )()


def main(devices=None, steps=24):
    st = Trainer(devices, steps).fit()
    return {
        "params": st.params,
        "opt": st.opt_state,
        "step": st.step,
        "key": jax.random.key_data(st.key),
    }
