# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06); kept as written.
"""No elastic_retry: while/try loop, wait_for_slices, CheckpointManager restore.
variants: ok (restore newest from mgr), hostcopy (no ckpt restore; re-put last host copy and retry the failed batch),
bug_swallow (catch, wait, rebuild mesh, continue with current arrays, no restore), ok_helper (error caught in helper
returning None, outer loop restores)."""

import gc, os
import jax
import jax.numpy as jnp
import numpy as np
import optax
import grain
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import elastic, manager as pw_manager

GB = 24


def rec(i):
    r = np.random.default_rng(int(i) + 31)
    x = r.standard_normal(4).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x[0] * 2 - x[3] + 0.5 * np.sin(7 * x[1]))}


def _main(devices=None, checkpoint_dir=None, steps=20, variant="ok", **kw):
    mgr = pw_manager.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    ck = ocp.CheckpointManager(
        os.path.join(checkpoint_dir, "cm"), options=ocp.CheckpointManagerOptions(max_to_keep=3)
    )
    tx = optax.adam(0.05)
    p0 = {"w": np.full((4,), 0.1, np.float32), "b": np.zeros((), np.float32)}
    s0 = jax.device_get({"params": p0, "opt": tx.init(p0)})

    @jax.jit
    def step_fn(s, x, y):
        def loss(p):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

        l, g = jax.value_and_grad(loss)(s["params"])
        u, o = tx.update(g, s["opt"], s["params"])
        return {"params": optax.apply_updates(s["params"], u), "opt": o}, l

    def shardings():
        devs = [d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]]
        mesh = Mesh(np.asarray(devs).reshape(-1, per_slice), ("data", "fsdp"))
        return NamedSharding(mesh, P()), NamedSharding(mesh, P(("data", "fsdp")))

    def safe_step(state, b, dsh):
        try:
            out = step_fn(state, *jax.device_put((b["x"], b["y"]), dsh))
            jax.block_until_ready(out)
            return out
        except Exception as e:
            if elastic.is_error_due_to_slice_down(e):
                print("slice down in step; will recover")
                return None
            raise

    rep, dsh = shardings()
    it = grain.experimental.ElasticIterator(
        grain.MapDataset.range(GB * 100).map(rec), GB, grain.sharding.NoSharding()
    )
    state = jax.device_put(s0, rep)
    step = 0
    need_restore = False
    host = None
    pending = None
    failures = 0
    while step < steps:
        if need_restore:
            need_restore = False
            rep, dsh = shardings()
            if variant == "hostcopy":
                state = jax.device_put(host, rep)
            elif variant == "bug_swallow":
                state = jax.device_put(state, rep)
            else:
                abstract = jax.tree.map(
                    lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), s0
                )
                state = jax.device_put(s0, rep)
                step = 0
                if variant != "bug_keep_iter":
                    it = grain.experimental.ElasticIterator(
                        grain.MapDataset.range(GB * 100).map(rec), GB, grain.sharding.NoSharding()
                    )
                if ck.latest_step() is not None:
                    which = ck.latest_step()
                    if variant == "bug_older":
                        which = sorted(ck.all_steps())[-2]
                    r = ck.restore(
                        which,
                        args=ocp.args.Composite(
                            state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
                        ),
                    )
                    state = r.state
                    if variant != "bug_keep_iter":
                        it.set_state(r.data)
                    step = which + 1
                continue
        b = pending if pending is not None else next(it)
        pending = None
        if variant == "ok_helper":
            out = safe_step(state, b, dsh)
            if out is None:
                failures += 1
                state = b = None
                gc.collect()
                mgr.active_slice_indices = elastic.wait_for_slices(
                    slice_count=2,
                    slice_to_devices=mgr.slice_to_devices,
                    poll_interval=2,
                    timeout=600,
                )
                need_restore = True
                continue
        else:
            try:
                out = step_fn(state, *jax.device_put((b["x"], b["y"]), dsh))
                jax.block_until_ready(out)
            except jax.errors.JaxRuntimeError as e:
                if not elastic.is_error_due_to_slice_down(e) or failures > 5:
                    raise
                failures += 1
                if variant == "hostcopy":
                    pending = b  # retry the same batch on the new mesh from the host copy
                    state = None
                elif variant != "bug_swallow":
                    state = None
                gc.collect()
                mgr.active_slice_indices = elastic.wait_for_slices(
                    slice_count=2,
                    slice_to_devices=mgr.slice_to_devices,
                    poll_interval=2,
                    timeout=600,
                )
                need_restore = True
                continue
        state, l = out
        if variant == "hostcopy":
            host = jax.device_get(state)
        ck.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(it.get_state())
            ),
        )
        step += 1
    ck.wait_until_finished()
    ck.close()
    mgr.close() if hasattr(mgr, "close") else None
    return state


def ok(**kw):
    return _main(variant="ok", **kw)


def ok_helper(**kw):
    return _main(variant="ok_helper", **kw)


def hostcopy(**kw):
    return _main(variant="hostcopy", **kw)


def bug_swallow(**kw):
    return _main(variant="bug_swallow", **kw)


def bug_older(**kw):
    return _main(variant="bug_older", **kw)


def bug_keep_iter(**kw):
    return _main(variant="bug_keep_iter", **kw)
