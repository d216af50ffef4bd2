# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fourth session); kept as written.
"""Elastic loop (pause-resume) that handles preemption itself: a SIGTERM
handler sets a flag, the loop writes a disk checkpoint with
StandardCheckpointer at the next step boundary and returns None. On start it
resumes from the newest checkpoint in checkpoint_dir."""

import os
import signal
import threading
import jax
import jax.numpy as jnp
import numpy as np
import grain
import orbax.checkpoint as ocp
from etils import epath
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager

BATCH = 16

_preempted = threading.Event()


def _on_sigterm(signum, frame):
    _preempted.set()


def sample(i):
    r = np.random.default_rng(int(i) + 99)
    x = r.normal(size=(4,)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x[1] * x[2])}


def latest_on_disk(root):
    if root is None or not os.path.isdir(root):
        return None
    names = [
        n
        for n in os.listdir(root)
        if n.startswith("step_") and not n.endswith(".tmp") and "orbax-checkpoint-tmp" not in n
    ]
    # BUG: newest by name, so step_8 sorts after step_14
    print(
        "disk checkpoints:", sorted(names), "-> picking", max(names) if names else None, flush=True
    )
    return int(max(names).split("_")[1]) if names else None


@jax.jit
def step_fn(state, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    g = jax.grad(loss)(state["params"])
    vel = jax.tree.map(lambda v, g: 0.8 * v + g, state["vel"], g)
    return {"params": jax.tree.map(lambda p, v: p - 0.02 * v, state["params"], vel), "vel": vel}


def main(devices=None, checkpoint_dir=None, steps=30):
    signal.signal(signal.SIGTERM, _on_sigterm)
    em = manager.Manager(devices)
    per = len(em.slice_to_devices[0])
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    ckptr = ocp.StandardCheckpointer()

    @em.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=600)
    def run():
        devs = [d for s in sorted(em.active_slice_indices) for d in em.slice_to_devices[s]]
        mesh = Mesh(np.array(devs).reshape(-1, per), ("replica", "model"))
        rep = NamedSharding(mesh, P())
        bsh = NamedSharding(mesh, P(("replica", "model")))
        it = grain.experimental.ElasticIterator(
            grain.MapDataset.range(8000).map(sample), BATCH, grain.sharding.NoSharding()
        )
        k1, k2 = jax.random.split(jax.random.key(42))
        params = {
            "w1": jax.random.normal(k1, (4, 8)) * 0.5,
            "w2": jax.random.normal(k2, (8,)) * 0.5,
        }
        state = jax.device_put({"params": params, "vel": jax.tree.map(jnp.zeros_like, params)}, rep)
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), state
        )
        step = 0
        if snap.latest is not None:
            snap.join()
            got = snap.load({"state": abstract, "step": 0, "data": it.get_state()})
            state, step = got["state"], int(got["step"]) + 1
            it.set_state(got["data"])
        else:
            disk = latest_on_disk(checkpoint_dir)
            if disk is not None:
                got = ckptr.restore(
                    os.path.join(checkpoint_dir, f"step_{disk}"),
                    {"state": abstract, "step": 0, "data": it.get_state()},
                )
                state, step = got["state"], int(got["step"]) + 1
                it.set_state({k: int(v) for k, v in got["data"].items()})
        while step < steps:
            batch = next(it)
            state = step_fn(state, jax.device_put(batch["x"], bsh), jax.device_put(batch["y"], bsh))
            if step % 5 == 0:
                snap.save(step, {"state": state, "step": step, "data": it.get_state()})
            if _preempted.is_set():
                ckptr.save(
                    os.path.join(checkpoint_dir, f"step_{step}"),
                    {"state": state, "step": step, "data": it.get_state()},
                )
                ckptr.wait_until_finished()
                return None
            step += 1
        return state

    out = run()
    snap.join()
    return out
