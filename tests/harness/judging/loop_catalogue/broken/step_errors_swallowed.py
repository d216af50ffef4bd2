"""A ``try/except Exception`` around the step (meant for flaky logging) also catches the slice-down
error: the batch is dropped, ``elastic_retry`` never sees the failure, and every later step on
the dead slice is dropped the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

CAUSE = "error-swallowed"
SCENARIO = "data_loss@batch=10:slice=1:repair_after_polls=3"

SWALLOWED: list[str] = []  # errors the loop caught and ignored, for a tester's own evidence


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
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    SWALLOWED.clear()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()
    log = logging.getLogger("loop_catalogue.step_errors_swallowed")

    @jax.jit
    def sgd(params: Any, x: Any, y: Any) -> tuple[Any, Any]:
        value, g = jax.value_and_grad(p.loss)(params, x, y)
        return jax.tree.map(lambda w, d: w - 0.05 * d, params, g), value

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        if snapshotter.latest is not None:
            snapshotter.join()
            like = {
                "params": p.abstract_of(jax.eval_shape(p.init_params), rep),
                "step": 0,
                "it": it.get_state(),
            }
            saved = snapshotter.load(like)
            params, step = saved["params"], int(saved["step"]) + 1
            it.set_state(saved["it"])
        else:
            params, step = jax.device_put(p.init_params(), rep), 0
        while step < steps:
            batch = next(it)
            try:
                new_params, value = sgd(params, *p.put_batch(batch, mesh))
                log.debug("step %d loss %.4f", step, float(value))
                params = new_params
            except Exception as error:  # the bug: this also catches the slice-down error
                SWALLOWED.append(f"{type(error).__name__}: {error}"[:120])
                log.warning("step %d failed, skipping the batch", step)
            if step % every == 0:
                try:
                    snapshotter.save(step, {"params": params, "step": step, "it": it.get_state()})
                except Exception:
                    log.warning("snapshot at step %d failed", step)
            step += 1
        return params

    params = attempt()
    snapshotter.join()
    return jax.device_get(params)
