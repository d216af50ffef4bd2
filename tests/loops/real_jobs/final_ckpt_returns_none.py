"""CORRECT: returns None instead of the state -- the job's output is the final Orbax checkpoint
(``ocp.v1.save``) it writes to ``checkpoint_dir`` when training ends; SIGTERM writes the same
kind of checkpoint mid-run and the next run resumes from the newest one.

Resize mode with a fixed global batch of 16; takes repaired slices back in place.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FEATURES, HIDDEN = 16, 48
W_TRUE = np.cos(np.arange(FEATURES, dtype=np.float32))


def example(i: int) -> dict[str, Any]:
    x = np.sin(0.1 * i + np.arange(FEATURES, dtype=np.float32)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x @ W_TRUE / FEATURES)}


def fresh_state() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    a, b = jax.random.split(jax.random.key(7))
    params = {
        "w_in": jax.random.normal(a, (FEATURES, HIDDEN), jnp.float32) * 0.25,
        "w_out": jax.random.normal(b, (HIDDEN, 1), jnp.float32) * 0.25,
    }
    return {"params": params, "v": jax.tree.map(jnp.zeros_like, params)}


def update(state: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.mean(((jax.nn.relu(x @ p["w_in"]) @ p["w_out"])[:, 0] - y) ** 2)

    g = jax.grad(loss)(state["params"])
    # RMSProp-ish
    v = jax.tree.map(lambda v, g: 0.95 * v + 0.05 * g * g, state["v"], g)
    params = jax.tree.map(
        lambda p, g, v: p - 0.01 * g / (jnp.sqrt(v) + 1e-3), state["params"], g, v
    )
    return {"params": params, "v": v}


def _ckpt_path(root: str, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def _newest_ckpt(root: str | None) -> Path | None:
    if root is None or not os.path.isdir(root):
        return None
    found = sorted(p for p in Path(root).iterdir() if p.name.startswith("step_"))
    return found[-1] if found else None


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 28,
    global_batch: int = 16,
    snapshot_every: int = 4,
    **options: Any,
) -> None:
    import grain
    import jax
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from orbax.checkpoint import v1 as ocp
    from pathwaysutils.elastic import manager as elastic

    root = None if checkpoint_dir is None else str(checkpoint_dir)
    mgr = elastic.Manager(devices)
    snapshotter = ocp.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(mgr.slice_to_devices[0])
    ds = grain.MapDataset.range(20_000).map(lambda i: example(int(i)))
    sigterm = threading.Event()
    prev = None
    if threading.current_thread() is threading.main_thread():
        prev = signal.signal(signal.SIGTERM, lambda *_: sigterm.set())

    def mesh_now() -> Any:
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        arr = np.asarray(devs, dtype=object).reshape(mgr.active_slice_count, per_slice)
        return jax.sharding.Mesh(arr, ("replica", "model"))

    def setup(mesh: Any) -> tuple[Any, Any, Any]:
        p = {
            "w_in": NamedSharding(mesh, P(None, "model")),
            "w_out": NamedSharding(mesh, P("model", None)),
        }
        shardings = {"params": p, "v": dict(p)}
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(fresh_state),
            shardings,
        )
        return shardings, abstract, jax.jit(update, out_shardings=shardings)

    def to_device(batch: dict[str, Any], mesh: Any) -> tuple[Any, Any]:
        spec = P("replica") if len(batch["id"]) % mesh.shape["replica"] == 0 else P()
        sh = NamedSharding(mesh, spec)
        return jax.device_put(batch["x"], sh), jax.device_put(batch["y"], sh)

    def write_ckpt(step: int, state: Any, it: Any) -> None:
        if root is None:
            log.warning("no checkpoint_dir: step %d not saved", step)
            return
        ocp.save(
            _ckpt_path(root, step),
            {"state": state, "step": step, "data": it.get_state()},
            overwrite=True,
        )

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def run() -> bool:
        mesh = mesh_now()
        shardings, abstract, step_fn = setup(mesh)
        it = ElasticIterator(ds, global_batch, grain.sharding.NoSharding())
        newest = _newest_ckpt(root)
        if snapshotter.latest is not None:
            snapshotter.join()
            got = snapshotter.load({"state": abstract, "step": 0, "data": it.get_state()})
            it.set_state(got["data"])
            state, step = got["state"], int(got["step"]) + 1
        elif newest is not None:
            got = ocp.load(newest, {"state": abstract, "step": 0, "data": it.get_state()})
            it.set_state(got["data"])
            state, step = got["state"], int(got["step"]) + 1
            log.info("resuming after %s", newest.name)
        else:
            state, step = jax.device_put(fresh_state(), shardings), 0

        if step >= steps:
            log.info("nothing left to train")
            return True
        while step < steps:
            state = step_fn(state, *to_device(next(it), mesh))
            if step % snapshot_every == 0:
                snapshotter.save(step, {"state": state, "step": step, "data": it.get_state()})
            if sigterm.is_set():
                write_ckpt(step, state, it)
                log.info("preempted at step %d", step)
                return False
            if mgr.available_inactive_slices and step + 1 < steps:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh = mesh_now()
                shardings, abstract, step_fn = setup(mesh)
                state = jax.device_put(state, shardings)
            step += 1
        loss = float(jax.device_get(jnp_mse(state, ds, steps)))
        log.info("done: %d steps, probe loss %.4f", steps, loss)
        write_ckpt(steps - 1, state, it)
        return True

    try:
        run()
        snapshotter.join()
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
    return None


def jnp_mse(state: Any, ds: Any, n: int) -> Any:
    import jax
    import jax.numpy as jnp

    probe = [ds[i] for i in range(n)]
    x = jnp.asarray(np.stack([r["x"] for r in probe]))
    y = jnp.asarray(np.stack([r["y"] for r in probe]))
    p = jax.device_get(state["params"])
    return jnp.mean(((jax.nn.relu(x @ p["w_in"]) @ p["w_out"])[:, 0] - y) ** 2)
