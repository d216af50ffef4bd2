# ruff: noqa
"""Correct: shard_map data-parallel grads (pmean over replica+data), Orbax CheckpointManager every
5 steps to checkpoint_dir in addition to snapshots, SIGTERM -> forced checkpoint, return None."""

import signal
import numpy as np
import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
import grain
from grain.experimental import ElasticIterator
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as em
from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

GB = 24
TX = optax.sgd(0.1, momentum=0.8, nesterov=True)


class Pts:
    def __len__(self):
        return 6000

    def __getitem__(self, i):
        i = int(i)
        t = np.float32(i % 97) / 97.0
        return {
            "id": np.int64(i),
            "x": np.array([t, t * t, 1.0], np.float32),
            "y": np.float32(2 * t - 0.5),
        }

    def __repr__(self):
        return "Pts(6000)"


def build_step(mesh):
    def local_grad(w, x, y):
        g = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return jax.lax.pmean(g, ("replica", "data"))

    grad = jax.shard_map(
        local_grad,
        mesh=mesh,
        in_specs=(P(), P(("replica", "data")), P(("replica", "data"))),
        out_specs=P(),
        check_vma=False,
    )

    @jax.jit
    def step(w, o, x, y):
        g = grad(w, x, y)
        u, o = TX.update(g, o, w)
        return optax.apply_updates(w, u), o

    return step


def main(devices=None, checkpoint_dir=None, steps=30):
    preempted = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *a: preempted.__setitem__("flag", True))
    mgr = em.Manager(devices)
    snap = Snapshotter()
    ckm = ocp.CheckpointManager(
        checkpoint_dir, options=ocp.CheckpointManagerOptions(save_interval_steps=5, max_to_keep=2)
    )

    @mgr.elastic_retry(
        minimum_slice_count=1, poll_interval=1, retry_policy=em.ElasticRetryLimit(20)
    )
    def train():
        act = sorted(mgr.active_slice_indices)
        mesh = Mesh(np.array([mgr.slice_to_devices[s] for s in act]), ("replica", "data"))
        rep, dat = NamedSharding(mesh, P()), NamedSharding(mesh, P(("replica", "data")))
        w = jax.device_put(jnp.zeros((3,)), rep)
        o = jax.device_put(TX.init(w), rep)
        done, pos = 0, {"global_next_index": 0}
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), {"w": w, "o": o}
        )
        if snap.latest is not None:
            snap.join()
            r = snap.load({**abstract, "done": 0, "pos": pos})
            w, o, done, pos = r["w"], r["o"], r["done"], r["pos"]
        elif ckm.latest_step() is not None:
            r = ckm.restore(
                ckm.latest_step(),
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
                ),
            )
            w, o = r["state"]["w"], r["state"]["o"]
            done, pos = ckm.latest_step(), r["data"]
        step = build_step(mesh)
        it = ElasticIterator(grain.MapDataset.source(Pts()), GB, grain.sharding.ShardOptions(0, 1))
        it.set_state(pos)
        while done < steps:
            b = next(it)
            w, o = step(w, o, jax.device_put(b["x"], dat), jax.device_put(b["y"], dat))
            done += 1
            print("step", done, act, np.asarray(w), flush=True)
            snap.save(done, {"w": w, "o": o, "done": done, "pos": it.get_state()})
            ckm.save(
                done,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave({"w": w, "o": o}),
                    data=ocp.args.JsonSave(it.get_state()),
                ),
                force=preempted["flag"],
            )
            if preempted["flag"]:
                ckm.wait_until_finished()
                return None
        ckm.wait_until_finished()
        print("FINAL", act, np.asarray(w), np.asarray(o[0].trace), flush=True)
        return {"w": w, "o": o}

    try:
        return train()
    finally:
        ckm.close()
