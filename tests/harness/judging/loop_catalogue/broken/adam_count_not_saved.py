"""The snapshot saves the params and Adam's two moment trees but not Adam's step ``count`` (the loop
rebuilds the optax state around the restored moments with a zero count), so bias correction
restarts after every recovery.
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
    import optax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()
    tx = optax.adam(0.02)

    def step_fn(params: Any, opt: Any, x: Any, y: Any) -> tuple[Any, Any]:
        updates, opt = tx.update(p.grads(params, x, y), opt, params)
        return optax.apply_updates(params, updates), opt

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        abstract = p.abstract_of(jax.eval_shape(p.init_params, 11), rep)
        if snapshotter.latest is not None:
            snapshotter.join()
            like = {
                "params": abstract,
                "mu": abstract,
                "nu": abstract,
                "step": 0,
                "it": it.get_state(),
            }
            saved = snapshotter.load(like)
            params, step = saved["params"], int(saved["step"]) + 1
            adam = optax.ScaleByAdamState(
                count=jax.device_put(jnp.zeros((), jnp.int32), rep), mu=saved["mu"], nu=saved["nu"]
            )
            opt = (adam, optax.EmptyState())
            it.set_state(saved["it"])
        else:
            params, step = jax.device_put(p.init_params(11), rep), 0
            opt = jax.device_put(tx.init(params), rep)
        train = jax.jit(step_fn, out_shardings=rep)
        while step < steps:
            params, opt = train(params, opt, *p.put_batch(next(it), mesh))
            if step % every == 0:
                tree = {
                    "params": params,
                    "mu": opt[0].mu,
                    "nu": opt[0].nu,
                    "step": step,
                    "it": it.get_state(),
                }
                snapshotter.save(step, tree)
            step += 1
        return {"params": params, "opt": opt}

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
