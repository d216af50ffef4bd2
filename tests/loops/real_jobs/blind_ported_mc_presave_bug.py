# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session); kept as written.
"""A multi-controller training loop ported to Pathways: it still computes the
per-host batch from jax.process_count(), shards the grain data by JAX process,
builds global arrays with multihost_utils.host_local_array_to_global_array,
logs on process 0 only, barriers with sync_global_devices before snapshots and
broadcasts the restored step from host 0 - all of which are no-ops or single
process on Pathways, as the migration checks say."""

import logging
import jax
import jax.numpy as jnp
import numpy as np
import grain
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager

log = logging.getLogger("ported")
GLOBAL_BATCH = 24
DATA_AXES = ("replica", "model")


def example(i):
    r = np.random.default_rng(int(i) + 31337)
    x = r.normal(size=(4,)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.sin(x[0]) + x[3])}


def make_input_pipeline():
    ds = grain.MapDataset.range(30000).map(example)
    return grain.experimental.ElasticIterator(
        ds, GLOBAL_BATCH, grain.sharding.ShardByJaxProcess(drop_remainder=True)
    )


def loss_fn(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)


@jax.jit
def train_step(p, x, y):
    l, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), l


def main(devices=None, checkpoint_dir=None, steps=30):
    em = manager.Manager(devices)
    dps = len(em.slice_to_devices[0])
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_host_batch = GLOBAL_BATCH // jax.process_count()
    log.info(
        "process %d/%d, per-host batch %d", jax.process_index(), jax.process_count(), per_host_batch
    )

    @em.elastic_retry(
        minimum_slice_count=1,
        poll_interval=5,
        timeout=300,
        retry_policy=manager.ElasticRetryLimit(6),
    )
    def train_loop():
        devs = [d for s in sorted(em.active_slice_indices) for d in em.slice_to_devices[s]]
        mesh = Mesh(np.asarray(devs).reshape(-1, dps), ("replica", "model"))
        rep = NamedSharding(mesh, P())
        it = make_input_pipeline()
        k = jax.random.key(jax.process_index())
        k1, k2 = jax.random.split(k)
        params = jax.device_put(
            {"w1": jax.random.normal(k1, (4, 6)) * 0.4, "w2": jax.random.normal(k2, (6,)) * 0.4},
            rep,
        )
        step = 0
        if snap.latest is not None:
            snap.join()
            r = snap.load(
                {
                    "params": jax.tree.map(
                        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), params
                    ),
                    "step": 0,
                    "data": it.get_state(),
                }
            )
            params = r["params"]
            step = int(multihost_utils.broadcast_one_to_all(np.int32(r["step"]))) + 1
            it.set_state(r["data"])
        while step < steps:
            local = next(it)
            assert local["x"].shape[0] == per_host_batch
            x, y = multihost_utils.host_local_array_to_global_array(
                (local["x"], local["y"]), mesh, P(DATA_AXES)
            )
            if step % 3 == 0:
                # BUG: snapshot taken at the top of the step, after the batch was drawn
                # but before it was trained: model of step-1 paired with data after step
                multihost_utils.sync_global_devices(f"snapshot_{step}")
                snap.save(step, {"params": params, "step": step, "data": it.get_state()})
            params, loss = train_step(params, x, y)
            if em.available_inactive_slices:
                em.active_slice_indices |= em.available_inactive_slices
                devs = [d for s in sorted(em.active_slice_indices) for d in em.slice_to_devices[s]]
                mesh = Mesh(np.asarray(devs).reshape(-1, dps), ("replica", "model"))
                rep = NamedSharding(mesh, P())
                params = jax.device_put(params, rep)
            step += 1
        return params

    out = train_loop()
    snap.join()
    return out
