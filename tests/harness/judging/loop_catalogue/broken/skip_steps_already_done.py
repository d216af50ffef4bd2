"""To avoid "training the same step twice" after a restore, the loop remembers the highest step it
ever ran and ``continue``s past any step at or below it, but it has already drawn that step's batch,
so the batches between the snapshot and the failure are never trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "batch-not-trained"
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


class Run:
    def __init__(self, devices: Any, steps: int, every: int) -> None:
        import orbax.checkpoint as ocp
        from pathwaysutils.elastic import manager

        self.p = _parts()
        self.mgr = manager.Manager(devices)
        self.snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        self.data = self.p.dataset()
        self.steps, self.every = steps, every
        self.highest_step_run = -1

    def attempt(self) -> Any:
        import grain
        import jax
        from grain.experimental import ElasticIterator

        p = self.p
        mesh = p.slice_mesh(self.mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(self.data, 16, grain.sharding.NoSharding())
        like = {
            "params": p.abstract_of(jax.eval_shape(p.init_params), rep),
            "step": 0,
            "it": it.get_state(),
        }
        if self.snapshotter.latest is not None:
            self.snapshotter.join()
            saved = self.snapshotter.load(like)
            params, step = saved["params"], int(saved["step"]) + 1
            it.set_state(saved["it"])
        else:
            params, step = jax.device_put(p.init_params(), rep), 0
        update = jax.jit(
            lambda w, x, y: jax.tree.map(lambda a, g: a - 0.05 * g, w, p.grads(w, x, y)),
            out_shardings=rep,
        )
        while step < self.steps:
            batch = next(it)
            if step <= self.highest_step_run:
                step += 1
                continue  # "already trained before the failure"
            params = update(params, *p.put_batch(batch, mesh))
            self.highest_step_run = step
            if step % self.every == 0:
                self.snapshotter.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        return params

    def run(self) -> Any:
        import jax

        retry = self.mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
        params = retry(self.attempt)()
        self.snapshotter.join()
        return jax.device_get(params)


def main(
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 5
) -> Any:
    return Run(devices, steps, every).run()
