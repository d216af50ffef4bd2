# ruff: noqa
"""BROKEN: 'robust' step wrapper: `try: ... except Exception: log and skip the batch`
around the device_put + step + loss fetch. Meant for NaN/host hiccups, it also swallows
the slice-down JaxRuntimeError, so elastic_retry never sees it; the loop then keeps
training on a mesh with a dead slice (every later step also fails and is skipped)."""

import logging
import jax, jax.numpy as jnp, numpy as np
import grain, grain.experimental as gexp
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as mgr

log = logging.getLogger("b05")
GB = 12


def main(devices=None, steps=30, **_):
    em = mgr.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds = grain.MapDataset.range(steps * GB + 16).map(
        lambda i: {"id": np.int32(i), "x": np.float32([i % 4, 1.0]), "y": np.float32(i % 4 * 0.5)}
    )
    skipped = []

    @em.elastic_retry(
        minimum_slice_count=1, poll_interval=5, timeout=600, retry_policy=mgr.ElasticRetryLimit(5)
    )
    def run():
        devs = [d for s in sorted(em.active_slice_indices) for d in em.slice_to_devices[s]]
        mesh = Mesh(np.array(devs).reshape(em.active_slice_count, -1), ("replica", "model"))
        R, X = NamedSharding(mesh, P()), NamedSharding(mesh, P("replica"))
        w = jax.device_put(jnp.zeros((2,)), R)
        it = gexp.ElasticIterator(ds, GB, grain.sharding.ShardOptions(0, 1))
        step = 0
        if snap.latest is not None:
            snap.join()
            r = snap.load(
                {
                    "w": jax.ShapeDtypeStruct((2,), jnp.float32, sharding=R),
                    "step": 0,
                    "it": it.get_state(),
                }
            )
            w, step = r["w"], int(r["step"])
            it.set_state(r["it"])
        f = jax.jit(
            lambda w, x, y: (lambda l_g: (w - 0.1 * l_g[1], l_g[0]))(
                jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
            )
        )
        while step < steps:
            b = next(it)
            try:
                new_w, loss = f(w, jax.device_put(b["x"], X), jax.device_put(b["y"], X))
                if not np.isfinite(float(loss)):
                    raise FloatingPointError("nan loss")
                w = new_w
            except Exception as e:  # BUG: swallows slice-down errors too
                log.warning("skipping batch at step %d: %s", step, e)
                skipped.append(step)
            step += 1
            if step % 2 == 0:
                try:
                    snap.save(step, {"w": w, "step": step, "it": it.get_state()})
                except Exception as e:
                    log.warning("snapshot failed: %s", e)
        return w

    w = run()
    snap.join()
    return w
