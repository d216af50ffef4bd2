"""BROKEN: plain Python numpy batch generator restarts at sample 0 after every restore (the
saved cursor is restored but never passed to the generator), so early samples are trained
twice after a slice loss or a preemption.

No grain: batches come from a generator of numpy dicts with an ``id`` field. Snapshotter for
slice loss, ``ocp.v1.save_pytree`` checkpoint on SIGTERM. Resize mode, global batch 16 scaled
by the active slices.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

IN, HID = 10, 40
_PROJ = np.random.default_rng(123).standard_normal((IN,)).astype(np.float32)


def batch_stream(batch_size: int, start: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Batches of consecutive samples from ``start`` on; each row carries its sample id."""
    i = start
    while True:
        ids = np.arange(i, i + batch_size, dtype=np.int64)
        x = np.sin(np.outer(ids, np.arange(1, IN + 1)) * 0.013).astype(np.float32)
        y = np.tanh(x @ _PROJ).astype(np.float32)
        yield {"id": ids, "x": x, "y": y}
        i += batch_size


def make_state() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(5))
    p = {"w1": jax.random.normal(k1, (IN, HID)) * 0.3, "w2": jax.random.normal(k2, (HID, 1)) * 0.3}
    return {"p": p, "mu": jax.tree.map(jnp.zeros_like, p), "t": jnp.zeros((), jnp.int32)}


def adam_like(state: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.mean(((jnp.tanh(x @ p["w1"]) @ p["w2"])[:, 0] - y) ** 2)

    g = jax.grad(loss)(state["p"])
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["mu"], g)
    t = state["t"] + 1
    corr = 1.0 - 0.9 ** t.astype(jnp.float32)
    p = jax.tree.map(lambda p, m: p - 0.05 * m / corr, state["p"], mu)
    return {"p": p, "mu": mu, "t": t}


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 30,
    global_batch: int = 16,
    snapshot_every: int = 4,
    **options: Any,
) -> Any:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from orbax.checkpoint import v1 as ocp
    from pathwaysutils.elastic import manager as elastic

    mgr = elastic.Manager(devices)
    snapshotter = ocp.training.pathways.Snapshotter(replica_axis_index=0)
    per = len(mgr.slice_to_devices[0])
    ckpt_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
    flag = threading.Event()
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, lambda *_: flag.set())

    def latest_ckpt() -> Path | None:
        if ckpt_dir is None or not ckpt_dir.is_dir():
            return None
        c = sorted(ckpt_dir.glob("s*"))
        return c[-1] if c else None

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=10, timeout=300)
    def go() -> Any:
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        mesh = jax.sharding.Mesh(
            np.array(devs, dtype=object).reshape(-1, per), ("replica", "model")
        )
        w = {
            "w1": NamedSharding(mesh, P(None, "model")),
            "w2": NamedSharding(mesh, P("model", None)),
        }
        sh = {"p": w, "mu": dict(w), "t": NamedSharding(mesh, P())}
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(make_state),
            sh,
        )
        fn = jax.jit(adam_like, out_shardings=sh)
        bs = mgr.scale_by_active_slices(global_batch)
        template = {"state": abstract, "step": 0, "cursor": 0}
        if snapshotter.latest is not None:
            snapshotter.join()
            r = snapshotter.load(template)
            state, step, cursor = r["state"], int(r["step"]) + 1, int(r["cursor"])
        elif (c := latest_ckpt()) is not None:
            r = ocp.load_pytree(c, template)
            state, step, cursor = r["state"], int(r["step"]) + 1, int(r["cursor"])
        else:
            state, step, cursor = jax.device_put(make_state(), sh), 0, 0
        stream = batch_stream(bs)  # bug: cursor restored above but not passed as start=
        dsh = NamedSharding(mesh, P("replica"))
        while step < steps:
            b = next(stream)
            cursor = int(b["id"][-1]) + 1
            state = fn(state, jax.device_put(b["x"], dsh), jax.device_put(b["y"], dsh))
            if step % snapshot_every == 0:
                snapshotter.save(step, {"state": state, "step": step, "cursor": cursor})
            if flag.is_set():
                ocp.save_pytree(
                    ckpt_dir / f"s{step:05d}", {"state": state, "step": step, "cursor": cursor}
                )
                return None
            step += 1
        return state

    try:
        final = go()
        snapshotter.join()
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return None if final is None else jax.device_get(final)
