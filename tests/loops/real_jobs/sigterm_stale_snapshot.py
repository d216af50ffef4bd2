"""BROKEN: the SIGTERM checkpoint (``ocp.StandardCheckpointer``) pairs the model from the last
in-memory snapshot with the data iterator position of *now*, so the batches trained since that
snapshot are lost (never trained) after a preemption.

The author's idea: "the live arrays may be half-updated when the notice arrives, so checkpoint
the last good snapshot" -- but the step and the data position are taken from the live loop.
Snapshot restores after a slice loss are fine. Resize mode, global batch 16 scaled by the
active slices.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np

FEAT, HID = 16, 32


def item(i: int) -> dict[str, Any]:
    v = np.sin(np.arange(FEAT, dtype=np.float32) * 0.7 + i * 0.021).astype(np.float32)
    return {"id": np.int64(i), "x": v, "y": np.float32(np.mean(v[::2]) - np.mean(v[1::2]))}


def init_train_state() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    r1, r2 = jax.random.split(jax.random.key(42))
    params = {
        "dense": jax.random.normal(r1, (FEAT, HID), jnp.float32) * 0.2,
        "bias": jnp.zeros((HID,), jnp.float32),
        "head": jax.random.normal(r2, (HID, 1), jnp.float32) * 0.2,
    }
    return {"params": params, "velocity": jax.tree.map(jnp.zeros_like, params)}


def nesterov(state: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.mean(((jnp.tanh(x @ p["dense"] + p["bias"]) @ p["head"])[:, 0] - y) ** 2)

    look = jax.tree.map(lambda p, v: p - 0.9 * 0.04 * v, state["params"], state["velocity"])
    g = jax.grad(loss)(look)
    vel = jax.tree.map(lambda v, g: 0.9 * v + g, state["velocity"], g)
    return {
        "params": jax.tree.map(lambda p, v: p - 0.04 * v, state["params"], vel),
        "velocity": vel,
    }


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 30,
    global_batch: int = 16,
    snapshot_every: int = 4,
    **options: Any,
) -> Any:
    import grain
    import jax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from pathwaysutils.elastic import manager as elastic

    mgr = elastic.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    dev_per_slice = len(mgr.slice_to_devices[0])
    data = grain.MapDataset.range(60_000).map(lambda i: item(int(i)))
    ckpt_root = None if checkpoint_dir is None else Path(checkpoint_dir)
    notice = threading.Event()
    saved_handler = None
    if threading.current_thread() is threading.main_thread():
        saved_handler = signal.signal(signal.SIGTERM, lambda *_: notice.set())

    def find_ckpt() -> Path | None:
        if ckpt_root is None or not ckpt_root.is_dir():
            return None
        done = sorted(p for p in ckpt_root.iterdir() if p.name.startswith("preempt_"))
        return done[-1] if done else None

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=10, timeout=300)
    def train_attempt() -> Any:
        active = sorted(mgr.active_slice_indices)
        mesh = jax.sharding.Mesh(
            np.array([d for s in active for d in mgr.slice_to_devices[s]], dtype=object).reshape(
                len(active), dev_per_slice
            ),
            ("replica", "model"),
        )
        ps = {"dense": P(None, "model"), "bias": P("model"), "head": P("model", None)}
        pshard = {k: NamedSharding(mesh, v) for k, v in ps.items()}
        shardings = {"params": pshard, "velocity": dict(pshard)}
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init_train_state),
            shardings,
        )
        step_fn = jax.jit(nesterov, out_shardings=shardings)
        iterator = ElasticIterator(
            data, mgr.scale_by_active_slices(global_batch), grain.sharding.NoSharding()
        )
        batch_sharding = NamedSharding(mesh, P("replica"))

        ckpt = find_ckpt()
        if snapshotter.latest is not None:
            snapshotter.join()
            snap = snapshotter.load(
                {"state": abstract, "step": 0, "iterator": iterator.get_state()}
            )
            iterator.set_state(snap["iterator"])
            state, step = snap["state"], int(snap["step"]) + 1
        elif ckpt is not None:
            with ocp.StandardCheckpointer() as ckptr:
                restored = ckptr.restore(
                    ckpt,
                    {
                        "state": abstract,
                        "step": np.zeros((), np.int64),
                        "next_index": np.zeros((), np.int64),
                    },
                )
            iterator.set_state({"global_next_index": int(restored["next_index"])})
            state, step = restored["state"], int(restored["step"]) + 1
        else:
            state, step = jax.device_put(init_train_state(), shardings), 0

        while step < steps:
            b = next(iterator)
            state = step_fn(
                state,
                jax.device_put(b["x"], batch_sharding),
                jax.device_put(b["y"], batch_sharding),
            )
            if step % snapshot_every == 0:
                snapshotter.save(
                    step, {"state": state, "step": step, "iterator": iterator.get_state()}
                )
            if notice.is_set():
                # checkpoint the last known-good snapshot, not possibly half-updated live arrays
                snapshotter.join()
                good = snapshotter.load(
                    {"state": abstract, "step": 0, "iterator": iterator.get_state()},
                    reset_snapshot_state=False,
                )
                with ocp.StandardCheckpointer() as ckptr:
                    ckptr.save(
                        ckpt_root / f"preempt_{step:06d}",
                        {
                            "state": good["state"],
                            "step": np.int64(step),  # bug: step and position are from now,
                            "next_index": np.int64(iterator.get_state()["global_next_index"]),
                        },  # the model is from good["step"]
                    )
                    ckptr.wait_until_finished()
                return None
            step += 1
        return state

    try:
        result = train_attempt()
        snapshotter.join()
    finally:
        if saved_handler is not None:
            signal.signal(signal.SIGTERM, saved_handler)
    return None if result is None else jax.device_get(result)
