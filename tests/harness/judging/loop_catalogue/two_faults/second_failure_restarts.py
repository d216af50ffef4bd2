"""A recovery counter: the first slice failure restores the latest snapshot, but from the second
one on the loop distrusts the in-memory snapshot ("repeated failures may mean it is corrupt")
and falls back to a clean restart, which, with no disk checkpoint, starts training over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "started-over"
SCENARIO = (
    "data_loss@batch=6:slice=1:repair_after_polls=3,data_loss@batch=16:slice=2:repair_after_polls=3"
)
SINGLE_FAULTS_PASS = [
    "data_loss@batch=6:slice=1:repair_after_polls=3",
    "data_loss@batch=16:slice=2:repair_after_polls=3",
    "data_loss@save=3:slice=2:repair_after_polls=3",
]

STARTS: list[int] = []  # the step each attempt started at, for a tester's own evidence


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


class Job:
    MAX_SNAPSHOT_RESTORES = 1

    def __init__(self, devices: Any, checkpoint_dir: str | None, steps: int, every: int) -> None:
        import orbax.checkpoint as ocp
        from pathwaysutils.elastic import manager

        self.p = _parts()
        self.mgr = manager.Manager(devices)
        self.snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        self.data = self.p.dataset()
        self.checkpoint_dir, self.steps, self.every = checkpoint_dir, steps, every
        self.snapshot_restores = 0

    def train(self) -> Any:
        import grain
        import jax
        from grain.experimental import ElasticIterator

        p = self.p
        mesh = p.slice_mesh(self.mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(self.data, 16, grain.sharding.NoSharding())
        usable = (
            self.snapshotter.latest is not None
            and self.snapshot_restores < self.MAX_SNAPSHOT_RESTORES
        )
        if usable:
            self.snapshotter.join()
            like = {
                "params": p.abstract_of(jax.eval_shape(p.init_params), rep),
                "step": 0,
                "it": it.get_state(),
            }
            saved = self.snapshotter.load(like)
            self.snapshot_restores += 1
            params, step = saved["params"], int(saved["step"]) + 1
            it.set_state(saved["it"])
        else:
            params, step = jax.device_put(p.init_params(), rep), 0
        STARTS.append(step)
        update = jax.jit(
            lambda w, x, y: jax.tree.map(lambda a, g: a - 0.05 * g, w, p.grads(w, x, y)),
            out_shardings=rep,
        )
        while step < self.steps:
            params = update(params, *p.put_batch(next(it), mesh))
            if step % self.every == 0:
                self.snapshotter.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        return params

    def run(self) -> Any:
        import jax

        STARTS.clear()
        params = self.mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)(
            self.train
        )()
        self.snapshotter.join()
        return jax.device_get(params)


def main(
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 4
) -> Any:
    return Job(devices, checkpoint_dir, steps, every).run()
