"""Deliberately broken trainers: each a real bug, each one a property must catch.

Every mutant overrides as little of ``ReferenceTrainer`` as its bug needs, through its public
seams only (``make_snapshotter``, ``on_elastic_event``, ``before_step``, ``build_mesh`` /
``mesh_and_step``, ``settle_snapshots`` / ``restore_snapshot``, ``train_attempt`` and the data
and placement methods). ``CATALOGUE`` says which property suite catches which mutant and which
judge inside it speaks; tests/harness/reference/test_mutants.py holds it to that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig, touch_a_device


class IteratorRestoredFromCurrentPosition(ReferenceTrainer):
    """Restores the model from the snapshot but leaves the data iterator where it is.

    A fresh iterator starts at sample 0, so every sample since the start is eaten again.
    """

    def restore_snapshot(self, snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        restored = snapshotter.load(
            {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
        )
        return restored["state"], int(restored["step"]) + 1


class MeshFromAllDevices(ReferenceTrainer):
    """Builds the mesh from ``jax.devices()``, as pre-Pathways code does, not the active slices.

    The dead slice's devices stay in the mesh, so every retry meets the lost slice again.
    """

    def active_devices(self, manager: Any) -> list[Any]:
        import jax

        wanted = {d.id for ds in manager.slice_to_devices.values() for d in ds}
        return [d for d in jax.devices() if d.id in wanted]


class MeshBuiltOnce(ReferenceTrainer):
    """Builds the mesh once, outside the retry loop, and reuses it on every attempt."""

    _mesh: Any = None

    def build_mesh(self, manager: Any) -> Any:
        if self._mesh is None:
            self._mesh = super().build_mesh(manager)
        return self._mesh


class JoiningSlicesAppended(ReferenceTrainer):
    """Keeps slices in the order they joined, so a rejoined slice lands in the last mesh row.

    The mesh is no longer in slice order: replica r no longer lives on slice r.
    """

    _order: list[int] | None = None

    def active_devices(self, manager: Any) -> list[Any]:
        active = set(manager.active_slice_indices)
        order = [s for s in (self._order or sorted(active)) if s in active]
        order += sorted(active - set(order))
        self._order = order
        return [d for s in order for d in manager.slice_to_devices[s]]


class PerHostIteratorState(ReferenceTrainer):
    """Saves how many batches this host drew instead of grain's global position.

    Restored with a different global batch (after a resize) it resumes at the wrong sample.
    """

    def make_iterator(self, manager: Any) -> Any:
        return _BatchCountingIterator(super().make_iterator(manager), self.global_batch(manager))


class _BatchCountingIterator:
    def __init__(self, inner: Any, batch: int) -> None:
        self._inner, self._batch, self._drawn = inner, batch, 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        self._drawn += 1
        return next(self._inner)

    def get_state(self) -> dict[str, int]:
        return {"batches": self._drawn}

    def set_state(self, state: dict[str, Any]) -> None:
        self._drawn = int(state["batches"])
        self._inner.set_state({"global_next_index": self._drawn * self._batch})


class DataShardByProcessIndex(ReferenceTrainer):
    """Picks its data shard by ``jax.process_index()`` out of one shard per slice.

    On one controller the process index is 0 for every slice: it eats shard 0 only.
    """

    def make_iterator(self, manager: Any) -> Any:
        import grain
        import jax
        from grain.experimental import ElasticIterator

        shard = grain.sharding.ShardOptions(jax.process_index(), manager.active_slice_count)
        return ElasticIterator(self.config.data.map_dataset(), self.global_batch(manager), shard)


class StateShardedAlongReplicaAxis(ReferenceTrainer):
    """Shards the state along the replica axis (a model-parallel spec on the wrong axis).

    The Snapshotter keeps one copy per replica: each copy holds only a piece of the state.
    """

    def state_sharding(self, mesh: Any) -> Any:
        import jax

        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("replica"))


class ResumeAtSnapshotStep(ReferenceTrainer):
    """Resumes at the snapshot's step instead of step + 1, running that step twice."""

    def restore_snapshot(self, snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        state, step = super().restore_snapshot(snapshotter, abstract, iterator)
        return state, step - 1


class FailedAttemptArraysKept(ReferenceTrainer):
    """Keeps each attempt's latest state in a history (for debugging), so memory grows.

    What a lost slice held is gone anyway; what survives (a scale-up restart, a retried
    error) stays alive in every later attempt.
    """

    def mesh_and_step(self, manager: Any, reason: str) -> tuple[Any, Any]:
        mesh, step_fn = super().mesh_and_step(manager, reason)
        history: dict[int, Any] = self.__dict__.setdefault("_history", {})

        def step_into_history(state: Any, x: Any, y: Any) -> Any:
            out = step_fn(state, x, y)
            history[self.attempt] = out[0]
            return out

        return mesh, step_into_history


class NonSliceDownErrorsRetried(ReferenceTrainer):
    """Catches every error and re-raises it as a retryable one ("retry on anything")."""

    def train_attempt(self, manager: Any, snapshotter: Any) -> Any:
        import jax
        from pathwaysutils.elastic import elastic

        try:
            return super().train_attempt(manager, snapshotter)
        except jax.errors.JaxRuntimeError as error:
            if elastic.is_error_due_to_slice_down(error, log_traceback=False):
                raise
            raise jax.errors.JaxRuntimeError(f"INTERNAL: retrying after {error}") from None


class SnapshotBeforeUpdate(ReferenceTrainer):
    """Snapshots the state the step started from, labelled with the step: one update is lost."""

    def mesh_and_step(self, manager: Any, reason: str) -> tuple[Any, Any]:
        mesh, step_fn = super().mesh_and_step(manager, reason)

        def step_keeping_input(state: Any, x: Any, y: Any) -> Any:
            import jax

            self._before = jax.device_get(state)  # a host copy: this bug leaks nothing
            return step_fn(state, x, y)

        return mesh, step_keeping_input

    def snapshot_payload(self, state: Any, step: int, iterator: Any) -> dict[str, Any]:
        import jax

        before = jax.tree.map(lambda h, a: jax.device_put(h, a.sharding), self._before, state)
        return super().snapshot_payload(before, step, iterator)


class UnlimitedRetries(ReferenceTrainer):
    """Retries forever (pathwaysutils' default policy), so a host-callback bug never ends."""

    def __init__(
        self,
        config: TrainerConfig,
        recorder: Recorder,
        devices: Sequence[Any] | None = None,
        run_index: int = 1,
    ) -> None:
        super().__init__(
            dataclasses.replace(config, max_attempts=None), recorder, devices, run_index
        )


class StaleSnapshotRestore(ReferenceTrainer):
    """Restores without waiting for the save in flight: ``latest`` is still the one before.

    Invisible while saves finish at once; a ``slow_save`` and a failure meanwhile show it.
    """

    def settle_snapshots(self, snapshotter: Any) -> None:
        """Nothing: the bug."""


class ScaleUpKeepsOldMesh(ReferenceTrainer):
    """Takes the joining slices into the manager's active set but keeps the old mesh and step."""

    _last: tuple[Any, Any] | None = None

    def mesh_and_step(self, manager: Any, reason: str) -> tuple[Any, Any]:
        if reason == "scale_up" and self._last is not None:
            return self._last
        self._last = super().mesh_and_step(manager, reason)
        return self._last


class IteratorNotCarriedAcrossScaleUp(ReferenceTrainer):
    """Rebuilds the data iterator for the grown mesh from the dataset's start (an in-loop
    scale-up only: a retry restores it from the snapshot)."""

    _scaling = False

    def mesh_and_step(self, manager: Any, reason: str) -> tuple[Any, Any]:
        self._scaling = reason == "scale_up"
        return super().mesh_and_step(manager, reason)

    def make_iterator(self, manager: Any) -> Any:
        iterator = super().make_iterator(manager)
        return _StateIgnoringIterator(iterator) if self._scaling else iterator


class _StateIgnoringIterator:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._inner)

    def get_state(self) -> Any:
        return self._inner.get_state()

    def set_state(self, state: Any) -> None:
        del state  # the bug: the position is not carried over


class BatchFromTotalSlices(ReferenceTrainer):
    """Sizes the global batch from the total slice count, not the active one: after a shrink
    each step still eats the full-size batch."""

    def global_batch(self, manager: Any) -> int:
        if self.config.batch == "fixed":
            return self.config.global_batch
        per_slice = self.config.global_batch // manager.total_slice_count
        return per_slice * manager.total_slice_count


class RandomnessNotRestored(ReferenceTrainer):
    """Input noise (a dropout-like augmentation) from a generator kept on the trainer, not in
    the snapshot: after a recovery it does not rewind with the state."""

    def before_step(self, step: int, batch: Any) -> Any:
        import numpy as np

        rng = self.__dict__.setdefault("_rng", np.random.default_rng(self.config.seed))
        noise = rng.normal(0, 0.1, batch["x"].shape).astype(batch["x"].dtype)
        return {**batch, "x": batch["x"] + noise}


class CallbackErrorEscapes(ReferenceTrainer):
    """Its elastic-event callback touches the devices and lets a slice-down error escape,
    which ends ``elastic_retry`` instead of retrying."""

    def on_elastic_event(self) -> None:
        if self.callback_uses_devices:
            touch_a_device()
        self.recorder.emit("elastic_event", run=self.run_index, attempt=self.attempt)


@dataclasses.dataclass(frozen=True)
class MutantEntry:
    trainer: type[ReferenceTrainer]
    bug: str
    caught_by: str  # the property suite: snapshot, dataset, mesh or stateful
    judge: str = ""  # which check inside it speaks
    #: The loop search's property that finds it, where not ``caught_by``; "" for none.
    loop_property: str | None = None

    @property
    def searched_by(self) -> str:
        """The property of the loop search (the trainer run as a loop) that catches it."""
        return self.caught_by if self.loop_property is None else self.loop_property


CATALOGUE: tuple[MutantEntry, ...] = (
    MutantEntry(
        IteratorRestoredFromCurrentPosition, "data iterator not restored", "dataset", "exactly-once"
    ),
    MutantEntry(
        PerHostIteratorState, "per-host batch count saved as position", "dataset", "exactly-once"
    ),
    MutantEntry(
        DataShardByProcessIndex,
        "data shard chosen by jax.process_index()",
        "dataset",
        "exactly-once",
    ),
    MutantEntry(
        ResumeAtSnapshotStep,
        "resumes at the snapshot's step, not step + 1",
        "dataset",
        "exactly-once",
    ),
    MutantEntry(
        BatchFromTotalSlices,
        "global batch sized from the total slice count",
        "dataset",
        "batch follows the mesh",
    ),
    MutantEntry(
        MeshFromAllDevices, "mesh from jax.devices(), not the active slices", "mesh", "mesh rebuild"
    ),
    MutantEntry(MeshBuiltOnce, "mesh built once, outside the retry loop", "mesh", "mesh rebuild"),
    MutantEntry(
        JoiningSlicesAppended, "mesh rows in join order, not slice order", "mesh", "mesh rebuild"
    ),
    MutantEntry(FailedAttemptArraysKept, "failed attempts' arrays kept alive", "mesh", "no leaks"),
    MutantEntry(
        ScaleUpKeepsOldMesh, "in-loop scale-up keeps the old mesh", "mesh", "scale-up joins"
    ),
    MutantEntry(
        StateShardedAlongReplicaAxis,
        "state sharded along the replica axis",
        "snapshot",
        "round-trip",
    ),
    MutantEntry(
        NonSliceDownErrorsRetried,
        "non-slice-down errors retried",
        "stateful",
        "expected outcome",
        loop_property="snapshot",  # the loop search's program-error ending is drawn there
    ),
    MutantEntry(
        SnapshotBeforeUpdate,
        "snapshot of the state before the step's update",
        "stateful",
        "snapshot round-trip",
    ),
    MutantEntry(
        UnlimitedRetries,
        "unlimited retries meet a host-callback INTERNAL",
        "stateful",
        "retry bound",
        # The loop search draws no error that persists past every retry: pathwaysutils
        # retries for ever unless a loop passes a policy (test_trainer_as_loop.py catches it).
        loop_property="",
    ),
    MutantEntry(
        StaleSnapshotRestore,
        "restore without waiting for the save in flight",
        "stateful",
        "newest restore",
        # Found by the loop search at schedule 50 of seed 0 on an idle machine, not within 60
        # on a loaded CI runner (the loss must land while a held save is in flight): held to
        # its fixed schedule in test_trainer_as_loop.py instead, by the loop panel.
        loop_property="",
    ),
    MutantEntry(
        IteratorNotCarriedAcrossScaleUp,
        "iterator restarted at an in-loop scale-up",
        "stateful",
        "exactly-once",
    ),
    MutantEntry(
        RandomnessNotRestored,
        "randomness kept outside the snapshot",
        "stateful",
        "replay (same trainer)",
    ),
    MutantEntry(
        CallbackErrorEscapes,
        "elastic-event callback lets a slice-down error escape",
        "stateful",
        "run outcome",
    ),
)


def spec_of(trainer: type[ReferenceTrainer]) -> str:
    return f"{trainer.__module__}:{trainer.__qualname__}"
