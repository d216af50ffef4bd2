"""On an in-place scale-up the loop rebuilds the iterator for the bigger batch and positions it from
the data state it kept at the last snapshot (not the current one), while the model carries on,
so the samples trained since that snapshot are trained again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "sample-trained-twice"
SCENARIO = "data_loss@batch=6:slice=2,repair@time=15:slice=2"


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
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 4
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

    def update(state: Any, x: Any, y: Any, ids: Any) -> Any:
        params = jax.tree.map(
            lambda w, g: w - 0.05 * g, state["params"], p.grads(state["params"], x, y)
        )
        seen = state["seen"] + jnp.stack([ids.shape[0], jnp.sum(ids)]).astype(jnp.int32)
        return {"params": params, "seen": seen}

    def iterator() -> Any:
        return ElasticIterator(
            data, int(mgr.scale_by_active_slices(16)), grain.sharding.NoSharding()
        )

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = iterator()
        fresh = {"params": p.init_params(), "seen": jnp.zeros((2,), jnp.int32)}
        if snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load(
                {"state": p.abstract_of(fresh, rep), "step": 0, "it": it.get_state()}
            )
            state, step = saved["state"], int(saved["step"]) + 1
            it.set_state(saved["it"])
        else:
            state, step = jax.device_put(fresh, rep), 0
        data_at_snapshot = it.get_state()
        train = jax.jit(update, out_shardings=rep)
        while step < steps:
            batch = next(it)
            ids = jax.device_put(batch["id"].astype("int32"), rep)
            state = train(state, *p.put_batch(batch, mesh), ids)
            if step % every == 0:
                data_at_snapshot = it.get_state()
                snapshotter.save(step, {"state": state, "step": step, "it": data_at_snapshot})
            if mgr.available_inactive_slices:
                mgr.active_slice_indices = mgr.active_slice_indices | mgr.available_inactive_slices
                mesh = p.slice_mesh(mgr)
                rep = p.replicated(mesh)
                train = jax.jit(update, out_shardings=rep)
                state = jax.device_put(state, rep)
                it = iterator()
                it.set_state(data_at_snapshot)
            step += 1
        return state

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
