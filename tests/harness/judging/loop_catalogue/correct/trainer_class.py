"""A ``Trainer`` class with a ``main`` wrapper: replica resize, scaled batch, a registered dataclass
state (with a tally of the samples trained), and scale-up by raising pathwaysutils'
``ScaleUpSignalError`` after a fresh snapshot.

Correct: before asking for a scale-up the trainer waits for any save in flight, snapshots the
current step and waits again, so the next attempt restores exactly where training stopped.
"""

# No `from __future__ import annotations` here: with string annotations `@dataclass` looks its
# module up in sys.modules, and the toolkit's file loader does not register the module there.

import dataclasses
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


@dataclasses.dataclass
class ModelState:
    params: Any
    trace: Any
    seen: Any  # [samples trained, sum of their ids]


_REGISTERED: list[bool] = []


def _register() -> None:
    import jax

    if not _REGISTERED:
        jax.tree_util.register_dataclass(
            ModelState, data_fields=["params", "trace", "seen"], meta_fields=[]
        )
        _REGISTERED.append(True)


class Trainer:
    """Owns the manager, the snapshotter and the data; ``fit`` runs under ``elastic_retry``."""

    def __init__(
        self, devices: Any, checkpoint_dir: str | None, steps: int, every: int, batch: int
    ):
        import orbax.checkpoint as ocp
        from pathwaysutils.elastic import manager

        _register()
        self.p = _parts()
        self.manager = manager.Manager(devices)
        self.snapshots = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        self.data = self.p.dataset()
        self.checkpoint_dir, self.steps, self.every, self.batch = (
            checkpoint_dir,
            steps,
            every,
            batch,
        )
        self.scale_ups = 0

    def _fresh(self) -> ModelState:
        import jax

        params = self.p.init_params(seed=3)
        zeros = jax.numpy.zeros
        return ModelState(params, jax.tree.map(jax.numpy.zeros_like, params), zeros((2,), "int32"))

    def _train_step(self, s: ModelState, x: Any, y: Any, ids: Any) -> ModelState:
        import jax

        g = self.p.grads(s.params, x, y)
        trace = jax.tree.map(lambda t, d: 0.5 * t + d, s.trace, g)
        seen = s.seen + jax.numpy.stack([ids.shape[0], ids.sum()]).astype("int32")
        return ModelState(jax.tree.map(lambda w, t: w - 0.04 * t, s.params, trace), trace, seen)

    def _payload(self, state: ModelState, step: int, iterator: Any) -> dict[str, Any]:
        return {"model": state, "step": step, "iterator": iterator.get_state()}

    def fit(self, sigterm: Any) -> "ModelState | None":
        import grain
        import jax
        from grain.experimental import ElasticIterator
        from pathwaysutils.elastic import manager

        mesh = self.p.slice_mesh(self.manager)
        rep = self.p.replicated(mesh)
        size = int(self.manager.scale_by_active_slices(self.batch))
        iterator = ElasticIterator(self.data, size, grain.sharding.NoSharding())
        like = self._payload(self.p.abstract_of(jax.eval_shape(self._fresh), rep), 0, iterator)
        checkpoint = self.p.latest_checkpoint(self.checkpoint_dir)
        if self.snapshots.latest is not None:
            self.snapshots.join()
            saved = self.snapshots.load(like)
        elif checkpoint is not None:
            saved = self.p.load_checkpoint(checkpoint, like)
        else:
            saved = None
        if saved is None:
            state, next_step = jax.device_put(self._fresh(), rep), 0
        else:
            state, next_step = saved["model"], int(saved["step"]) + 1
            iterator.set_state(saved["iterator"])
        step_fn = jax.jit(self._train_step, out_shardings=rep)
        for step in range(next_step, self.steps):
            batch = next(iterator)
            ids = jax.device_put(batch["id"].astype("int32"), rep)
            state = step_fn(state, *self.p.put_batch(batch, mesh), ids)
            if step % self.every == 0:
                self.snapshots.save(step, self._payload(state, step, iterator))
            if sigterm.requested.is_set():
                self.p.save_checkpoint(
                    self.checkpoint_dir, step, self._payload(state, step, iterator)
                )
                return None
            if self.manager.available_inactive_slices and step + 1 < self.steps:
                self.snapshots.join()
                self.snapshots.save(step, self._payload(state, step, iterator))
                self.snapshots.join()
                self.scale_ups += 1
                raise manager.ScaleUpSignalError(
                    f"slices {sorted(self.manager.available_inactive_slices)} are back"
                )
        return state

    def run(self) -> Any:
        import jax

        with self.p.SigtermFlag() as sigterm:
            retry = self.manager.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
            state = retry(self.fit)(sigterm)
            self.snapshots.join()
        return None if state is None else jax.device_get(state)


def main(
    *,
    devices: Any = None,
    checkpoint_dir: str | None = None,
    steps: int = 24,
    every: int = 4,
    global_batch: int = 16,
) -> Any:
    return Trainer(devices, checkpoint_dir, steps, every, global_batch).run()
