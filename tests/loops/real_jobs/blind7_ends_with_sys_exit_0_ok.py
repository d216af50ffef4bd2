# ruff: noqa
"""CORRECT (as a job main): same as l04 but ends with sys.exit(0) after exporting and joining the metrics thread, like a CLI entry point.
ocp.v1.save to an export dir and returns nothing. A non-daemon metrics thread drains
a queue of python floats and is stopped+joined in `finally`. Resize mode; every 5 steps
(right after a snapshot) it polls available_inactive_slices and, if any, raises
ScaleUpSignalError so the next attempt restores on the larger mesh."""

import sys, os, queue, tempfile, threading, logging
import jax, jax.numpy as jnp, numpy as np
import grain, grain.experimental as gexp
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as mgr

log = logging.getLogger("l04")
GB = 12


class Metrics(threading.Thread):
    def __init__(self):
        super().__init__(name="metrics", daemon=False)
        self.q = queue.Queue()
        self.seen = 0

    def run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            self.seen += 1
            log.debug("step %s loss %.4f", *item)


def main(devices=None, steps=30, checkpoint_dir=None, **_):
    em = mgr.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    export = os.path.join(checkpoint_dir or tempfile.mkdtemp(prefix="l04_"), "export")
    ds = grain.MapDataset.range(steps * GB + 24).map(
        lambda i: {
            "ids": np.int32(i),
            "x": np.float32([i % 7, i % 5, 1.0]) / 7.0,
            "y": np.float32(i % 3),
        }
    )
    metrics = Metrics()
    metrics.start()

    @em.elastic_retry(
        minimum_slice_count=2, poll_interval=3, timeout=900, retry_policy=mgr.ElasticRetryLimit(10)
    )
    def attempt():
        devs = [d for s in sorted(em.active_slice_indices) for d in em.slice_to_devices[s]]
        mesh = Mesh(np.array(devs).reshape(em.active_slice_count, -1), ("replica", "model"))
        R, X = NamedSharding(mesh, P()), NamedSharding(mesh, P("replica"))
        params = {
            "w": jax.device_put(jnp.full((3,), 0.1), R),
            "b": jax.device_put(jnp.float32(0.0), R),
        }
        it = gexp.ElasticIterator(ds, GB, grain.sharding.ShardOptions(0, 1))
        step = 0
        if snap.latest is not None:
            snap.join()
            shapes = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=R), params
            )
            back = snap.load({"params": shapes, "next_step": 0, "data": it.get_state()})
            params, step = back["params"], int(back["next_step"])
            it.set_state(back["data"])

        @jax.jit
        def sgd(p, x, y):
            loss, g = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(p)
            return jax.tree.map(lambda a, b: a - 0.2 * b, p, g), loss

        while step < steps:
            b = next(it)
            params, loss = sgd(params, jax.device_put(b["x"], X), jax.device_put(b["y"], X))
            step += 1
            metrics.q.put((step, float(loss)))
            if step % 5 == 0:
                snap.save(step, {"params": params, "next_step": step, "data": it.get_state()})
                if em.available_inactive_slices and step < steps:
                    snap.join()
                    raise mgr.ScaleUpSignalError("grow")
        return params

    try:
        final = attempt()
        ocp.v1.save(export, {"params": final})
        log.info("exported to %s", export)
    finally:
        metrics.q.put(None)
        metrics.join()
    sys.exit(0)
