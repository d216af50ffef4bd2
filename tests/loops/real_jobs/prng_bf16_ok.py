"""CORRECT: the train state carries a typed PRNG key (``jax.random.key``), split every step for
input noise and dropout, and a bfloat16 EMA of the weights; both go into every Snapshotter
snapshot (which handles typed keys) and into the SIGTERM checkpoint (as ``key_data``, wrapped
back on load).

``snapshot_key_data=True`` stores ``key_data`` in the snapshots too (the Snapshotter does not
need it; it is there to work around tools that cannot digest typed-key dtypes).

Resize mode, fixed global batch 16, repaired slices taken back in place.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np

F, H = 8, 64


def rec(i: int) -> dict[str, Any]:
    x = np.tanh(np.sin((i + 1) * np.array([0.11, 0.23, 0.37, 0.41, 0.53, 0.67, 0.71, 0.83])))
    x = x.astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(x[0] * x[1] - x[2] + 0.5 * x[7])}


def new_state() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    key = jax.random.key(0)
    key, a, b = jax.random.split(key, 3)
    params = {
        "w1": jax.random.normal(a, (F, H), jnp.float32) * 0.35,
        "w2": jax.random.normal(b, (H, 1), jnp.float32) * 0.15,
    }
    return {
        "params": params,
        "ema": jax.tree.map(lambda p: p.astype(jnp.bfloat16), params),
        "key": key,
    }


def train_step(state: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    key, k_noise, k_drop = jax.random.split(state["key"], 3)
    x = x + 0.05 * jax.random.normal(k_noise, x.shape, x.dtype)

    def loss(p: Any) -> Any:
        h = jax.nn.relu(x @ p["w1"])
        keep = jax.random.bernoulli(k_drop, 0.9, h.shape)
        h = jnp.where(keep, h / 0.9, 0.0)
        return jnp.mean(((h @ p["w2"])[:, 0] - y) ** 2)

    g = jax.grad(loss)(state["params"])
    params = jax.tree.map(lambda p, g: p - 0.05 * g, state["params"], g)
    ema = jax.tree.map(
        lambda e, p: (0.9 * e.astype(jnp.float32) + 0.1 * p).astype(jnp.bfloat16),
        state["ema"],
        params,
    )
    return {"params": params, "ema": ema, "key": key}


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 30,
    global_batch: int = 16,
    snapshot_every: int = 3,
    snapshot_key_data: bool = False,
    rekey_on_restore: bool = False,  # a broken variant (added for the lineage test): fresh key
    **options: Any,
) -> Any:
    import grain
    import jax
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from orbax.checkpoint import v1 as ocp
    from pathwaysutils.elastic import manager as elastic

    mgr = elastic.Manager(devices)
    snaps = ocp.training.pathways.Snapshotter(replica_axis_index=0)
    n = len(mgr.slice_to_devices[0])
    ds = grain.MapDataset.range(30_000).map(lambda i: rec(int(i)))
    ckpt_path = None if checkpoint_dir is None else Path(checkpoint_dir) / "sigterm"
    got_term = threading.Event()
    prior = None
    if threading.current_thread() is threading.main_thread():
        prior = signal.signal(signal.SIGTERM, lambda *_: got_term.set())

    def layout() -> tuple[Any, Any, Any]:
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        mesh = jax.sharding.Mesh(np.array(devs, dtype=object).reshape(-1, n), ("replica", "model"))
        w = {
            "w1": NamedSharding(mesh, P(None, "model")),
            "w2": NamedSharding(mesh, P("model", None)),
        }
        sh = {"params": w, "ema": dict(w), "key": NamedSharding(mesh, P())}
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(new_state),
            sh,
        )
        return mesh, sh, abstract

    def put_batch(b: dict[str, Any], mesh: Any) -> tuple[Any, Any]:
        spec = P("replica") if len(b["id"]) % mesh.shape["replica"] == 0 else P()
        s = NamedSharding(mesh, spec)
        return jax.device_put(b["x"], s), jax.device_put(b["y"], s)

    def as_checkpoint(state: Any) -> Any:
        return {**state, "key": jax.random.key_data(state["key"])}

    def snapshot_tree(state: Any, step: int, it: Any) -> Any:
        return {
            "state": as_checkpoint(state) if snapshot_key_data else state,
            "step": step,
            "it": it.get_state(),
        }

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh, sh, abstract = layout()
        step_fn = jax.jit(train_step, out_shardings=sh)
        it = ElasticIterator(ds, global_batch, grain.sharding.NoSharding())
        if snaps.latest is not None:
            snaps.join()
            kd = jax.ShapeDtypeStruct((2,), np.uint32, sharding=sh["key"])
            a = {**abstract, "key": kd} if snapshot_key_data else abstract
            r = snaps.load({"state": a, "step": 0, "it": it.get_state()})
            it.set_state(r["it"])
            state, step = r["state"], int(r["step"]) + 1
            if snapshot_key_data:
                state = {**state, "key": jax.random.wrap_key_data(state["key"])}
        elif ckpt_path is not None and ckpt_path.exists():
            kd = jax.ShapeDtypeStruct((2,), np.uint32, sharding=sh["key"])
            r = ocp.load_pytree(
                ckpt_path, {"state": {**abstract, "key": kd}, "step": 0, "it": it.get_state()}
            )
            it.set_state(r["it"])
            state = {**r["state"], "key": jax.random.wrap_key_data(r["state"]["key"])}
            if rekey_on_restore:
                state["key"] = jax.device_put(jax.random.key(int(r["step"])), sh["key"])
            step = int(r["step"]) + 1
        else:
            state, step = jax.device_put(new_state(), sh), 0

        while step < steps:
            state = step_fn(state, *put_batch(next(it), mesh))
            if step % snapshot_every == 0:
                snaps.save(step, snapshot_tree(state, step, it))
            if got_term.is_set():
                ocp.save_pytree(
                    ckpt_path,
                    {"state": as_checkpoint(state), "step": step, "it": it.get_state()},
                    overwrite=True,
                )
                return None
            if mgr.available_inactive_slices and step + 1 < steps:
                mgr.active_slice_indices |= mgr.available_inactive_slices
                mesh, sh, abstract = layout()
                step_fn = jax.jit(train_step, out_shardings=sh)
                state = jax.device_put(state, sh)
            step += 1
        return state

    try:
        final = attempt()
        snaps.join()
    finally:
        if prior is not None:
            signal.signal(signal.SIGTERM, prior)
    return None if final is None else jax.device_get(final)
