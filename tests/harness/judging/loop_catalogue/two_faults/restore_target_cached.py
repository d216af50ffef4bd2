"""The restore target (abstract state with its shardings) is built once, at the first restore, and
cached; the first recovery is correct, but a second recovery on another set of slices restores
onto the first recovery's mesh, which holds the newly dead slice: every retry fails again until
that slice is repaired (never, if it is gone for good).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "dead-slice-in-mesh"
SCENARIO = "data_loss@batch=6:slice=1,data_loss@batch=14:slice=2"
SINGLE_FAULTS_PASS = [
    "data_loss@batch=6:slice=1",
    "data_loss@batch=14:slice=2",
    "data_loss@save=3:slice=2:repair_after_polls=3",
]


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
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()
    cache: dict[str, Any] = {}

    def sgd(params: Any, x: Any, y: Any) -> Any:
        return jax.tree.map(lambda w, g: w - 0.05 * g, params, p.grads(params, x, y))

    def restore_target(mesh: Any, iterator: Any) -> Any:
        if "target" not in cache:  # built once: "the model's shapes never change"
            abstract = p.abstract_of(jax.eval_shape(p.init_params), p.replicated(mesh))
            cache["target"] = {"params": abstract, "step": 0, "it": iterator.get_state()}
        return cache["target"]

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300, max_retries=8)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        if snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load(restore_target(mesh, it))
            params, step = saved["params"], int(saved["step"]) + 1
            it.set_state(saved["it"])
        else:
            params, step = jax.device_put(p.init_params(), rep), 0
        train = jax.jit(sgd)
        while step < steps:
            params = train(params, *p.put_batch(next(it), mesh))
            if step % every == 0:
                snapshotter.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        return params

    params = attempt()
    snapshotter.join()
    return jax.device_get(params)
