"""Replica resize, scaled batch, nested state with an int step counter in the optimizer and a tally
(samples trained, sum of their ids), and the
restored tree kept in a local variable for the whole attempt (for logging what was restored).

Correct: the reference to the restored tree is harmless (those arrays live on active slices
only, and the attempt drops it on exit); model, optimizer counter, step and position are restored
together from the latest snapshot.
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
    every: int = 5,
    global_batch: int = 16,
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

    def init() -> dict[str, Any]:
        params = p.init_params(seed=7)
        return {
            "model": params,
            "opt": {"mu": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.int32)},
            "seen": jnp.zeros((2,), jnp.int32),
        }

    def step_fn(s: dict[str, Any], x: Any, y: Any, ids: Any) -> dict[str, Any]:
        g = p.grads(s["model"], x, y)
        count = s["opt"]["count"] + 1
        mu = jax.tree.map(lambda m, d: 0.9 * m + 0.1 * d, s["opt"]["mu"], g)
        correction = 1.0 - 0.9 ** count.astype(jnp.float32)
        model = jax.tree.map(lambda w, m: w - 0.1 * m / correction, s["model"], mu)
        seen = s["seen"] + jnp.stack([ids.shape[0], jnp.sum(ids)]).astype(jnp.int32)
        return {"model": model, "opt": {"mu": mu, "count": count}, "seen": seen}

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            it = ElasticIterator(
                data, int(mgr.scale_by_active_slices(global_batch)), grain.sharding.NoSharding()
            )
            like = {
                "state": p.abstract_of(jax.eval_shape(init), rep),
                "step": 0,
                "pos": it.get_state(),
            }
            restored = None
            ckpt = p.latest_checkpoint(checkpoint_dir)
            if snapshotter.latest is not None:
                snapshotter.join()
                restored = snapshotter.load(like)
            elif ckpt is not None:
                restored = p.load_checkpoint(ckpt, like)
            if restored is not None:
                state, first = restored["state"], int(restored["step"]) + 1
                it.set_state(restored["pos"])
            else:
                state, first = jax.device_put(init(), rep), 0
            update = jax.jit(step_fn, out_shardings=rep)
            for step in range(first, steps):
                batch = next(it)
                ids = jax.device_put(batch["id"].astype("int32"), rep)
                state = update(state, *p.put_batch(batch, mesh), ids)
                if step % every == 0 or step == steps - 1:
                    snapshotter.save(step, {"state": state, "step": step, "pos": it.get_state()})
                if sigterm.requested.is_set():
                    p.save_checkpoint(
                        checkpoint_dir, step, {"state": state, "step": step, "pos": it.get_state()}
                    )
                    return None
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
