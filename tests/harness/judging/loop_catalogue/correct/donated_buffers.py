"""Replica resize, fixed batch, nested dict state, a step jitted with ``donate_argnums=0``.

Correct: the donated input is never touched again (the name is rebound to the output), and the
snapshot is taken from the new state before the next step donates it.
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
    every: int = 2,
    global_batch: int = 16,
    lr: float = 0.05,
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
        params = p.init_params(seed=1)
        return {
            "model": {
                "dense": {"w1": params["w1"], "b1": params["b1"]},
                "head": {"w2": params["w2"]},
            },
            "opt": {"velocity": jax.tree.map(jnp.zeros_like, params), "lr": jnp.float32(lr)},
        }

    def step_fn(s: dict[str, Any], x: Any, y: Any) -> dict[str, Any]:
        params = {**s["model"]["dense"], **s["model"]["head"]}
        g = p.grads(params, x, y)
        vel = jax.tree.map(lambda v, d: 0.9 * v + d, s["opt"]["velocity"], g)
        new = jax.tree.map(lambda w, v: w - s["opt"]["lr"] * v, params, vel)
        return {
            "model": {"dense": {"w1": new["w1"], "b1": new["b1"]}, "head": {"w2": new["w2"]}},
            "opt": {"velocity": vel, "lr": s["opt"]["lr"]},
        }

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            it = ElasticIterator(data, global_batch, grain.sharding.NoSharding())
            like = {"s": p.abstract_of(jax.eval_shape(init), rep), "k": 0, "it": it.get_state()}
            ckpt = p.latest_checkpoint(checkpoint_dir)
            if snapshotter.latest is not None:
                snapshotter.join()
                got = snapshotter.load(like)
            elif ckpt is not None:
                got = p.load_checkpoint(ckpt, like)
            else:
                got = {"s": jax.device_put(init(), rep), "k": -1, "it": it.get_state()}
            state, k = got["s"], int(got["k"]) + 1
            it.set_state(got["it"])
            update = jax.jit(step_fn, donate_argnums=0, out_shardings=rep)
            while k < steps:
                state = update(state, *p.put_batch(next(it), mesh))
                if k % every == 0:
                    snapshotter.save(k, {"s": state, "k": k, "it": it.get_state()})
                    snapshotter.join()
                if sigterm.requested.is_set():
                    p.save_checkpoint(checkpoint_dir, k, {"s": state, "k": k, "it": it.get_state()})
                    return None
                k += 1
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
