# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06); kept as written.
"""orbax v1 training Checkpointer, elastic_retry, grain ElasticIterator; state + data pos in one pytree."""

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


def _main(devices=None, checkpoint_dir=None, steps=20, variant="by_step", **kw):
    mgr = pw_manager.Manager(devices)
    per_slice = len(next(iter(mgr.slice_to_devices.values())))
    ck = ocp.v1.training.Checkpointer(os.path.join(checkpoint_dir, "v1"))
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
        it = grain.experimental.ElasticIterator(
            grain.MapDataset.range(GB * 100).map(rec), GB, grain.sharding.NoSharding()
        )
        state = jax.device_put(s0, rep)
        step = 0
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), state
        )
        tmpl = {"state": abstract, "data": it.get_state()}
        if ck.latest is not None:
            if variant == "by_step":
                r = ck.load(ck.latest.step, tmpl)
            elif variant == "by_meta":
                r = ck.load(ck.latest, tmpl)
            elif variant == "omitted":
                r = ck.load(abstract_state=tmpl)
            elif variant == "bug_oldest":
                r = ck.load(ck.checkpoints[0].step, tmpl)
            state = r["state"]
            it.set_state({k: int(v) for k, v in r["data"].items()})
            step = (
                int(ck.latest.step) + 1
                if variant != "bug_oldest"
                else int(ck.checkpoints[0].step) + 1
            )
        while step < steps:
            b = next(it)
            state, l = step_fn(state, *jax.device_put((b["x"], b["y"]), dsh))
            ck.save(step, {"state": state, "data": it.get_state()})
            step += 1
        ck.wait()
        return state

    out = run()
    ck.close()
    return out


def by_step(**kw):
    return _main(variant="by_step", **kw)


def by_meta(**kw):
    return _main(variant="by_meta", **kw)


def omitted(**kw):
    return _main(variant="omitted", **kw)


def bug_oldest(**kw):
    return _main(variant="bug_oldest", **kw)
