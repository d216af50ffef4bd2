"""Replica resize with in-place scale-up, fixed batch, an optax Adam state (its ``count`` included).

Correct: when slices come back the loop claims them, builds the mesh of the active slices,
moves params and optimizer state onto it with ``jax.device_put`` and keeps the same iterator;
a loss restores params, Adam moments and count, step and position from the latest snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
    *,
    devices: Any = None,
    checkpoint_dir: str | None = None,
    steps: int = 24,
    every: int = 3,
    global_batch: int = 16,
) -> Any:
    import grain
    import jax
    import optax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()
    tx = optax.adam(0.02)

    def init() -> tuple[Any, Any]:
        params = p.init_params(seed=11)
        return params, tx.init(params)

    def step_fn(state: tuple[Any, Any], x: Any, y: Any) -> tuple[Any, Any]:
        params, opt = state
        updates, opt = tx.update(p.grads(params, x, y), opt, params)
        return optax.apply_updates(params, updates), opt

    def compiled(mesh: Any) -> tuple[Any, Any]:
        rep = p.replicated(mesh)
        return rep, jax.jit(step_fn, out_shardings=rep)

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep, update = compiled(mesh)
            it = ElasticIterator(data, global_batch, grain.sharding.NoSharding())
            like = {
                "state": p.abstract_of(jax.eval_shape(init), rep),
                "step": 0,
                "data": it.get_state(),
            }
            ckpt = p.latest_checkpoint(checkpoint_dir)
            if snapshotter.latest is not None:
                snapshotter.join()
                saved = snapshotter.load(like)
            elif ckpt is not None:
                saved = p.load_checkpoint(ckpt, like)
            else:
                saved = None
            if saved is None:
                state, step = jax.device_put(init(), rep), 0
            else:
                state, step = tuple(saved["state"]), int(saved["step"]) + 1
                it.set_state(saved["data"])
            while step < steps:
                state = update(state, *p.put_batch(next(it), mesh))
                if step % every == 0:
                    snapshotter.save(step, {"state": state, "step": step, "data": it.get_state()})
                if sigterm.requested.is_set():
                    p.save_checkpoint(
                        checkpoint_dir, step, {"state": state, "step": step, "data": it.get_state()}
                    )
                    return None
                if mgr.available_inactive_slices:
                    mgr.active_slice_indices = (
                        mgr.active_slice_indices | mgr.available_inactive_slices
                    )
                    mesh = p.slice_mesh(mgr)
                    rep, update = compiled(mesh)
                    state = jax.device_put(state, rep)
                step += 1
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
