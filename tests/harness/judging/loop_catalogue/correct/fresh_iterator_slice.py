"""Replica resize, fixed batch: each attempt builds a NEW ``ElasticIterator`` over
``data[position:]`` from the absolute sample position the snapshot recorded (never ``set_state``).

Correct: the loop keeps the absolute position itself (start of the slice plus the iterator's own
count), so the data continue exactly where the restored model stopped.
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

    def step_fn(params: Any, x: Any, y: Any) -> Any:
        return jax.tree.map(lambda w, g: w - lr * g, params, p.grads(params, x, y))

    with p.SigtermFlag() as sigterm:

        @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
        def attempt() -> Any:
            mesh = p.slice_mesh(mgr)
            rep = p.replicated(mesh)
            like = {
                "params": p.abstract_of(jax.eval_shape(p.init_params), rep),
                "step": 0,
                "position": 0,
            }
            ckpt = p.latest_checkpoint(checkpoint_dir)
            saved = None
            if snapshotter.latest is not None:
                snapshotter.join()
                saved = snapshotter.load(like)
            elif ckpt is not None:
                saved = p.load_checkpoint(ckpt, like)
            if saved is None:
                params, step, base = jax.device_put(p.init_params(), rep), 0, 0
            else:
                params, step, base = saved["params"], int(saved["step"]), int(saved["position"])
            it = ElasticIterator(data[base:], global_batch, grain.sharding.NoSharding())
            update = jax.jit(step_fn, out_shardings=rep)

            def position() -> int:
                return base + int(it.get_state()["global_next_index"])

            while step < steps:
                params = update(params, *p.put_batch(next(it), mesh))
                step += 1
                if step % every == 0:
                    snapshotter.save(step, {"params": params, "step": step, "position": position()})
                if sigterm.requested.is_set():
                    tree = {"params": params, "step": step, "position": position()}
                    p.save_checkpoint(checkpoint_dir, step, tree)
                    return None
            return params

        params = attempt()
        snapshotter.join()
    return None if params is None else jax.device_get(params)
