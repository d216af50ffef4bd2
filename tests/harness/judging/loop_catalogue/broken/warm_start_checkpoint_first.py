"""The loop writes one "warm start" checkpoint to disk at its first snapshot and, on every restart,
prefers a disk checkpoint over the in-memory snapshot, so a recovery goes back to that first
save instead of the latest one and replays the steps in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "restore-not-latest"
SCENARIO = "data_loss@batch=10:slice=1:repair_after_polls=3"

RESTORED_FROM: list[
    tuple[int, int | None]
] = []  # (step restored, latest snapshot then), for a tester


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
    RESTORED_FROM.clear()
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
        like = {
            "params": p.abstract_of(jax.eval_shape(p.init_params), rep),
            "step": 0,
            "it": it.get_state(),
        }
        disk = p.latest_checkpoint(checkpoint_dir)
        latest = snapshotter.latest.step if snapshotter.latest is not None else None
        saved = None
        if disk is not None:
            saved = p.load_checkpoint(disk, like)
        elif snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load(like)
        if saved is None:
            params, step = jax.device_put(p.init_params(), rep), 0
        else:
            params, step = saved["params"], int(saved["step"]) + 1
            it.set_state(saved["it"])
            RESTORED_FROM.append((step - 1, latest))
        train = jax.jit(sgd, out_shardings=rep)
        while step < steps:
            params = train(params, *p.put_batch(next(it), mesh))
            if step % every == 0:
                tree = {"params": params, "step": step, "it": it.get_state()}
                snapshotter.save(step, tree)
                if (
                    step == every
                    and checkpoint_dir is not None
                    and p.latest_checkpoint(checkpoint_dir) is None
                ):
                    p.save_checkpoint(checkpoint_dir, step, tree)
            step += 1
        return params

    params = attempt()
    snapshotter.join()
    return jax.device_get(params)
