"""Pause-and-resume, fixed batch, a NamedTuple state whose step lives on the device, ``while``
and ``next``.

Correct: the step is a leaf of the state, so it is restored with the model; the snapshot
adds the iterator position taken at the same moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple


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


class TrainState(NamedTuple):
    step: Any
    params: Any
    velocity: Any


def main(
    *,
    devices: Any = None,
    checkpoint_dir: str | None = None,
    steps: int = 24,
    every: int = 3,
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

    def step_fn(s: TrainState, x: Any, y: Any) -> TrainState:
        g = p.grads(s.params, x, y)
        v = jax.tree.map(lambda a, b: 0.8 * a + b, s.velocity, g)
        return TrainState(s.step + 1, jax.tree.map(lambda w, d: w - lr * d, s.params, v), v)

    def fresh() -> TrainState:
        params = p.init_params()
        return TrainState(jnp.zeros((), jnp.int32), params, jax.tree.map(jnp.zeros_like, params))

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=None, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            iterator = ElasticIterator(data, global_batch, grain.sharding.NoSharding())
            like = {
                "train": p.abstract_of(jax.eval_shape(fresh), rep),
                "data": iterator.get_state(),
            }
            ckpt = p.latest_checkpoint(checkpoint_dir)
            if snapshotter.latest is not None:
                snapshotter.join()
                got = snapshotter.load(like)
            elif ckpt is not None:
                got = p.load_checkpoint(ckpt, like)
            else:
                got = None
            if got is None:
                state = jax.device_put(fresh(), rep)
            else:
                state = TrainState(*got["train"])
                iterator.set_state(got["data"])
            update = jax.jit(step_fn, out_shardings=rep)
            while int(state.step) < steps:
                batch = next(iterator)
                state = update(state, *p.put_batch(batch, mesh))
                done = int(state.step)
                if done % every == 0:
                    snapshotter.save(done, {"train": state, "data": iterator.get_state()})
                if sigterm.requested.is_set():
                    tree = {"train": state, "data": iterator.get_state()}
                    p.save_checkpoint(checkpoint_dir, done, tree)
                    return None
            return state

        state = attempt()
        snapshotter.join()
    return None if state is None else jax.device_get(state)
