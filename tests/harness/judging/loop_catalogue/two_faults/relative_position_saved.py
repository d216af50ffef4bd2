"""Each attempt opens a new iterator over ``data[start:]`` but the snapshot stores the iterator's
own position, which counts from that attempt's ``start``: right after the first recovery (start
0) the two agree, so one fault is survived; snapshots taken after it hold a position relative to
the new start, and a second recovery rewinds into samples already trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "sample-trained-twice"
# The first line names the mechanism (the position the snapshot holds is not the one the data is
# drawn from after the second restore); the cause above is what it leads to.
HEADLINE = "iterator-not-restored"
SCENARIO = (
    "data_loss@batch=6:slice=1:repair_after_polls=3,data_loss@batch=18:slice=2:repair_after_polls=3"
)
SINGLE_FAULTS_PASS = [
    "data_loss@batch=6:slice=1:repair_after_polls=3",
    "data_loss@batch=18:slice=2:repair_after_polls=3",
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

    def sgd(params: Any, x: Any, y: Any) -> Any:
        return jax.tree.map(lambda w, g: w - 0.05 * g, params, p.grads(params, x, y))

    @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        like = {
            "params": p.abstract_of(jax.eval_shape(p.init_params), rep),
            "step": 0,
            "position": 0,
        }
        if snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load(like)
            params, step, start = saved["params"], int(saved["step"]) + 1, int(saved["position"])
        else:
            params, step, start = jax.device_put(p.init_params(), rep), 0, 0
        it = ElasticIterator(data[start:], 16, grain.sharding.NoSharding())
        train = jax.jit(sgd, out_shardings=rep)
        while step < steps:
            params = train(params, *p.put_batch(next(it), mesh))
            if step % every == 0:
                position = it.get_state()["global_next_index"]  # the bug: relative to `start`
                snapshotter.save(step, {"params": params, "step": step, "position": position})
            step += 1
        return params

    params = attempt()
    snapshotter.join()
    return jax.device_get(params)
