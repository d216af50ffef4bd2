# ruff: noqa
"""Correct: hand-written retry loop (no elastic_retry), pathwaysutils elastic helpers, SGD w/ weight decay."""

import logging
import numpy as np
import jax
import jax.numpy as jnp
import optax
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import elastic
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

log = logging.getLogger("l04")
TX = optax.adamw(1e-2, weight_decay=1e-3)


class DS:
    def __len__(self):
        return 5000

    def __getitem__(self, i):
        i = int(i)
        r = np.random.default_rng(1000 + i)
        return {
            "id": np.int32(i),
            "feat": r.standard_normal(5).astype(np.float32),
            "lbl": np.float32(i % 2),
        }

    def __repr__(self):
        return "DS()"


@jax.jit
def update(p, o, x, y):
    def lf(p):
        logits = x @ p["w"] + p["b"]
        return optax.sigmoid_binary_cross_entropy(logits, y).mean()

    g = jax.grad(lf)(p)
    u, o = TX.update(g, o, p)
    return optax.apply_updates(p, u), o


def main(devices=None, steps=28, global_batch=16):
    mgr = em.Manager(devices)
    snap = Snapshotter()

    def one_attempt():
        sl = sorted(mgr.active_slice_indices)
        mesh = Mesh(np.stack([np.asarray(mgr.slice_to_devices[s]) for s in sl]), ("slice", "dev"))
        rep = NamedSharding(mesh, P())
        p = jax.device_put({"w": jnp.zeros(5), "b": jnp.zeros(())}, rep)
        o = jax.device_put(TX.init(p), rep)
        st = {"p": p, "o": o, "done": 0, "it": {"global_next_index": 0}}
        if snap.latest is not None:
            snap.join()
            st = snap.load(
                jax.tree.map(
                    lambda a: (
                        jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep)
                        if hasattr(a, "sharding")
                        else a
                    ),
                    st,
                )
            )
        it = ElasticIterator(
            grain.MapDataset.source(DS()), global_batch, grain.sharding.ShardOptions(0, 1)
        )
        it.set_state(st["it"])
        p, o = st["p"], st["o"]
        for done in range(st["done"], steps):
            b = next(it)
            p, o = update(p, o, jax.device_put(b["feat"], rep), jax.device_put(b["lbl"], rep))
            snap.save(done, {"p": p, "o": o, "done": done + 1, "it": it.get_state()})
        return {"p": p, "o": o}

    tries = 0
    while True:
        mgr.active_slice_indices = elastic.wait_for_slices(
            slice_count=1, slice_to_devices=mgr.slice_to_devices, poll_interval=1
        )
        try:
            with jax.default_device(mgr.default_device):
                return one_attempt()
        except jax.errors.JaxRuntimeError as e:
            if not elastic.is_error_due_to_slice_down(e) or tries >= 10:
                raise
            tries += 1
            log.warning("slice down, retrying (%d): %s", tries, str(e)[:80])
