# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session, second tester); kept as written.
"""Loop 11: multi-task mixture: two grain ElasticIterators (task A regression, task B
another regression), alternating A,B,A,B... each step trains one batch of one task
through a shared trunk. Each dataset numbers its records from 0 ('ids' = its own
record index, as each source's own id). Both iterator states saved in the snapshot.
Pause-resume mode.
main       : correct
main_broken: on restore only iterator A is set back; B is reopened at its start"""

import numpy as np
import jax
import jax.numpy as jnp
import optax
import grain
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager

GB = 16
TX = optax.adam(3e-3)


def make_ds(seed, n=2000):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 6)).astype(np.float32)
    w = rng.normal(size=(6, 1)).astype(np.float32)
    ys = (xs @ w).astype(np.float32)
    return grain.MapDataset.source(list(range(n))).map(
        lambda i: {"ids": np.int32(i), "x": xs[i], "y": ys[i]}
    )


def init_params():
    k = jax.random.split(jax.random.PRNGKey(4), 3)
    return {
        "trunk": jax.random.normal(k[0], (6, 16)) * 0.3,
        "head_a": jax.random.normal(k[1], (16, 1)) * 0.3,
        "head_b": jax.random.normal(k[2], (16, 1)) * 0.3,
    }


def make_step(head):
    @jax.jit
    def step(params, opt, x, y):
        g = jax.grad(lambda p: jnp.mean((jnp.tanh(x @ p["trunk"]) @ p[head] - y) ** 2))(params)
        u, opt = TX.update(g, opt, params)
        return optax.apply_updates(params, u), opt

    return step


STEP_A, STEP_B = make_step("head_a"), make_step("head_b")


def _main(broken, devices=None, steps=30, snapshot_every=4, **_):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ds_a, ds_b = make_ds(1), make_ds(2)
    dps = len(next(iter(mgr.slice_to_devices.values())))

    @mgr.elastic_retry(
        poll_interval=1, timeout=120, retry_policy=manager.ElasticRetryLimit(max_attempts=10)
    )
    def run():
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        mesh = Mesh(np.asarray(devs).reshape(-1, dps), ("replica", "model"))
        repl, dsh = NamedSharding(mesh, P()), NamedSharding(mesh, P(("replica", "model")))
        params = init_params()
        st = jax.device_put({"params": params, "opt": TX.init(params)}, repl)
        it_a = grain.experimental.ElasticIterator(ds_a, GB, grain.sharding.NoSharding())
        it_b = grain.experimental.ElasticIterator(ds_b, GB, grain.sharding.NoSharding())
        step = 0
        if snap.latest is not None:
            snap.join()
            abstract = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), st
            )
            r = snap.load({"st": abstract, "step": 0, "a": it_a.get_state(), "b": it_b.get_state()})
            st, step = r["st"], r["step"]
            it_a.set_state(r["a"])
            if not broken:
                it_b.set_state(r["b"])
        while step < steps:
            it, fn = (it_a, STEP_A) if step % 2 == 0 else (it_b, STEP_B)
            b = next(it)
            p, o = fn(
                st["params"], st["opt"], jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh)
            )
            st = {"params": p, "opt": o}
            step += 1
            if step % snapshot_every == 0:
                snap.save(
                    step, {"st": st, "step": step, "a": it_a.get_state(), "b": it_b.get_state()}
                )
        return st

    out = run()
    snap.join()
    return out


def main(**kw):
    return _main(False, **kw)


def main_broken(**kw):
    return _main(True, **kw)
