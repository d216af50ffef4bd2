# ruff: noqa
"""Correct: lax.scan over micro-batches inside one jitted step (grad accumulation), resize mode."""

import numpy as np
import jax
import jax.numpy as jnp
import optax
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as elastic_manager
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

N_RECORDS, GB, MICRO, DIM = 4096, 16, 4, 8


def _record(i):
    rng = np.random.default_rng(i)
    x = rng.normal(size=(DIM,)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x.sum() * 0.3 + 1.0)}


class Records:
    def __len__(self):
        return N_RECORDS

    def __getitem__(self, i):
        return _record(int(i))

    def __repr__(self):
        return "Records()"


opt = optax.sgd(0.05, momentum=0.9)


def loss_fn(p, x, y):
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)


@jax.jit
def train_step(params, opt_state, x, y):
    xs = x.reshape(MICRO, -1, DIM)
    ys = y.reshape(MICRO, -1)

    def body(acc, xy):
        g = jax.grad(loss_fn)(params, *xy)
        return jax.tree.map(jnp.add, acc, g), None

    zero = jax.tree.map(jnp.zeros_like, params)
    g, _ = jax.lax.scan(body, zero, (xs, ys))
    g = jax.tree.map(lambda a: a / MICRO, g)
    upd, opt_state = opt.update(g, opt_state, params)
    return optax.apply_updates(params, upd), opt_state


def main(devices=None, steps=30):
    mgr = elastic_manager.Manager(devices)
    snap = Snapshotter()

    @mgr.elastic_retry(
        minimum_slice_count=1, poll_interval=1, retry_policy=elastic_manager.ElasticRetryLimit(20)
    )
    def run():
        act = sorted(mgr.active_slice_indices)
        mesh = Mesh(np.array([mgr.slice_to_devices[s] for s in act]), ("replica", "data"))
        rep = NamedSharding(mesh, P())
        params = {"w": jnp.zeros((DIM,), jnp.float32), "b": jnp.zeros((), jnp.float32)}
        params = jax.device_put(params, rep)
        opt_state = jax.device_put(opt.init(params), rep)
        tree = {"params": params, "opt": opt_state, "step": -1, "data": {"global_next_index": 0}}
        if snap.latest is not None:
            snap.join()
            abstract = jax.tree.map(
                lambda a: (
                    jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
                    if isinstance(a, jax.Array)
                    else a
                ),
                tree,
            )
            tree = snap.load(abstract)
        params, opt_state = tree["params"], tree["opt"]
        ds = grain.MapDataset.source(Records())
        it = ElasticIterator(ds, GB, grain.sharding.ShardOptions(0, 1))
        it.set_state(tree["data"])
        for step in range(tree["step"] + 1, steps):
            b = next(it)
            x = jax.device_put(b["x"], rep)
            y = jax.device_put(b["y"], rep)
            params, opt_state = train_step(params, opt_state, x, y)
            snap.save(
                step, {"params": params, "opt": opt_state, "step": step, "data": it.get_state()}
            )
        return {"params": params, "opt": opt_state}

    return run()
