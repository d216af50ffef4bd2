# ruff: noqa
"""Shared bits for our team's small elastic jobs."""

import numpy as np
import jax
import jax.numpy as jnp
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

GLOBAL_BATCH = 12
DIM = 4


class ToySource:
    def __init__(self, n=240):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        return {
            "id": np.int64(i),
            "x": rng.normal(size=(DIM,)).astype(np.float32),
            "y": np.float32(i % 3),
        }

    def __repr__(self):
        return f"ToySource(n={self.n})"


def make_iterator():
    ds = grain.MapDataset.source(ToySource())
    return ElasticIterator(ds, GLOBAL_BATCH, grain.sharding.ShardOptions(0, 1))


def active_devices(mgr):
    return [d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]]


def make_mesh(mgr):
    devs = active_devices(mgr)
    n = len(mgr.active_slice_indices)
    return Mesh(np.asarray(devs).reshape(n, -1), ("replica", "model"))


def init_params():
    k = jax.random.PRNGKey(0)
    return {"w": jax.random.normal(k, (DIM,), jnp.float32) * 0.1, "b": jnp.zeros((), jnp.float32)}


def loss_fn(p, x, y):
    pred = x @ p["w"] + p["b"]
    return jnp.mean((pred - y) ** 2)


@jax.jit
def train_step(p, x, y):
    l, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), l


def place_batch(mesh, batch):
    s = NamedSharding(mesh, P("replica"))
    return jax.device_put(batch["x"], s), jax.device_put(batch["y"], s)


def replicate(mesh, tree):
    return jax.device_put(tree, NamedSharding(mesh, P()))
