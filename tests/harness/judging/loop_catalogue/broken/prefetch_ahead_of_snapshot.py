"""The loop prefetches the next batch before snapshotting, so every snapshot records a data
position one batch past the model it holds, and a restore skips that batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "snapshot-mismatch"
SCENARIO = "data_loss@batch=10:slice=1:repair_after_polls=3"


def _parts() -> Any:
    """The catalogue's shared pieces, loaded by path (the toolkit imports this file alone)."""
    import importlib.util
    import sys

    name = "loop_catalogue_parts"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "parts.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def main(
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 3
) -> Any:
    import grain
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()

    def update(state: Any, x: Any, y: Any) -> Any:
        params, mom = state
        g = p.grads(params, x, y)
        mom = jax.tree.map(lambda m, d: 0.9 * m + d, mom, g)
        return jax.tree.map(lambda w, m: w - 0.03 * m, params, mom), mom

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        params = p.init_params()
        fresh = (params, jax.tree.map(jnp.zeros_like, params))
        like = {"state": p.abstract_of(fresh, rep), "step": 0, "it": it.get_state()}
        if snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load(like)
            state, step = tuple(saved["state"]), int(saved["step"]) + 1
            it.set_state(saved["it"])
        else:
            state, step = jax.device_put(fresh, rep), 0
        train = jax.jit(update, out_shardings=rep)
        upcoming = next(it)
        while step < steps:
            batch = upcoming
            state = train(state, *p.put_batch(batch, mesh))
            if step + 1 < steps:
                upcoming = next(it)  # overlap host data loading with the device step
            if step % every == 0:
                snapshotter.save(step, {"state": state, "step": step, "it": it.get_state()})
            step += 1
        return state

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
