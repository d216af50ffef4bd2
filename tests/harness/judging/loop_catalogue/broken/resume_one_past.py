"""Off by one: the snapshot labels the step just trained, but the restore treats the label as the
count of steps done and then moves one past it, so the batch after each restore is never trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "sample-skipped"
# The first line names the mechanism (the first batch after the restore is drawn one batch ahead
# of the restored data position); the cause above is what it leads to.
HEADLINE = "iterator-not-restored"
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
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()

    def sgd(params: Any, x: Any, y: Any) -> Any:
        return jax.tree.map(lambda w, g: w - 0.05 * g, params, p.grads(params, x, y))

    @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(data, 16, grain.sharding.NoSharding())
        if snapshotter.latest is not None:
            snapshotter.join()
            like = {"params": p.abstract_of(jax.eval_shape(p.init_params), rep), "step": 0}
            saved = snapshotter.load(like)
            done = int(saved["step"]) + 1  # steps done = label + 1 ...
            params, step = saved["params"], done
            it.set_state(
                {"global_next_index": (done + 1) * 16}
            )  # ... and the bug: one batch too far
        else:
            params, step = jax.device_put(p.init_params(), rep), 0
        train = jax.jit(sgd, out_shardings=rep)
        while step < steps:
            params = train(params, *p.put_batch(next(it), mesh))
            if step % every == 0:
                snapshotter.save(step, {"params": params, "step": step})
            step += 1
        return params

    params = attempt()
    snapshotter.join()
    return jax.device_get(params)
