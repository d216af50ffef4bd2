# ruff: noqa
import functools
import os
import signal
import threading
from pathlib import Path

import numpy as np

FEAT = 4


def rec(i):
    i = int(i)
    x = np.sin(np.arange(1, FEAT + 1, dtype=np.float64) * 0.21 * i + 0.3).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.tanh(x.sum() * 0.4))}


def grain_data(n=50_000):
    import grain

    return grain.MapDataset.range(n).map(rec)


def live_devices(mgr):
    return [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]


def mesh_of(mgr, names=("replica", "model")):
    import jax

    dps = len(mgr.slice_to_devices[0])
    return jax.sharding.Mesh(np.array(live_devices(mgr), dtype=object).reshape(-1, dps), names)


"""CORRECT. Snapshotter every 2 steps AND an orbax CheckpointManager on disk every 5 steps
(checkpoint_dir); on SIGTERM a forced CheckpointManager save and return None. Restores the
newest of (snapshot, disk checkpoint)."""


def init():
    import jax
    import jax.numpy as jnp

    return {"w": jax.random.normal(jax.random.key(5), (FEAT, 6)) * 0.3, "u": jnp.full((6,), 0.2)}


def main(devices=None, checkpoint_dir=None, steps=20):
    import grain
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding, PartitionSpec as P
    from pathwaysutils.elastic import manager

    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = grain_data()
    ckdir = checkpoint_dir or "/tmp/blind6/c04_ckpt_unused"
    cm = ocp.CheckpointManager(
        ckdir, options=ocp.CheckpointManagerOptions(save_interval_steps=5, max_to_keep=3)
    )
    stop = threading.Event()
    prev = (
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        if threading.current_thread() is threading.main_thread()
        else None
    )

    @jax.jit
    def step(p, x, y):
        def loss(p):
            return jnp.mean((jnp.tanh(x @ p["w"]) @ p["u"] - y) ** 2)

        return jax.tree.map(lambda a, g: a - 0.1 * g, p, jax.grad(loss)(p))

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=5,
        timeout=300,
        retry_policy=manager.ElasticRetryLimit(8),
    )
    def run():
        mesh = mesh_of(mgr)
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P("replica"))
        it = ElasticIterator(data, int(mgr.scale_by_active_slices(16)), grain.sharding.NoSharding())
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), jax.eval_shape(init)
        )
        snap_step = snap.latest.step if snap.latest is not None else -1
        disk_step = cm.latest_step()
        disk_step = -1 if disk_step is None else disk_step
        if snap_step >= 0 and snap_step >= disk_step:
            snap.join()
            r = snap.load({"p": abstract, "s": 0, "it": it.get_state()})
            p, s0 = r["p"], r["s"] + 1
            it.set_state(r["it"])
        elif disk_step >= 0:
            r = cm.restore(
                disk_step,
                args=ocp.args.Composite(
                    p=ocp.args.StandardRestore(abstract), it=ocp.args.JsonRestore()
                ),
            )
            p, s0 = r["p"], disk_step + 1
            it.set_state(r["it"])
        else:
            p, s0 = jax.device_put(init(), rep), 0
        for s in range(s0, steps):
            b = next(it)
            p = step(p, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh))
            if s % 2 == 0:
                snap.save(s, {"p": p, "s": s, "it": it.get_state()})
            cm.save(
                s,
                args=ocp.args.Composite(
                    p=ocp.args.StandardSave(p), it=ocp.args.JsonSave(it.get_state())
                ),
                force=stop.is_set(),
            )
            if stop.is_set():
                cm.wait_until_finished()
                return None
        return p

    try:
        p = run()
        snap.join()
        cm.wait_until_finished()
    finally:
        cm.close()
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
    return None if p is None else jax.device_get(p)
