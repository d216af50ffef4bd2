"""When slices come back the loop claims them and grows the batch, but keeps training on the old
mesh (it forgot to rebuild it and move the state), so the returned slices sit idle while the
manager counts them as active.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "stale-mesh"
SCENARIO = "data_loss@batch=6:slice=2,repair@time=15:slice=2"

TRACE: list[
    tuple[int, int]
] = []  # (mesh rows, slices the manager calls active) per step, for a tester


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
    TRACE.clear()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()

    @jax.jit
    def sgd(params: Any, x: Any, y: Any) -> Any:
        return jax.tree.map(lambda w, g: w - 0.05 * g, params, p.grads(params, x, y))

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, int(mgr.scale_by_active_slices(16)), grain.sharding.NoSharding())
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
            params = sgd(params, *p.put_batch(next(it), mesh))
            TRACE.append((int(mesh.devices.shape[0]), mgr.active_slice_count))
            if step % every == 0:
                snapshotter.save(step, {"params": params, "step": step, "it": it.get_state()})
            if mgr.available_inactive_slices:
                mgr.active_slice_indices = mgr.active_slice_indices | mgr.available_inactive_slices
                position = it.get_state()
                it = ElasticIterator(
                    data, int(mgr.scale_by_active_slices(16)), grain.sharding.NoSharding()
                )
                it.set_state(position)
            step += 1
        return params

    params = attempt()
    snapshotter.join()
    return jax.device_get(params)
