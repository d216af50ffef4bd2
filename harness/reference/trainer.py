"""The reference elastic trainer: the Pathways resilient-training guide's loop, real libraries.

``pathwaysutils`` ``Manager`` + ``elastic_retry``, the Orbax Pathways ``Snapshotter`` and grain's
``ElasticIterator``. It knows nothing about the fake cluster: it is given devices (or takes
``jax.devices()``) and a recorder, and runs unchanged on a real Pathways cluster. Each step of
the recovery is a method, so a deliberately broken variant is a subclass overriding one.

Public seams, where a recovery bug lives: ``make_snapshotter`` (the Snapshotter factory),
``on_elastic_event`` (the callback ``elastic_retry`` calls after a failure), ``before_step``
(the per-step hook), ``build_mesh`` / ``mesh_and_step`` (the mesh builder), ``settle_snapshots``
and ``restore_snapshot`` (the restore step) and ``train_attempt`` (one attempt).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pathways_chaos.harness.engine.census import Census
from pathways_chaos.harness.engine.census import live_census as live_census  # re-exported
from pathways_chaos.harness.engine.digest import digest
from pathways_chaos.harness.engine.executables import CompileCount, jitted_step
from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.engine.snapshotter_release import (
    release_snapshotter,
    worker_log_frames_cleared,
)
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.reference import model
from pathways_chaos.harness.reference.data import SyntheticData

MODES = ("pause_resume", "resize")
#: Batches read ahead. grain's default (500, on 16 threads) read ~6x what a 100-step run eats
#: and, on a 2-core runner, each iterator's read-ahead (a failed attempt's abandoned one too)
#: took the CPU from the steps.
PREFETCH_BATCHES = 4
SCALE_UP = ("in_loop", "signal", "off")
BATCH_POLICIES = ("scaled", "fixed")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """What a run does; the defaults are a small episode that CPU-only CI runs in seconds."""

    mode: str = "resize"
    final_step: int = 30
    snapshot_interval: int = 5
    global_batch: int = 16  # at full slice count
    batch: str = "scaled"  # "scaled": per-slice batch fixed, as the guide does; "fixed"
    scale_up: str = "in_loop"  # guide's in-loop check, ScaleUpSignalError, or never
    minimum_slice_count: int | None = None  # resize default: 1
    poll_interval: float = 10.0
    timeout: float | None = 600.0
    max_attempts: int | None = 10  # None: retry forever (pathwaysutils' default)
    lr: float = 0.05
    beta: float = 0.9
    seed: int = 0
    data: SyntheticData = dataclasses.field(default_factory=SyntheticData)
    checkpoint_dir: str | None = None  # suspend writes here; a new run resumes from here

    def __post_init__(self) -> None:
        _one_of("mode", self.mode, MODES)
        _one_of("scale_up", self.scale_up, SCALE_UP)
        _one_of("batch", self.batch, BATCH_POLICIES)
        if self.final_step < 1 or self.snapshot_interval < 1 or self.global_batch < 1:
            raise ChaosConfigError(
                "final_step, snapshot_interval and global_batch must be >= 1: "
                f"got {self.final_step}, {self.snapshot_interval}, {self.global_batch}"
            )
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ChaosConfigError(
                f"max_attempts={self.max_attempts}: use >= 1, or None to retry forever"
            )

    def check_fits(self, total_slices: int) -> None:
        """Refuses, before anything runs, a config this allocation cannot honour."""
        if self.batch == "scaled" and self.global_batch % total_slices:
            good = [total_slices * k for k in range(1, 5)]
            raise ChaosConfigError(
                f"global_batch={self.global_batch} does not divide by the {total_slices} slices, "
                f"so batch='scaled' cannot keep a whole per-slice batch: use one of {good}"
            )
        n = self.minimum_slice_count
        if n is not None and not 1 <= n <= total_slices:
            raise ChaosConfigError(
                f"minimum_slice_count={n} does not fit {total_slices} slices: use 1..{total_slices}"
            )

    @property
    def effective_minimum_slice_count(self) -> int | None:
        if self.mode == "pause_resume":
            return None  # wait for every slice
        return self.minimum_slice_count if self.minimum_slice_count is not None else 1

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["data"] = self.data.to_json()
        return out


@dataclasses.dataclass
class TrainResult:
    status: str  # "completed" or "suspended"
    step: int  # next step to run
    attempts: int
    state: Any  # host numpy pytree


class ReferenceTrainer:
    """One run of the guide's loop. ``run()`` may be called once."""

    def __init__(
        self,
        config: TrainerConfig,
        recorder: Recorder,
        devices: Sequence[Any] | None = None,
        run_index: int = 1,
    ) -> None:
        self.config = config
        self.recorder = recorder
        self.devices = devices
        self.run_index = run_index
        self.attempt = 0
        self._jitted: dict[tuple[int, ...], Any] = {}
        self._compiles = CompileCount()  # what this run compiles, executables shared or not
        self._preempted = threading.Event()
        self._census = Census()  # a full gc only when a quick count is suspect
        #: Set by the harness before ``run()``: wraps what ``make_snapshotter`` made (the fake
        #: cluster's save gate holds saves in flight through it). Identity by default.
        self.snapshotter_wrapper: Callable[[Any], Any] | None = None
        #: ``on_elastic_event`` computes on a device, where a fault meets a loop's callback
        #: (``trainer_loop``); in its own episodes the fault meets its ``elastic_event`` event.
        self.callback_uses_devices = False
        self._noted_snapshot: int | None = None

    # -- the pieces a broken variant overrides -----------------------------------------------
    def make_snapshotter(self) -> Any:
        """The Snapshotter factory: one per run, kept across the run's attempts."""
        from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

        return Snapshotter(replica_axis_index=0)

    def on_elastic_event(self) -> None:
        """``elastic_retry``'s callback after a slice-down error or a scale-up signal.

        It runs inside pathwaysutils' error handler, so anything it raises ends the retry loop:
        a slice-down error met here (touching a lost slice) is recorded, not raised.
        """
        from pathwaysutils.elastic import elastic

        try:
            if self.callback_uses_devices:
                touch_a_device()
            self.recorder.emit("elastic_event", run=self.run_index, attempt=self.attempt)
        except Exception as error:
            if not elastic.is_error_due_to_slice_down(error, log_traceback=False):
                raise
            self.recorder.emit(
                "elastic_event_error",
                run=self.run_index,
                attempt=self.attempt,
                type=type(error).__name__,
                message=str(error)[:300],
            )
            traceback.clear_frames(error.__traceback__)

    def before_step(self, step: int, batch: Any) -> Any:
        """The per-step hook: the batch the step trains on (the replay calls it too)."""
        del step
        return batch

    def settle_snapshots(self, snapshotter: Any) -> None:
        """Before a restore: wait for the save in flight, so the newest snapshot is restored."""
        snapshotter.join()

    def active_devices(self, manager: Any) -> list[Any]:
        """pathwaysutils 0.1.13 has no ``Manager.active_devices``: derive it, in slice order."""
        return [
            d for s in sorted(manager.active_slice_indices) for d in manager.slice_to_devices[s]
        ]

    def build_mesh(self, manager: Any) -> Any:
        import jax

        devices = np.asarray(self.active_devices(manager), dtype=object)
        per_slice = len(devices) // manager.active_slice_count
        return jax.sharding.Mesh(
            devices.reshape(manager.active_slice_count, per_slice), ("replica", "data")
        )

    def global_batch(self, manager: Any) -> int:
        if self.config.batch == "fixed":
            return self.config.global_batch
        return int(manager.scale_by_active_slices(self.config.global_batch))

    def make_iterator(self, manager: Any) -> Any:
        import grain
        from grain.experimental import ElasticIterator

        # One controller: no per-host sharding; the global batch is sharded over the mesh.
        return ElasticIterator(
            self.config.data.map_dataset(),
            self.global_batch(manager),
            grain.sharding.NoSharding(),
            read_options=grain.ReadOptions(num_threads=2, prefetch_buffer_size=PREFETCH_BATCHES),
        )

    def state_sharding(self, mesh: Any) -> Any:
        import jax

        # Replicated along the replica axis, as the Snapshotter requires.
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def snapshot_payload(self, state: Any, step: int, iterator: Any) -> dict[str, Any]:
        return {"state": state, "step": step, "iterator_state": iterator.get_state()}

    def restore_snapshot(self, snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        restored = snapshotter.load(
            {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
        )
        iterator.set_state(restored["iterator_state"])
        return restored["state"], int(restored["step"]) + 1

    def init_state(self) -> Any:
        return model.init_state(self.config.seed)

    def step_function(self) -> Any:
        """The pure step ``(state, *placed_batch) -> (state, loss)``, jitted once per mesh."""
        import functools

        return functools.partial(model.train_step, lr=self.config.lr, beta=self.config.beta)

    def place_batch(self, batch: Any, mesh: Any) -> tuple[Any, ...]:
        """The step's batch arguments on the mesh: sharded over every device if it divides."""
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        n = len(batch["id"])
        if n % mesh.size == 0:
            spec = PartitionSpec(("replica", "data"))
        elif n % mesh.shape["replica"] == 0:
            spec = PartitionSpec("replica")
        else:
            spec = PartitionSpec()
        sharding = NamedSharding(mesh, spec)
        return jax.device_put(batch["x"], sharding), jax.device_put(batch["y"], sharding)

    def batch_ids(self, batch: Any) -> list[int]:
        """The sample ids a batch carries, for the exactly-once check."""
        return [int(i) for i in batch["id"]]

    def keep_failed_attempt(self, state: Any) -> None:
        """Nothing: the failed attempt's arrays must go out of scope (a mutant keeps them)."""

    # -- the loop ----------------------------------------------------------------------------
    def attempt_failed(self, error: BaseException, slice_down: bool) -> None:
        """An attempt's error, logged; its traceback's frames cleared: they hold the failed
        attempt's arrays, and anything that keeps the error (a log handler, pytest's log
        capture) would keep them alive too."""
        self.recorder.emit(
            "error",
            run=self.run_index,
            attempt=self.attempt,
            type=type(error).__name__,
            message=str(error)[:500],
            slice_down=slice_down,
        )
        traceback.clear_frames(error.__traceback__)

    def run(self) -> TrainResult:
        # One piece (over 80 lines): the guide's outer loop (Manager, elastic_retry, the
        # scale-up signal) as one reads it in the resilient-training guide it mirrors.
        import jax
        from pathwaysutils.elastic import elastic
        from pathwaysutils.elastic import manager as manager_lib

        config = self.config
        manager = manager_lib.Manager(self.devices)
        config.check_fits(manager.total_slice_count)
        made = self.make_snapshotter()  # released at the end, whatever wraps it meanwhile
        snapshotter = made if self.snapshotter_wrapper is None else self.snapshotter_wrapper(made)
        undo_log_filter = worker_log_frames_cleared()  # a failed snapshot's log keeps no arrays
        cls = type(self)
        self.recorder.emit(
            "run_start",
            run=self.run_index,
            trainer=f"{cls.__module__}:{cls.__qualname__}",
            config=config.to_json(),
            slices={str(s): [d.id for d in ds] for s, ds in manager.slice_to_devices.items()},
            active_slices=sorted(manager.active_slice_indices),
            pinned_host=self._census.pinned_host(),
        )
        retry_policy = (
            manager_lib.ElasticRetryLimit(config.max_attempts) if config.max_attempts else None
        )

        # pathwaysutils ships no types; its decorator keeps the signature of what it wraps.
        retry: Callable[[Callable[[], TrainResult]], Callable[[], TrainResult]]
        retry = manager.elastic_retry(
            minimum_slice_count=config.effective_minimum_slice_count,
            poll_interval=config.poll_interval,
            timeout=config.timeout,
            retry_policy=retry_policy,
            on_elastic_event_callback=self.on_elastic_event,
        )

        @retry
        def run_training_loop() -> TrainResult:
            self.attempt += 1
            try:
                return self.train_attempt(manager, snapshotter)
            except Exception as error:
                slice_down = elastic.is_error_due_to_slice_down(error, log_traceback=False)
                self.attempt_failed(error, slice_down)
                raise

        previous = self._install_preemption_handler()
        try:
            result = run_training_loop()
            snapshotter.join()
            self._note_snapshots(snapshotter)
        except BaseException as error:
            self.recorder.emit(
                "run_end",
                run=self.run_index,
                status="failed",
                attempts=self.attempt,
                error=f"{type(error).__name__}: {error}"[:500],
                cause=repr(error.__cause__)[:300] if error.__cause__ else None,
            )
            raise
        finally:
            self._restore_preemption_handler(previous)
            manager.close()
            release_snapshotter(made)  # its thread and last snapshot end with the run
            undo_log_filter()
        self.recorder.emit(
            "run_end",
            run=self.run_index,
            status=result.status,
            attempts=self.attempt,
            step=result.step,
            final_state=describe_state(result.state),
            compiles=self._compiles.count,
            pinned_host=self._census.pinned_host(),  # after the Snapshotter's release
        )
        del jax
        return result

    def train_attempt(self, manager: Any, snapshotter: Any) -> TrainResult:
        """One attempt of the elastic loop (what ``elastic_retry`` retries)."""
        return self._attempt(manager, snapshotter)

    def _attempt(self, manager: Any, snapshotter: Any) -> TrainResult:
        # One piece (over 80 lines): one attempt of the guide's elastic loop, step by step
        # as the guide writes it (restore, steps, snapshot, scale-up); the mutants override
        # the hooks it calls, not the loop.
        import jax

        config, emit = self.config, self.recorder.emit
        ids = {"run": self.run_index, "attempt": self.attempt}
        emit("attempt_start", **ids, active_slices=sorted(manager.active_slice_indices))
        mesh, step_fn = self.mesh_and_step(manager, "attempt")
        iterator = self.make_iterator(manager)
        sharding = self.state_sharding(mesh)
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
            jax.eval_shape(self.init_state),
        )
        # Every attempt, not only the first: a retry before this run's first snapshot must go
        # back to the checkpoint the run resumed from, not to step 0 (found by the stateful
        # search: preemption@step=0, then a loss at step 1 of the resumed run).
        checkpoint = self._latest_checkpoint()
        if self.attempt > 1:
            # Even with no snapshot yet: the first save may be the one in flight.
            self.settle_snapshots(snapshotter)
        self._note_snapshots(snapshotter)
        if snapshotter.latest is not None:
            source, snap_step = "snapshot", snapshotter.latest.step
            emit("restore_begin", **ids, source=source, step=snap_step)
            state, step = self.restore_snapshot(snapshotter, abstract, iterator)
        elif checkpoint is not None:
            source, snap_step = "checkpoint", checkpoint[0]
            emit("restore_begin", **ids, source=source, step=snap_step)
            state, step = self._load_checkpoint(checkpoint[1], abstract, iterator)
        else:
            source, snap_step = "init", None
            state, step = jax.device_put(self.init_state(), sharding), 0
        if snap_step is not None:
            emit("restore_end", **ids, source=source, step=snap_step, digest=digest(state))
        emit("attempt_ready", **ids, reason="attempt", start_step=step, live=self._census())

        mesh_slices = _slices_of(manager, mesh)
        while step < config.final_step:
            t0 = time.perf_counter()
            batch = next(iterator)
            t1 = time.perf_counter()
            consumed = self.batch_ids(batch)
            placed = self.place_batch(self.before_step(step, batch), mesh)
            state, loss = step_fn(state, *placed)
            loss_value = float(np.asarray(loss).ravel()[0]) if np.size(loss) else 0.0
            emit(
                "step",
                **ids,
                step=step,
                ids=consumed,
                loss=loss_value,
                input_s=round(t1 - t0, 6),
                step_s=round(time.perf_counter() - t1, 6),
                mesh_slices=mesh_slices,
                trained=_rows(placed),
            )
            del batch, placed
            self._note_snapshots(snapshotter)
            if step % config.snapshot_interval == 0:
                snapshotter.save(step, self.snapshot_payload(state, step, iterator))
                emit("snapshot_save", **ids, step=step, digest=digest(state))
            if self._preempted.is_set():
                return self._suspend(state, step, iterator)
            if manager.available_inactive_slices and config.scale_up != "off":
                joining = sorted(manager.available_inactive_slices)
                if config.scale_up == "signal":
                    # Snapshot this very step so the restart wastes nothing.
                    snapshotter.join()
                    snapshotter.save(step, self.snapshot_payload(state, step, iterator))
                    emit("snapshot_save", **ids, step=step, digest=digest(state))
                    snapshotter.join()
                    self._note_snapshots(snapshotter)
                    emit("scale_up", **ids, how="signal", joining=joining, step=step)
                    self.keep_failed_attempt(state)
                    from pathwaysutils.elastic import manager as manager_lib

                    raise manager_lib.ScaleUpSignalError()
                manager.active_slice_indices |= manager.available_inactive_slices
                emit("scale_up", **ids, how="in_loop", joining=joining, step=step)
                iterator_state = iterator.get_state()
                mesh, step_fn = self.mesh_and_step(manager, "scale_up")
                mesh_slices = _slices_of(manager, mesh)
                iterator = self.make_iterator(manager)
                iterator.set_state(iterator_state)
                state = jax.device_put(state, self.state_sharding(mesh))
                emit(
                    "attempt_ready",
                    **ids,
                    reason="scale_up",
                    start_step=step + 1,
                    live=self._census(judged=False),
                )
            step += 1
        return TrainResult("completed", step, self.attempt, jax.device_get(state))

    # -- helpers -----------------------------------------------------------------------------
    def _note_snapshots(self, snapshotter: Any) -> None:
        """Logs ``snapshot_complete`` when the Snapshotter's newest complete snapshot changes.

        Read from ``latest`` in the trainer's thread, so a completion is logged at the next step
        boundary, join or restore at the latest: never earlier than it happened.
        """
        latest = getattr(snapshotter, "latest", None)
        step = None if latest is None else int(latest.step)
        if step is not None and step != self._noted_snapshot:
            self.recorder.emit(
                "snapshot_complete", run=self.run_index, attempt=self.attempt, step=step
            )
        self._noted_snapshot = step

    def mesh_and_step(self, manager: Any, reason: str) -> tuple[Any, Any]:
        """The mesh builder seam: the mesh of the active slices and the step jitted for it."""
        mesh = self.build_mesh(manager)
        key = tuple(d.id for d in mesh.devices.flat)
        # Rows = the first (replica) axis, which the Snapshotter and the oracle take as slices.
        rows = mesh.devices.reshape(mesh.devices.shape[0], -1)
        recompile = key not in self._jitted  # new to this run: what a real run compiles
        if recompile:
            shared = jitted_step(self.step_function(), self.state_sharding(mesh))
            self._jitted[key] = self._compiles.counting(key, shared)
        self.recorder.emit(
            "mesh",
            run=self.run_index,
            attempt=self.attempt,
            reason=reason,
            slices=sorted({manager_slice(manager, d) for d in mesh.devices.flat}),
            device_ids=[[d.id for d in row] for row in rows],
            shape=list(rows.shape),
            recompile=recompile,
        )
        return mesh, self._jitted[key]

    # -- suspend and resume ------------------------------------------------------------------
    def _install_preemption_handler(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return None
        return signal.signal(signal.SIGTERM, lambda *_: self._preempted.set())

    def _restore_preemption_handler(self, previous: Any) -> None:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

    def _suspend(self, state: Any, step: int, iterator: Any) -> TrainResult:
        import jax

        if self.config.checkpoint_dir is None:
            raise ChaosConfigError(
                "preemption notice received but TrainerConfig.checkpoint_dir is not set: "
                "give the trainer a directory to persist its state to"
            )
        path = Path(self.config.checkpoint_dir) / f"step_{step:08d}"
        payload = {"state": state, "step": step, "iterator_state": iterator.get_state()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from orbax.checkpoint import v1 as ocp

            ocp.save_pytree(path, payload)
        self.recorder.emit(
            "checkpoint_save",
            run=self.run_index,
            attempt=self.attempt,
            step=step,
            path=str(path),
            digest=digest(state),
        )
        self.recorder.emit("suspend", run=self.run_index, attempt=self.attempt, step=step)
        return TrainResult("suspended", step + 1, self.attempt, jax.device_get(state))

    def _latest_checkpoint(self) -> tuple[int, Path] | None:
        if self.config.checkpoint_dir is None or not os.path.isdir(self.config.checkpoint_dir):
            return None
        steps = sorted(
            p for p in Path(self.config.checkpoint_dir).iterdir() if p.name.startswith("step_")
        )
        if not steps:
            return None
        return int(steps[-1].name.removeprefix("step_")), steps[-1]

    def _load_checkpoint(self, path: Path, abstract: Any, iterator: Any) -> tuple[Any, int]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from orbax.checkpoint import v1 as ocp

            restored = ocp.load_pytree(
                path, {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
            )
        iterator.set_state(restored["iterator_state"])
        return restored["state"], int(restored["step"]) + 1


def _slices_of(manager: Any, mesh: Any) -> list[int]:
    """The slices a mesh's devices are on: what each step event says it ran on."""
    return sorted({manager_slice(manager, d) for d in mesh.devices.flat})


def _rows(placed: Sequence[Any]) -> int | None:
    """Rows of the first placed batch argument: how many samples the step trained on."""
    shape = getattr(placed[0], "shape", None) if placed else None
    return int(shape[0]) if shape else None


def manager_slice(manager: Any, device: Any) -> int:
    for s, devices in manager.slice_to_devices.items():
        if any(d.id == device.id for d in devices):
            return int(s)
    raise ValueError(f"{device} is in no slice of the manager")


def describe_state(state: Any) -> dict[str, dict[str, Any]]:
    """Each leaf's dtype, shape and values, so a replay can compare with a stated tolerance."""
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        array = np.asarray(leaf)
        out[jax.tree_util.keystr(path)] = {
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "values": array.ravel().tolist(),
        }
    return out


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ChaosConfigError(f"unknown {name} {value!r}: use one of {', '.join(allowed)}")


def touch_a_device() -> None:
    """A computation on the default device, as a callback that logs a metric makes."""
    import jax
    import jax.numpy as jnp

    jax.block_until_ready(jnp.zeros(()))
