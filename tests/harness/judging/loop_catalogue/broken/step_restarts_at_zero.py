"""The loop restores model and data position but counts steps from zero in every attempt, so a
recovered run trains a full ``steps`` more and overshoots the fault-free run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "step-not-restored"
SCENARIO = "data_loss@save=3:slice=2:repair_after_polls=3"


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


class Loop:
    def __init__(self, devices: Any, steps: int, every: int) -> None:
        import orbax.checkpoint as ocp
        from pathwaysutils.elastic import manager

        self.p = _parts()
        self.mgr = manager.Manager(devices)
        self.snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        self.data = self.p.dataset()
        self.steps, self.every = steps, every

    def attempt(self) -> Any:
        import grain
        import jax
        from grain.experimental import ElasticIterator

        p = self.p
        mesh = p.slice_mesh(self.mgr)
        rep = p.replicated(mesh)
        it = ElasticIterator(self.data, 16, grain.sharding.NoSharding())
        if self.snap.latest is not None:
            self.snap.join()
            got = self.snap.load(
                {"w": p.abstract_of(jax.eval_shape(p.init_params), rep), "it": it.get_state()}
            )
            params = got["w"]
            it.set_state(got["it"])
        else:
            params = jax.device_put(p.init_params(), rep)
        step_fn = jax.jit(
            lambda w, x, y: jax.tree.map(lambda a, g: a - 0.05 * g, w, p.grads(w, x, y))
        )
        for i, batch in zip(range(self.steps), it, strict=False):
            params = step_fn(params, *p.put_batch(batch, mesh))
            if i % self.every == 0:
                self.snap.save(i, {"w": params, "it": it.get_state()})
        return params

    def run(self) -> Any:
        import jax

        retry = self.mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
        params = retry(self.attempt)()
        self.snap.join()
        return jax.device_get(params)


def main(
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 4
) -> Any:
    return Loop(devices, steps, every).run()
