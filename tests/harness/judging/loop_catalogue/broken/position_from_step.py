"""The snapshot keeps only the step, and the data position is recomputed as ``(step + 1) * batch``
with the CURRENT batch size; after a resize shrinks the batch that points back into samples
already trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "sample-trained-twice"
# The first line names the mechanism (the first batch after the restore is drawn behind the
# restored data position); the cause above is what it leads to.
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
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from pathwaysutils.elastic import manager

    p = _parts()
    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = p.dataset()

    def update(state: Any, x: Any, y: Any, ids: Any) -> Any:
        g = p.grads(state["params"], x, y)
        params = jax.tree.map(lambda w, d: w - 0.05 * d, state["params"], g)
        return {
            "params": params,
            "seen": state["seen"] + jnp.stack([ids.shape[0], jnp.sum(ids)]).astype(jnp.int32),
        }

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        mesh = p.slice_mesh(mgr)
        rep = p.replicated(mesh)
        batch = int(mgr.scale_by_active_slices(16))
        it = ElasticIterator(data, batch, grain.sharding.NoSharding())
        fresh = {"params": p.init_params(), "seen": jnp.zeros((2,), jnp.int32)}
        if snapshotter.latest is not None:
            snapshotter.join()
            saved = snapshotter.load({"state": p.abstract_of(fresh, rep), "step": 0})
            state, step = saved["state"], int(saved["step"]) + 1
            it.set_state({"global_next_index": step * batch})
        else:
            state, step = jax.device_put(fresh, rep), 0
        train = jax.jit(update, out_shardings=rep)
        while step < steps:
            b = next(it)
            state = train(
                state, *p.put_batch(b, mesh), jax.device_put(b["id"].astype("int32"), rep)
            )
            if step % every == 0:
                snapshotter.save(step, {"state": state, "step": step})
            step += 1
        return state

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
