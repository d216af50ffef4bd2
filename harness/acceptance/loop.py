"""The guide's elastic loop around a team's adapter, writing the reference trainer's event log.

It is the reference trainer with the model, data and mesh swapped for the adapter's: the same
``Manager``, ``elastic_retry``, ``Snapshotter``, preemption suspend and events, so the fault
schedule, the fake cluster and the oracle's checks work on it unchanged. Each step event also
carries ``input_s`` (waiting on the iterator) and ``step_s`` (the step, to ``block_until_ready``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pathways_chaos.harness.acceptance.adapter import ManagerView, TrainingAdapter
from pathways_chaos.harness.recorder import Recorder
from pathways_chaos.harness.reference.trainer import (
    ReferenceTrainer,
    TrainerConfig,
    TrainResult,
    digest,
    live_census,
    manager_slice,
)


def trainer_config(adapter: TrainingAdapter, **overrides: Any) -> TrainerConfig:
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
    def factory(cls, adapter: TrainingAdapter) -> Any:
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

    # -- the loop (the reference trainer's, over the adapter) --------------------------------
    def _attempt(self, manager: Any, snapshotter: Any) -> TrainResult:
        import jax

        self._snapshotter = snapshotter
        config, emit = self.config, self.recorder.emit
        ids = {"run": self.run_index, "attempt": self.attempt}
        emit("attempt_start", **ids, active_slices=sorted(manager.active_slice_indices))
        mesh, step_fn = self._mesh_and_step(manager, "attempt")
        iterator = self.make_iterator(manager)
        sharding = self.state_sharding(mesh)
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
            jax.eval_shape(self.adapter.init_state),
        )
        checkpoint = self._latest_checkpoint() if self.attempt == 1 else None
        if snapshotter.latest is not None:
            snapshotter.join()
            source, snap_step = "snapshot", snapshotter.latest.step
            emit("restore_begin", **ids, source=source, step=snap_step)
            state, step = self.restore_snapshot(snapshotter, abstract, iterator)
        elif checkpoint is not None:
            source, snap_step = "checkpoint", checkpoint[0]
            emit("restore_begin", **ids, source=source, step=snap_step)
            state, step = self._load_checkpoint(checkpoint[1], abstract, iterator)
        else:
            source, snap_step = "init", None
            state, step = jax.device_put(self.adapter.init_state(), sharding), 0
        if snap_step is not None:
            emit("restore_end", **ids, source=source, step=snap_step, digest=digest(state))
        emit("attempt_ready", **ids, reason="attempt", start_step=step, live=live_census())

        while step < config.final_step:
            t0 = time.perf_counter()
            batch = next(iterator)
            t1 = time.perf_counter()
            state, loss = step_fn(state, place_batch(batch, mesh))
            jax.block_until_ready(loss)
            t2 = time.perf_counter()
            emit(
                "step",
                **ids,
                step=step,
                ids=self.adapter.ids_of(batch),
                loss=float(np.asarray(loss).ravel()[0]) if np.size(loss) else 0.0,
                input_s=round(t1 - t0, 6),
                step_s=round(t2 - t1, 6),
            )
            del batch
            if step % config.snapshot_interval == 0:
                snapshotter.save(step, self.snapshot_payload(state, step, iterator))
                emit("snapshot_save", **ids, step=step, digest=digest(state))
            if self._preempted.is_set():
                return self._suspend(state, step, iterator)
            step += 1
        return TrainResult("completed", step, self.attempt, jax.device_get(state))

    def _mesh_and_step(self, manager: Any, reason: str) -> tuple[Any, Any]:
        import jax

        mesh = self.build_mesh(manager)
        key = tuple(d.id for d in mesh.devices.flat)
        rows = mesh.devices.reshape(mesh.devices.shape[0], -1)
        recompile = key not in self._jitted
        if recompile:
            self._jitted[key] = jax.jit(
                self.adapter.train_step, out_shardings=(self.state_sharding(mesh), None)
            )
        self.recorder.emit(
            "mesh",
            run=self.run_index,
            attempt=self.attempt,
            reason=reason,
            slices=sorted({manager_slice(manager, d) for d in mesh.devices.flat}),
            # Rows = the first (replica) axis, which the Snapshotter and the oracle take as slices.
            device_ids=[[d.id for d in row] for row in rows],
            shape=list(rows.shape),
            recompile=recompile,
        )
        return mesh, self._jitted[key]


def release_snapshot(snapshotter: Any) -> None:
    """Drops the Snapshotter's last snapshot once the run is over.

    orbax 0.12.8's Snapshotter runs a daemon worker thread that never ends and holds the
    Snapshotter, so its last snapshot (pinned-host arrays on every slice) would stay alive for
    the whole process: every later live-array count, in this run's checks or in any other
    test of the session, would see it. There is no public way to drop it.
    """
    if snapshotter is None:
        return
    snapshotter.join()
    lock = getattr(snapshotter, "_lock", None)
    if lock is not None and hasattr(snapshotter, "_latest_snapshot"):
        with lock:
            snapshotter._latest_snapshot = None


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
