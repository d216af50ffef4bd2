"""Pause-and-resume, fixed batch, dict state, ``for batch in iterator:`` with an explicit step.

Correct: every snapshot holds the model, the step and the iterator position taken together
after the step; a retry restores all three from the latest snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
    *,
    devices: Any = None,
    checkpoint_dir: str | None = None,
    steps: int = 24,
    every: int = 4,
    global_batch: int = 16,
    lr: float = 0.05,
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

    def sgd(state: dict[str, Any], x: Any, y: Any) -> dict[str, Any]:
        g = p.grads(state["params"], x, y)
        mom = jax.tree.map(lambda m, d: 0.9 * m + d, state["mom"], g)
        return {"params": jax.tree.map(lambda w, m: w - lr * m, state["params"], mom), "mom": mom}

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            fresh = {
                "params": p.init_params(),
                "mom": jax.tree.map(jax.numpy.zeros_like, p.init_params()),
            }
            abstract = p.abstract_of(fresh, rep)
            it = ElasticIterator(data, global_batch, grain.sharding.NoSharding())
            template = {"state": abstract, "step": 0, "data": it.get_state()}
            ckpt = p.latest_checkpoint(checkpoint_dir)
            if snapshotter.latest is not None:
                snapshotter.join()
                saved = snapshotter.load(template)
            elif ckpt is not None:
                saved = p.load_checkpoint(ckpt, template)
            else:
                saved = None
            if saved is None:
                state, step = jax.device_put(fresh, rep), 0
            else:
                state, step = saved["state"], int(saved["step"])
                it.set_state(saved["data"])
            update = jax.jit(sgd, out_shardings=rep)
            if step >= steps:
                return state
            for batch in it:
                state = update(state, *p.put_batch(batch, mesh))
                step += 1
                if step % every == 0:
                    snapshotter.save(step, {"state": state, "step": step, "data": it.get_state()})
                if sigterm.requested.is_set():
                    p.save_checkpoint(
                        checkpoint_dir, step, {"state": state, "step": step, "data": it.get_state()}
                    )
                    return None
                if step >= steps:
                    break
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
