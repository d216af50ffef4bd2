"""CORRECT: grain ``MapDataset.range(N).map(...)`` through an ``ElasticIterator``, wrapped in a
plain Python generator that yields ``(numpy batch with ids, iterator state after it)``; the
generator is rebuilt from the restored iterator state after a snapshot or checkpoint restore.

Resize mode, a fixed global batch of 24 (divides 4, 3, 2 and 1 replicas).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

N_RECORDS, DIM, WIDTH = 4_000, 8, 96


def featurize(i: int) -> dict[str, Any]:
    r = np.random.default_rng(1000 + i)
    x = r.uniform(-1, 1, DIM).astype(np.float32)
    return {"id": i, "x": x, "y": float(np.sum(x[:4]) - np.sum(x[4:]))}


def batches(source: Any, global_batch: int, state: dict | None) -> Iterator[tuple[dict, dict]]:
    """Numpy batches from grain, each with the iterator state that follows it."""
    import grain
    from grain.experimental import ElasticIterator

    it = ElasticIterator(source, global_batch, grain.sharding.NoSharding())
    if state is not None:
        it.set_state(state)
    while True:
        raw = next(it)
        yield (
            {
                "id": np.asarray(raw["id"], np.int64),
                "x": np.asarray(raw["x"], np.float32),
                "y": np.asarray(raw["y"], np.float32),
            },
            it.get_state(),
        )


def initial() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(11))
    return {
        "l1": jax.random.normal(k1, (DIM, WIDTH), jnp.float32) / np.sqrt(DIM),
        "l2": jax.random.normal(k2, (WIDTH, 1), jnp.float32) / np.sqrt(WIDTH),
    }


def sgd(params: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.mean(((jax.nn.gelu(x @ p["l1"]) @ p["l2"])[:, 0] - y) ** 2)

    g = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, g)


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 32,
    global_batch: int = 24,
    snapshot_every: int = 4,
    **options: Any,
) -> Any:
    import grain
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from orbax.checkpoint import v1 as ocp
    from pathwaysutils.elastic import manager as elastic

    mgr = elastic.Manager(devices)
    snapshotter = ocp.training.pathways.Snapshotter(replica_axis_index=0)
    k = len(mgr.slice_to_devices[0])
    source = grain.MapDataset.range(N_RECORDS).map(lambda i: featurize(int(i)))
    ckpt = None if checkpoint_dir is None else Path(checkpoint_dir) / "preempted"
    term = threading.Event()
    prev = None
    if threading.current_thread() is threading.main_thread():
        prev = signal.signal(signal.SIGTERM, lambda *_: term.set())

    def mesh_for_active() -> Any:
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        return jax.sharding.Mesh(np.array(devs, dtype=object).reshape(-1, k), ("replica", "model"))

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=10, timeout=300)
    def attempt() -> Any:
        mesh = mesh_for_active()
        psh = {
            "l1": NamedSharding(mesh, P(None, "model")),
            "l2": NamedSharding(mesh, P("model", None)),
        }
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(initial),
            psh,
        )
        train = jax.jit(sgd, out_shardings=psh)
        empty = {"global_next_index": 0}
        if snapshotter.latest is not None:
            snapshotter.join()
            got = snapshotter.load({"params": abstract, "step": 0, "data": empty})
            params, step, data_state = got["params"], int(got["step"]) + 1, got["data"]
        elif ckpt is not None and (ckpt / "done").exists():
            got = ocp.load_pytree(ckpt / "tree", {"params": abstract, "step": 0, "data": empty})
            params, step, data_state = got["params"], int(got["step"]) + 1, got["data"]
        else:
            params, step, data_state = jax.device_put(initial(), psh), 0, None

        feed = batches(source, global_batch, data_state)
        xs = NamedSharding(mesh, P("replica"))
        while step < steps:
            b, after = next(feed)
            params = train(params, jax.device_put(b["x"], xs), jax.device_put(b["y"], xs))
            if step % snapshot_every == 0:
                snapshotter.save(step, {"params": params, "step": step, "data": after})
            if term.is_set():
                ocp.save_pytree(
                    ckpt / "tree", {"params": params, "step": step, "data": after}, overwrite=True
                )
                (ckpt / "done").touch()
                return None
            step += 1
        return params

    try:
        out = attempt()
        snapshotter.join()
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
    return None if out is None else jax.device_get(out)
