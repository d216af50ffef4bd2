# ruff: noqa
"""BROKEN: hand-written retry that does NOT wait for slices: on a slice-down error it
logs, sleeps 1 s and re-runs the attempt right away with the manager's (stale) active
slice set, never calling wait_for_slices / never dropping the dead slice, so the new
mesh still holds the lost slice; bounded by 8 failures. Otherwise as l07."""

import time
import jax, jax.numpy as jnp, numpy as np
import grain, grain.experimental as gexp
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import elastic, manager as mgr

GB = 12


class _Grow(Exception):
    pass


def main(devices=None, steps=30, **_):
    em = mgr.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds = grain.MapDataset.range(steps * GB + 24).map(
        lambda i: {
            "id": np.int32(i),
            "x": np.float32([i % 9 / 9, (i * 7) % 5 / 5]),
            "y": np.float32((i % 9) / 9 - 0.2),
        }
    )

    def one_attempt():
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
        upd = jax.jit(lambda w, x, y: w - 0.3 * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w))
        while step < steps:
            b = next(it)
            w = upd(w, jax.device_put(b["x"], X), jax.device_put(b["y"], X))
            step += 1
            if step % 2 == 0 or step == steps:
                snap.save(step, {"w": w, "step": step, "it": it.get_state()})
            if step % 4 == 0 and step < steps and em.inactive_slice_indices:
                back = elastic.get_active_slice_indices(
                    {i: em.slice_to_devices[i] for i in em.inactive_slice_indices}
                )
                if back:
                    snap.join()
                    em.active_slice_indices = em.active_slice_indices | back
                    raise _Grow(back)
        return w

    failures = 0
    with jax.default_device(em.slice_to_devices[min(em.active_slice_indices)][0]):
        pass
    while True:
        try:
            with jax.default_device(em.slice_to_devices[min(em.active_slice_indices)][0]):
                w = one_attempt()
            break
        except _Grow:
            continue
        except jax.errors.JaxRuntimeError as e:
            if not elastic.is_error_due_to_slice_down(e):
                raise
            failures += 1
            if failures > 8:
                raise
            del e
            time.sleep(1)  # BUG: no wait_for_slices, active set never refreshed
    snap.join()
    return w
