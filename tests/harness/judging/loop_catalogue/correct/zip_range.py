"""Replica resize, a batch that scales with the slices, tuple state, ``zip(range(...), iterator)``.

Correct: ``zip`` asks the range first, so no batch is drawn past the last step; the snapshot
labels the step just trained and the retry resumes at the next one. The state carries a tally
(samples trained, sum of their ids) that any duplicate or skipped sample would change.
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
    lr: float = 0.05,
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

    def step_fn(state: tuple[Any, Any, Any], x: Any, y: Any, ids: Any) -> tuple[Any, Any, Any]:
        params, mom, tally = state
        g = p.grads(params, x, y)
        mom = jax.tree.map(lambda m, d: 0.9 * m + d, mom, g)
        params = jax.tree.map(lambda w, m: w - lr * m, params, mom)
        tally = tally + jnp.stack([ids.shape[0], jnp.sum(ids)]).astype(jnp.int32)
        return params, mom, tally

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            params = p.init_params()
            fresh = (params, jax.tree.map(jnp.zeros_like, params), jnp.zeros((2,), jnp.int32))
            it = ElasticIterator(
                data, int(mgr.scale_by_active_slices(global_batch)), grain.sharding.NoSharding()
            )
            template = {"state": p.abstract_of(fresh, rep), "step": 0, "data": it.get_state()}
            start, state = 0, None
            ckpt = p.latest_checkpoint(checkpoint_dir)
            if snapshotter.latest is not None or ckpt is not None:
                if snapshotter.latest is not None:
                    snapshotter.join()
                    saved = snapshotter.load(template)
                else:
                    saved = p.load_checkpoint(ckpt, template)
                state, start = tuple(saved["state"]), int(saved["step"]) + 1
                it.set_state(saved["data"])
            if state is None:
                state = jax.device_put(fresh, rep)
            update = jax.jit(step_fn, out_shardings=rep)
            for step, batch in zip(range(start, steps), it, strict=False):
                x, y = p.put_batch(batch, mesh)
                state = update(state, x, y, jax.device_put(batch["id"].astype("int32"), rep))
                if step % every == 0:
                    snapshotter.save(step, {"state": state, "step": step, "data": it.get_state()})
                if sigterm.requested.is_set():
                    tree = {"state": state, "step": step, "data": it.get_state()}
                    p.save_checkpoint(checkpoint_dir, step, tree)
                    return None
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
