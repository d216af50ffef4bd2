"""The guide's elastic loop around a team's adapter, writing the reference trainer's event log.

It is the reference trainer with the model, data and mesh swapped for the adapter's: the same
``Manager``, ``elastic_retry``, ``Snapshotter``, preemption suspend and events, so the fault
schedule, the fake cluster and the oracle's checks work on it unchanged. Each step event also
carries ``input_s`` (waiting on the iterator) and ``step_s`` (the step, to ``block_until_ready``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from pathways_chaos.harness.acceptance.adapter import DeclaredFields, ManagerView, TrainingAdapter
from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.reference.trainer import (
    ReferenceTrainer,
    TrainerConfig,
    TrainResult,
)


def trainer_config(adapter: DeclaredFields, **overrides: Any) -> TrainerConfig:
    """The loop's knobs from the adapter: a fixed global batch, so runs compare batch by batch."""
    fields: dict[str, Any] = {
        "mode": adapter.recovery_mode,
        "final_step": adapter.steps,
        "snapshot_interval": adapter.snapshot_interval,
        "global_batch": adapter.global_batch,
        "batch": "fixed",
        "scale_up": "off",
        "max_attempts": 4,
    }
    fields.update(overrides)
    return TrainerConfig(**fields)


class AdapterTrainer(ReferenceTrainer):
    """One run of the guide's loop over an adapter. ``run()`` may be called once."""

    def __init__(
        self,
        adapter: TrainingAdapter,
        config: TrainerConfig,
        recorder: Recorder,
        devices: Sequence[Any] | None = None,
        run_index: int = 1,
    ) -> None:
        super().__init__(config, recorder, devices=devices, run_index=run_index)
        self.adapter = adapter
        self._snapshotter: Any = None

    @classmethod
    def factory(cls, adapter: Any) -> Any:
        """What ``run_episode`` takes as ``trainer_factory``."""
        return functools.partial(cls, adapter)

    def run(self) -> TrainResult:
        """The reference run, then the last snapshot is let go (see ``release_snapshot``)."""
        try:
            return super().run()
        finally:
            release_snapshot(self._snapshotter)
            self._snapshotter = None

    # -- the adapter's pieces ----------------------------------------------------------------
    def build_mesh(self, manager: Any) -> Any:
        if self.adapter.build_mesh is None:
            return super().build_mesh(manager)
        return self.adapter.build_mesh(ManagerView(manager))

    def make_iterator(self, manager: Any) -> Any:
        return self.adapter.make_iterator(self.global_batch(manager))

    def init_state(self) -> Any:
        return self.adapter.init_state()

    def step_function(self) -> Any:
        return self.adapter.train_step

    def place_batch(self, batch: Any, mesh: Any) -> tuple[Any, ...]:
        return (place_batch(batch, mesh),)

    def batch_ids(self, batch: Any) -> list[int]:
        return list(self.adapter.ids_of(batch))

    # -- the loop is the reference trainer's; only the snapshotter is kept to let it go -------
    def _attempt(self, manager: Any, snapshotter: Any) -> TrainResult:
        self._snapshotter = snapshotter
        return super()._attempt(manager, snapshotter)


def release_snapshot(snapshotter: Any) -> None:
    """Lets the Snapshotter go once the run is over: the reference trainer's run already does
    (harness.engine.snapshotter_release, the one workaround for orbax 0.12.8's missing close());
    kept so an adapter loop that skips it still ends clean. Idempotent."""
    from pathways_chaos.harness.engine.snapshotter_release import release_snapshotter

    release_snapshotter(snapshotter)


def device_leaves(batch: Any) -> Any:
    """The part of a batch a step takes: a dict batch loses its non-numeric entries (names,
    strings), every other batch is taken whole."""
    if isinstance(batch, dict):
        return {k: v for k, v in batch.items() if np.asarray(v).dtype.kind in "biuf"}
    return batch


def place_batch(batch: Any, mesh: Any) -> Any:
    """Array leaves sharded along the batch axis over the whole mesh (or the first axis, or
    replicated when the batch does not divide)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    axes = tuple(mesh.axis_names)

    def put(leaf: Any) -> Any:
        array = np.asarray(leaf)
        spec = PartitionSpec()
        if array.ndim and array.shape[0] % mesh.size == 0:
            spec = PartitionSpec(axes)
        elif array.ndim and array.shape[0] % mesh.shape[axes[0]] == 0:
            spec = PartitionSpec(axes[0])
        return jax.device_put(array, NamedSharding(mesh, spec))

    return jax.tree.map(put, device_leaves(batch))


@dataclasses.dataclass
class PlainRun:
    """A baseline: the adapter's code in a plain loop on one device, no elastic machinery."""

    ids: list[list[int]]
    state: dict[str, np.ndarray]


def plain_run(adapter: TrainingAdapter, device: Any | None = None) -> PlainRun:
    import jax

    device = device or jax.devices("cpu")[0]
    step_fn = jax.jit(adapter.train_step)
    consumed = []
    with jax.default_device(device):
        state = jax.device_put(adapter.init_state(), device)
        iterator = adapter.make_iterator(adapter.global_batch)
        for _ in range(adapter.steps):
            batch = next(iterator)
            consumed.append(adapter.ids_of(batch))
            state, _ = step_fn(state, jax.device_put(device_leaves(batch), device))
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(state))[0]
    return PlainRun(consumed, {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat})
