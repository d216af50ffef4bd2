"""On restore the loop loads only the parameters and rebuilds the momentum as zeros ("it is
cheap to rebuild"), so training after a recovery follows a different trajectory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "leaf-reinitialised"
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

    def update(params: Any, momentum: Any, x: Any, y: Any) -> tuple[Any, Any]:
        g = p.grads(params, x, y)
        momentum = jax.tree.map(lambda m, d: 0.9 * m + d, momentum, g)
        return jax.tree.map(lambda w, m: w - 0.03 * m, params, momentum), momentum

    @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        abstract_params = p.abstract_of(jax.eval_shape(p.init_params), rep)
        if snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load(
                {
                    "params": abstract_params,
                    "momentum": abstract_params,
                    "step": 0,
                    "it": it.get_state(),
                }
            )
            params, first = saved["params"], int(saved["step"]) + 1
            momentum = jax.tree.map(jnp.zeros_like, params)
            it.set_state(saved["it"])
        else:
            params, first = jax.device_put(p.init_params(), rep), 0
            momentum = jax.tree.map(jnp.zeros_like, params)
        train = jax.jit(update, out_shardings=rep)
        for step in range(first, steps):
            params, momentum = train(params, momentum, *p.put_batch(next(it), mesh))
            if step % every == 0:
                snapshotter.save(
                    step,
                    {"params": params, "momentum": momentum, "step": step, "it": it.get_state()},
                )
        return {"params": params, "momentum": momentum}

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
