"""The restore unpacks the state dict by position (``weights, velocity = restored.values()``),
but the restored dict comes back with its keys sorted, so weights and velocity swap after a
recovery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "wrong-final-state"
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

    def update(params: Any, velocity: Any, x: Any, y: Any) -> tuple[Any, Any]:
        g = p.grads(params, x, y)
        velocity = jax.tree.map(lambda v, d: 0.9 * v + d, velocity, g)
        return jax.tree.map(lambda w, v: w - 0.03 * v, params, velocity), velocity

    @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        abstract = p.abstract_of(jax.eval_shape(p.init_params), rep)
        if snapshotter.latest is not None:
            snapshotter.join()
            like = {
                "state": {"weights": abstract, "velocity": abstract},
                "step": 0,
                "it": it.get_state(),
            }
            restored = snapshotter.load(like)
            params, velocity = restored["state"].values()  # insertion order was weights, velocity
            step = int(restored["step"]) + 1
            it.set_state(restored["it"])
        else:
            params = jax.device_put(p.init_params(), rep)
            velocity, step = jax.tree.map(jnp.zeros_like, params), 0
        train = jax.jit(update, out_shardings=rep)
        while step < steps:
            params, velocity = train(params, velocity, *p.put_batch(next(it), mesh))
            if step % every == 0:
                state = {"weights": params, "velocity": velocity}
                snapshotter.save(step, {"state": state, "step": step, "it": it.get_state()})
            step += 1
        return {"weights": params, "velocity": velocity}

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
