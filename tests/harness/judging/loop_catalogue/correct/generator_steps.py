"""Pause-and-resume, fixed batch: training written as a generator that yields after every step,
driven by an outer loop that owns snapshots and the SIGTERM checkpoint; on start it prefers the
newer of the in-memory snapshot and the on-disk checkpoint.

Correct: the driver snapshots only what the generator has yielded (state, step and position
of the same step), and restores from whichever saved copy is newest.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def _train(
    state: Any, step: int, steps: int, iterator: Any, mesh: Any, update: Any
) -> Iterator[tuple[int, Any]]:
    """Yields (step, state) after each step; the iterator's position then matches ``state``."""
    p = _parts()
    while step < steps:
        state = update(state, *p.put_batch(next(iterator), mesh))
        yield step, state
        step += 1


def main(
    *,
    devices: Any = None,
    checkpoint_dir: str | None = None,
    steps: int = 24,
    every: int = 4,
    global_batch: int = 16,
) -> Any:
    import grain
    import jax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()

    def update_fn(state: tuple[Any, Any], x: Any, y: Any) -> tuple[Any, Any]:
        params, sq = state
        g = p.grads(params, x, y)
        sq = jax.tree.map(lambda s, d: 0.9 * s + 0.1 * d * d, sq, g)
        return jax.tree.map(lambda w, d, s: w - 0.01 * d / (s**0.5 + 1e-3), params, g, sq), sq

    def init() -> tuple[Any, Any]:
        params = p.init_params(seed=5)
        return params, jax.tree.map(jax.numpy.zeros_like, params)

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            it = ElasticIterator(data, global_batch, grain.sharding.NoSharding())
            like = {
                "state": p.abstract_of(jax.eval_shape(init), rep),
                "step": 0,
                "it": it.get_state(),
            }
            ckpt = p.latest_checkpoint(checkpoint_dir)
            ckpt_step = int(ckpt.name.split("_")[1]) if ckpt is not None else -1
            snap_step = snapshotter.latest.step if snapshotter.latest is not None else -1
            if snap_step >= 0 and snap_step >= ckpt_step:
                snapshotter.join()
                saved = snapshotter.load(like)
            elif ckpt is not None:
                saved = p.load_checkpoint(ckpt, like)
            else:
                saved = None
            if saved is None:
                state0, start = jax.device_put(init(), rep), 0
            else:
                state0, start = tuple(saved["state"]), int(saved["step"]) + 1
                it.set_state(saved["it"])
            update = jax.jit(update_fn, out_shardings=rep)
            for step, state in _train(state0, start, steps, it, mesh, update):
                tree = {"state": state, "step": step, "it": it.get_state()}
                if step % every == 0:
                    snapshotter.save(step, tree)
                if sigterm.requested.is_set():
                    p.save_checkpoint(checkpoint_dir, step, tree)
                    return None
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
