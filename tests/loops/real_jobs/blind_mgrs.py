# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06); kept as written.
"""CheckpointManager variants under elastic_retry. grain ElasticIterator, JsonSave of data state.
variants:
 ok_two        : 'latest' manager (max_to_keep=2) + 'best' manager (best_fn loss, max_to_keep=1); restore latest
 eval_best     : ok_two, but after training restore best checkpoint and return it (eval)
 bug_best      : restores from the best manager (older than latest)  BROKEN
 samples       : step label counts samples (step*GB), max_to_keep=1, restore(None)
 interval      : save every step call, save_interval_steps=3, restore(mgr.latest_step())
 fresh_mgr     : new CheckpointManager object each attempt on the same directory
 bug_second    : restores second newest  BROKEN
 bug_keep_iter : restores state from newest ckpt but keeps iterator of failed attempt  BROKEN
"""

import os
import jax
import jax.numpy as jnp
import numpy as np
import optax
import grain
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager as pw_manager

GB = 24


def rec(i):
    r = np.random.default_rng(int(i) + 31)
    x = r.standard_normal(4).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x[0] * 2 - x[3] + 0.5 * np.sin(7 * x[1]))}


def _main(devices=None, checkpoint_dir=None, steps=20, variant="ok_two", best_at=None, **kw):
    mgr = pw_manager.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    interval = 3 if variant == "interval" else 1
    keep = 1 if variant in ("samples", "samples_explicit", "none_restore") else 2

    def make_latest():
        return ocp.CheckpointManager(
            os.path.join(checkpoint_dir, "latest"),
            options=ocp.CheckpointManagerOptions(save_interval_steps=interval, max_to_keep=keep),
        )

    latest = make_latest()
    best = ocp.CheckpointManager(
        os.path.join(checkpoint_dir, "best"),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=1, best_fn=lambda m: m["loss"], best_mode="min"
        ),
    )
    use_best = variant in ("ok_two", "eval_best", "bug_best")
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

    holder = {"it": None, "mgr": latest}

    def label(step):
        return step * GB if variant in ("samples", "samples_explicit") else step

    def unlabel(lab):
        return lab // GB if variant in ("samples", "samples_explicit") else lab

    @mgr.elastic_retry(
        minimum_slice_count=2,
        poll_interval=3,
        timeout=600,
        retry_policy=pw_manager.ElasticRetryLimit(8),
    )
    def run():
        devs = [d for i in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[i]]
        mesh = Mesh(np.asarray(devs).reshape(-1, per_slice), ("data", "fsdp"))
        rep = NamedSharding(mesh, P())
        dsh = NamedSharding(mesh, P(("data", "fsdp")))
        if variant == "bug_keep_iter" and holder["it"] is not None:
            it = holder["it"]
        else:
            it = grain.experimental.ElasticIterator(
                grain.MapDataset.range(GB * 100).map(rec), GB, grain.sharding.NoSharding()
            )
            holder["it"] = it
        if variant == "fresh_mgr":
            holder["mgr"].close()
            holder["mgr"] = make_latest()
        lm = holder["mgr"]
        state = jax.device_put(s0, rep)
        step = 0
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), state
        )
        src = best if variant == "bug_best" else lm
        if src.latest_step() is not None:
            which = src.latest_step()
            if variant == "bug_second" and len(src.all_steps()) > 1:
                which = sorted(src.all_steps())[-2]
            rargs = ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            )
            if variant in ("samples", "none_restore"):
                r = src.restore(None, args=rargs)
            else:
                r = src.restore(which, args=rargs)
            state = r.state
            if variant != "bug_keep_iter":
                it.set_state(r.data)
            step = unlabel(which) + 1
        while step < steps:
            b = next(it)
            state, l = step_fn(state, *jax.device_put((b["x"], b["y"]), dsh))
            sargs = ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(it.get_state())
            )
            lm.save(label(step), args=sargs)
            if use_best and step % 2 == 1:
                # metric: loss of this batch (noisy, so best is often not the latest)
                best.save(
                    step,
                    args=sargs,
                    metrics={"loss": float(l) if best_at is None else abs(step - best_at)},
                )
            step += 1
        lm.wait_until_finished()
        best.wait_until_finished()
        return state

    out = run()
    if variant == "eval_best" and best.latest_step() is not None:
        bs = best.best_step()
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), out
        )
        r = best.restore(
            bs,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            ),
        )
        print("best step", bs, "latest", holder["mgr"].latest_step())
        out = r.state
    holder["mgr"].close()
    best.close()
    return out


def ok_two(**kw):
    return _main(variant="ok_two", **kw)


def eval_best(**kw):
    return _main(variant="eval_best", **kw)


def bug_best(**kw):
    return _main(variant="bug_best", **kw)


def samples(**kw):
    return _main(variant="samples", **kw)


def interval(**kw):
    return _main(variant="interval", **kw)


def fresh_mgr(**kw):
    return _main(variant="fresh_mgr", **kw)


def bug_second(**kw):
    return _main(variant="bug_second", **kw)


def bug_keep_iter(**kw):
    return _main(variant="bug_keep_iter", **kw)


def none_restore(**kw):
    return _main(variant="none_restore", **kw)


def samples_explicit(**kw):
    return _main(variant="samples_explicit", **kw)
