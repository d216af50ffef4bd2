"""Watches a user's own elastic loop through the real libraries' public calls, not its code.

While an episode runs, the observer wraps, on their classes, the calls every guide-style loop
makes and writes what they show as events of the oracle's log:

- grain ``ElasticIterator.__next__`` / ``get_state`` / ``set_state``: each batch's global data
  position and size, and its sample ids when the records carry an ``id``;
- grain ``DataLoader`` and dataset iterators, and the loop's own generators of batches
  (``batch_sources.py``), counted the same way, once each;
- Orbax ``Snapshotter.save`` / ``load`` (``orbax_side.py``): the step, the data position
  stored with it; ``latest`` when the loop restores;
- pathwaysutils ``Manager``: its construction, each ``elastic_retry`` attempt and error, and
  every change of ``active_slice_indices`` (a scale-up);
- the device-loss seam's placements: the mesh each attempt sends data to;
- ``jax.live_arrays()`` when each attempt draws its first batch;
- JAX's public ``jax.monitoring`` compile events (a recompile in steady state).

Orbax's ``save_pytree`` / ``load_pytree`` (a preemption checkpoint) are watched the same way.
Everything is undone on exit, whatever happened. Nothing runs inside the loop's own code.
"""

from __future__ import annotations

import functools
import gc
import inspect
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathways_chaos.faults.slice import PERSISTENT_ATTEMPTS
from pathways_chaos.harness.blackbox.batch_sources import BatchSources, IteratorOrder
from pathways_chaos.harness.blackbox.catch_watch import CatchWatch
from pathways_chaos.harness.blackbox.checkpoints import CheckpointWatch
from pathways_chaos.harness.blackbox.held_saves import GateHolder
from pathways_chaos.harness.blackbox.lineage import LineageSeam
from pathways_chaos.harness.blackbox.meshes import mesh_fields
from pathways_chaos.harness.blackbox.orbax_side import OrbaxSide
from pathways_chaos.harness.blackbox.values import (
    batch_size_of,
    describe_state,
    elastic_inner_iterator,
    own_frame,
    position_of,
    sample_ids_of,
    where_raised,
)
from pathways_chaos.harness.engine.backend import DeviceListeners, SaveGated
from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.engine.save_gate import SaveGate
from pathways_chaos.harness.engine.seams import defining_class
from pathways_chaos.harness.errors import ChaosConfigError

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax.monitoring
#: A loop that retries more often than this in one run is stopped (it would never end).
MAX_ATTEMPTS_GUARD = PERSISTENT_ATTEMPTS


def retry_policy_of(arguments: dict[str, Any]) -> dict[str, Any]:
    """What ``elastic_retry`` was given to stop retrying: ``retry_policy`` (its text),
    ``max_attempts`` (None where it cannot be told: a policy of the loop's own) and
    ``unlimited`` (neither given: pathwaysutils retries forever)."""
    from pathwaysutils.elastic import manager as manager_lib

    policy, retries = arguments.get("retry_policy"), arguments.get("max_retries")
    if isinstance(policy, manager_lib.ElasticRetryLimit):
        limit = int(policy.max_attempts)
        return {"retry_policy": f"ElasticRetryLimit(max_attempts={limit})", "max_attempts": limit}
    if policy is not None:
        name = getattr(policy, "__qualname__", type(policy).__qualname__)
        return {"retry_policy": f"a policy of its own ({name})", "max_attempts": None}
    if retries is not None:
        return {"retry_policy": f"max_retries={retries}", "max_attempts": int(retries)}
    return {"retry_policy": "none", "max_attempts": None, "unlimited": True}


class AttemptGuardError(ChaosConfigError):
    """Stops a loop that keeps retrying: not a JaxRuntimeError, so elastic_retry re-raises it."""


class LoopObserver(OrbaxSide):
    """Installs the wrappers on enter, removes them on exit; one per episode."""

    def __init__(
        self,
        recorder: Recorder,
        cluster: Any,
        max_attempts: int = MAX_ATTEMPTS_GUARD,
        lineage: bool = True,
        digests: bool = False,
    ):
        self.recorder = recorder
        self.digests = digests
        self.cluster = cluster
        self.max_attempts = max_attempts
        self.run = 0
        self.attempt = 0
        self.batches = 0  # drawn in the whole episode (the batch=N trigger counts these)
        self._attempt_batches = 0
        self._ready = False
        self._iterators = IteratorOrder()
        self._meshes: set[tuple[Any, ...]] = set()
        self._snapshotters: list[Any] = []
        self._saved: list[tuple[Any, str, Any]] = []
        self._slice_of: dict[int, int] = {}
        self._main = threading.get_ident()
        # The fake's: it finishes each save before the loop goes on, as the reference
        # trainer's; real devices have none, and their saves stay asynchronous.
        self._save_gate: SaveGate | None = (
            cluster.save_gate if isinstance(cluster, SaveGated) else None
        )
        #: ``slow_save`` holds the loop's saves, on every orbax path, through it (the fake's).
        self._holder = None if self._save_gate is None else GateHolder(self, self._save_gate)
        self.lineage: LineageSeam | None = (
            LineageSeam(recorder.emit, self._ids) if lineage else None
        )
        self._failed_attempts: set[str] = set()
        self._error_number = 0
        self._reading = 0
        #: Called when a call of the loop's elastic-event callback ends (the fault controller's).
        self.on_callback_end: Callable[[], None] | None = None
        #: Where a run's final state's values go (``run-N/`` below it), not into the log.
        self.values_dir: Path | None = None
        #: The tree of the run's last save (a loop that returns ``None`` is judged by it).
        self._last_saved: Any = None

    # -- the episode's side --------------------------------------------------------------------

    def handoff(self) -> dict[str, int]:
        """What a preemption's next run (a new process) goes on from: the batches drawn and
        the slice-down errors numbered so far, and the lineage's numbering."""
        nodes, execs = self.lineage.numbering() if self.lineage is not None else (0, 0)
        return {
            "batches": self.batches,
            "errors": self._error_number,
            "nodes": nodes,
            "execs": execs,
        }

    def go_on_from(self, state: dict[str, Any]) -> None:
        self.batches, self._error_number = int(state["batches"]), int(state["errors"])
        if self.lineage is not None:
            self.lineage.go_on_from(int(state["nodes"]), int(state["execs"]))

    def begin_run(self, run: int, loop: str) -> None:
        self.run, self.attempt, self._attempt_batches, self._ready = run, 0, 0, False
        self._last_saved = None
        self._meshes.clear()
        slices = {
            str(s): [d.id for d in self.cluster.slice_devices(s)]
            for s in range(self.cluster.topology.num_slices)
        }
        self._slice_of = {d: int(s) for s, ids in slices.items() for d in ids}
        self.recorder.emit("run_start", run=run, loop=loop, slices=slices)

    def end_run(self, status: str, value: Any = None, error: BaseException | None = None) -> None:
        returned = self.recorder.wall()  # the loop's part ends here; writing its state is ours
        if self._save_gate is not None:
            with self._toolkit_reads():
                self._save_gate.settle()
        fields: dict[str, Any] = {"run": self.run, "status": status, "attempts": self.attempt}
        fields["returned_wall"] = returned
        if error is not None:
            fields["error"] = f"{type(error).__name__}: {error}"[:500]
            fields["where"] = where_raised(error)
            cause = error.__cause__
            fields["cause"] = f"{type(cause).__name__}: {cause}"[:300] if cause else None
        if self.lineage is not None and error is None:
            # What failed attempts still hold once the run is over and garbage is collected:
            # a transient holder (a worker thread, a log record) is gone by now, a leak is not.
            # The run's last attempt is not counted: its arrays are what it returned. A run
            # that raised is not counted at all: an array it left half made crashes the census.
            fields["failed_attempts_alive"] = self.lineage.alive_from(self._earlier_failed())
        where = None if self.values_dir is None else self.values_dir / f"run-{self.run}"
        returned_arrays = error is None and value is not None and _holds_arrays(value)
        if error is None and value is not None:
            fields["returned"] = type(value).__name__
        if returned_arrays:
            fields["final_state"] = describe_state(value, where)
            if self.lineage is not None:
                fields["final_nodes"] = self.lineage.final_nodes(value)
        elif error is None and status == "completed" and self._last_saved is not None:
            # Most training mains return nothing (or their metrics): they log and checkpoint.
            # Their last save is what a restart would go on from, so it is what is compared.
            fields["final_state"] = describe_state(self._last_saved, where)
            fields["final_from"] = "the last save"
            if self.lineage is not None:
                fields["final_nodes"] = self.lineage.final_nodes(self._last_saved)
        self.recorder.emit("run_end", **fields)

    # -- install / remove ------------------------------------------------------------------
    def __enter__(self) -> LoopObserver:
        try:
            self._install()
        except BaseException:
            self._uninstall()
            raise
        # The live-array census collects garbage at every attempt; with what existed before
        # the episode frozen, a collection walks only the episode's own objects (a full one
        # over JAX's heap takes 0.3 s here). Pre-episode garbage then counts the same in
        # every attempt, so it can neither fake nor hide growth.
        gc.freeze()
        return self

    def __exit__(self, *exc: object) -> None:
        gc.unfreeze()
        self._uninstall()

    def _install(self) -> None:
        from grain.experimental import ElasticIterator
        from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
        from pathwaysutils.elastic import manager as manager_lib

        # ``for batch in iterator`` and ``next(iterator)`` both end in the per-iterator object
        # ElasticIterator delegates to; watch that one (the public class if it moved).
        inner = elastic_inner_iterator() or ElasticIterator
        self._wrap(inner, "__next__", self._next)
        self._wrap(inner, "set_state", self._set_state)
        self._wrap(Snapshotter, "__init__", self._snapshotter_init)
        self._wrap(Snapshotter, "save", self._save)
        self._wrap(Snapshotter, "load", self._load)
        if self._holder is not None:  # read after the saves the gate left in flight
            owner = defining_class(Snapshotter, "latest")
            self._patch(owner, "latest", self._holder.joined_latest(owner.__dict__["latest"]))
        if self._save_gate is not None and "join" in Snapshotter.__dict__:
            self._wrap(Snapshotter, "join", self._join)
        self._wrap(manager_lib.Manager, "__init__", self._manager_init)
        self._wrap(manager_lib.Manager, "elastic_retry", self._elastic_retry)
        holder = defining_class(manager_lib.Manager, "active_slice_indices")
        prop = holder.__dict__["active_slice_indices"]
        self._patch(holder, "active_slice_indices", self._active_property(prop))
        CheckpointWatch(
            self._wrap,
            self._checkpoint_saved,
            self._checkpoint_restoring,
            self._restored_from,
            self._holder,
        ).install()
        if isinstance(self.cluster, DeviceListeners):
            self.cluster.add_placement_listener(self._placed)
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(self._compiled)
        self._listening = True
        if isinstance(self.cluster, DeviceListeners):
            self.cluster.add_error_listener(self.slice_error)
            self._catches = CatchWatch(self._caught)
            self._catches.start()
        if self.lineage is not None:
            self.lineage.start()
        # grain's DataLoader and dataset iterators, the loop's own generators of batches.
        self._sources = BatchSources(
            self._wrap,
            self._drawn,
            lambda p: self.recorder.emit("iterator_set_state", **self._ids(), position=p),
        )
        self._sources.install()

    def _uninstall(self) -> None:
        sources = getattr(self, "_sources", None)
        if sources is not None:
            sources.stop()
        if self.lineage is not None:
            self.lineage.stop()
        if isinstance(self.cluster, DeviceListeners):
            self.cluster.remove_error_listener(self.slice_error)
        catches = getattr(self, "_catches", None)
        if catches is not None:
            catches.stop()
        if getattr(self, "_listening", False):
            import jax.monitoring

            jax.monitoring.unregister_event_duration_listener(self._compiled)
            self._listening = False
        if isinstance(self.cluster, DeviceListeners):
            self.cluster.remove_placement_listener(self._placed)
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def _wrap(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        if isinstance(owner, type):  # a class that inherits the method: wrap where it lives
            owner = defining_class(owner, name)
        original = owner.__dict__[name]

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            return wrapper(original, *args, **kwargs)

        self._patch(owner, name, wrapped)

    def _ids(self) -> dict[str, int]:
        return {"run": self.run, "attempt": self.attempt}

    # -- grain -----------------------------------------------------------------------------
    def _next(self, original: Callable[..., Any], iterator: Any) -> Any:
        if not self._ready:
            self._attempt_ready()
        position = position_of(iterator.get_state())
        t0 = time.perf_counter()
        batch = original(iterator)
        self._drawn(batch, position, time.perf_counter() - t0, self._iterators.of(iterator))
        return batch

    def _drawn(self, batch: Any, position: int | None, input_s: float, source: int = 0) -> None:
        """One batch reached the loop, from whichever source: counted once, here. ``source``
        numbers the grain iterators an attempt drew from (a mixture draws from several)."""
        if not self._ready:
            self._attempt_ready()
        size = batch_size_of(batch)
        self.batches += 1
        self._attempt_batches += 1
        ids = sample_ids_of(batch)
        if self.lineage is not None:
            self.lineage.drawn(self.batches, batch)
        fields: dict[str, Any] = {
            "batch": self.batches,
            "position": position,
            "size": size,
            "input_s": round(input_s, 6),
        }
        if ids is not None:
            fields["ids"] = ids
        if source:
            fields["source"] = source
        self.recorder.emit("batch", **self._ids(), **fields)

    def _set_state(self, original: Callable[..., Any], iterator: Any, state: Any) -> Any:
        out = original(iterator, state)
        self.recorder.emit("iterator_set_state", **self._ids(), position=position_of(state))
        return out

    def _attempt_ready(self) -> None:
        from pathways_chaos.harness.reference.trainer import live_census

        self._ready = True
        fields: dict[str, Any] = {"live": live_census()}
        earlier = self._earlier_failed()
        if self.lineage is not None and earlier:
            # What failed attempts still hold while this one trains: a leak a loop's locals
            # hide until it returns (a history list, a dict on the trainer object).
            fields["failed_attempts_alive"] = self.lineage.alive_from(earlier)
        self.recorder.emit("attempt_ready", **self._ids(), reason="attempt", **fields)

    def _earlier_failed(self) -> set[str]:
        return self._failed_attempts - {f"{self.run}:{self.attempt}"}

    # -- pathwaysutils ---------------------------------------------------------------------
    def _manager_init(self, original: Callable[..., Any], manager: Any, *a: Any, **k: Any) -> Any:
        original(manager, *a, **k)
        self.recorder.emit(
            "manager",
            run=self.run,
            slices=sorted(int(s) for s in manager.slice_to_devices),
            active_slices=sorted(manager.active_slice_indices),
        )

    def _elastic_retry(self, original: Callable[..., Any], manager: Any, *a: Any, **k: Any) -> Any:
        try:
            bound = inspect.signature(original).bind(manager, *a, **k)
        except TypeError:  # the library's own call says what is wrong
            bound = None
        if bound is not None:  # by keyword or by place
            callback = bound.arguments.get("on_elastic_event_callback")
            if callable(callback):
                bound.arguments["on_elastic_event_callback"] = self._observed_callback(callback)
            self.recorder.emit("elastic_retry", **self._ids(), **retry_policy_of(bound.arguments))
            a, k = bound.args[1:], bound.kwargs
        decorator = original(manager, *a, **k)
        observer = self

        def observed_decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(func)
            def attempt(*args: Any, **kwargs: Any) -> Any:
                return observer._attempt(manager, func, args, kwargs)

            return decorator(attempt)

        return observed_decorator

    def _observed_callback(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """The loop's ``on_elastic_event_callback``, its calls recorded (``elastic_event``, the
        ``callback=N`` trigger); an error armed for a call and not met in it is taken back
        when the call ends (``on_callback_end``)."""

        @functools.wraps(callback)
        def observed(*args: Any, **kwargs: Any) -> Any:
            self.recorder.emit("elastic_event", **self._ids())
            try:
                return callback(*args, **kwargs)
            except BaseException as error:  # it ends elastic_retry: say where it came from
                self.recorder.emit(
                    "elastic_event_raised",
                    **self._ids(),
                    type=type(error).__name__,
                    message=str(error)[:300],
                )
                raise
            finally:
                if self.on_callback_end is not None:
                    self.on_callback_end()

        return observed

    def _attempt(self, manager: Any, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        from pathwaysutils.elastic import elastic

        self.attempt += 1
        self._attempt_batches, self._ready = 0, False
        self._iterators = IteratorOrder()
        self._last_saved = None  # a failed attempt's save must not outlive it here
        if self.attempt > self.max_attempts:
            raise AttemptGuardError(
                f"pathways-chaos stopped the loop after {self.max_attempts} elastic attempts in "
                "one run: it would retry forever (give elastic_retry a retry_policy, e.g. "
                "ElasticRetryLimit)"
            )
        self._saves_done()
        latest = [s.latest for s in self._snapshotters]
        self.recorder.emit(
            "attempt_start",
            **self._ids(),
            active_slices=sorted(manager.active_slice_indices),
            snapshot_latest=max((int(m.step) for m in latest if m is not None), default=None),
        )
        try:
            return func(*args, **kwargs)
        except Exception as error:
            self._failed_attempts.add(f"{self.run}:{self.attempt}")
            self.recorder.emit(
                "error",
                **self._ids(),
                type=type(error).__name__,
                message=str(error)[:500],
                slice_down=elastic.is_error_due_to_slice_down(error, log_traceback=False),
                where=where_raised(error),
            )
            # The error goes on as the loop raised it, frames and all: a loop (or its retry
            # policy) that keeps it keeps the failed attempt's arrays, and no-leaks says so.
            raise

    def _active_property(self, prop: property) -> property:
        observer = self

        def setter(manager: Any, value: Any) -> None:
            assert prop.fset is not None
            prop.fset(manager, value)
            if threading.get_ident() == observer._main:
                observer._meshes.clear()  # a mesh seen before the change is news again after it
                observer.recorder.emit(
                    "active_slices", **observer._ids(), slices=sorted(manager.active_slice_indices)
                )

        return property(prop.fget, setter, prop.fdel, prop.__doc__)

    # -- compiles (JAX's public monitoring events) --------------------------------------------
    def _compiled(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event != COMPILE_EVENT or threading.get_ident() != self._main or self._reading:
            return  # the toolkit's own programs (a digest's checksum) are not the loop's
        self.recorder.emit(
            "compile",
            **self._ids(),
            seconds=round(duration_secs, 6),
            batches_in_attempt=self._attempt_batches,
        )

    # -- placements (from the device-loss seam) ----------------------------------------------
    def _placed(self, sharding: Any) -> None:
        if threading.get_ident() != self._main:
            return
        fields = mesh_fields(sharding, self._slice_of)
        if fields is None:
            return
        key = (self.run, self.attempt, str(fields["device_ids"]), str(fields["axes"]))
        if key not in self._meshes:
            self._meshes.add(key)
            self.recorder.emit("mesh", **self._ids(), reason="placement", **fields)

    # -- slice-down errors raised to the loop (from the device-loss seam) ---------------------
    def slice_error(self, error: BaseException) -> None:
        """A slice-down error raised to the loop (by the device-loss seam or a fault)."""
        from pathwaysutils.elastic import elastic

        if threading.get_ident() != self._main or self._reading:
            return
        if not elastic.is_error_due_to_slice_down(error, log_traceback=False):
            return  # an armed raise_error of another code: the loop must let it propagate
        stack = traceback.extract_stack()[:-1]
        self._error_number += 1
        catches = getattr(self, "_catches", None)
        if catches is not None:
            catches.watch(error, self._error_number)
        self.recorder.emit(
            "slice_error",
            **self._ids(),
            number=self._error_number,
            message=str(error)[:200],
            where=own_frame(stack),
            batches_in_attempt=self._attempt_batches,
        )

    def _caught(self, number: int, where: str) -> None:
        self.recorder.emit("slice_error_caught", **self._ids(), number=number, where=where)

    # -- preemption --------------------------------------------------------------------------
    @staticmethod
    def handles_sigterm() -> bool:
        return signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)


def _holds_arrays(value: Any) -> bool:
    """Whether a returned value has an array leaf to compare (a state, not metrics or None)."""
    import jax

    return any(hasattr(leaf, "shape") for leaf in jax.tree_util.tree_leaves(value))
