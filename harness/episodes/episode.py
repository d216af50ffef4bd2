"""One episode: a fault schedule applied to a trainer through a cluster backend, all logged.

The controller listens to the trainer's events. A fault fires when its trigger matches an
event (or the clock passes its time); after that, any trainer event while the current mesh
still holds a lost slice raises the slice-down error, which is how Pathways reports one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from pathways_chaos.faults.model import Schedule, ScheduledFault, check_schedule_fits
from pathways_chaos.harness.engine.backend import ClusterBackend, KubeBacked, MtcHosts, SaveGated
from pathways_chaos.harness.engine.clock import FakeClock
from pathways_chaos.harness.engine.deadline import Deadline, episode_deadline
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.episodes.runner import EpisodeRunner
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig, TrainResult

#: Trainer events that touch data on the mesh (and so meet a lost slice).
ACCESS_EVENTS = frozenset(
    {"step", "snapshot_save", "restore_begin", "restore_end", "attempt_ready", "scale_up"}
)
#: Trigger kind -> (event kind it counts, whether the value is a count or a step number).
_EVENT_TRIGGERS = {
    "restore": "restore_begin",
    "save": "snapshot_save",
    "attempt": "attempt_ready",
    "batch": "step",  # one batch drawn per step event
    "callback": "elastic_event",
}

TrainerFactory = Callable[..., ReferenceTrainer]


def refuse_misfits(schedule: Schedule, cluster: ClusterBackend) -> None:
    """A slice or host outside the cluster, or a Kubernetes fault on the fake: one line before a
    step. Once per episode: by the runner before its log begins, else by the controller."""
    check_schedule_fits(
        schedule,
        cluster.topology.num_slices,
        kubernetes=isinstance(cluster, KubeBacked),
        mtc_hosts=cluster.mtc_hosts if isinstance(cluster, MtcHosts) else None,
    )


class FaultController:
    """Applies a schedule to a fake cluster as the trainer's events arrive.

    One controller for every episode: what differs between the trainer's and a user loop's
    (``LoopFaultController``) is configuration: which event each trigger counts, which event
    advances the fake clock, where ``time=`` counts from, and what the mesh's slices are told
    after an event.
    """

    #: Trigger kind -> the event kind it counts (``step=`` and ``time=`` are handled apart
    #: unless named here).
    triggers: ClassVar[dict[str, str]] = _EVENT_TRIGGERS
    #: The event after which the fake clock advances by ``step_seconds``.
    clock_event: ClassVar[str] = "step"

    def __init__(
        self,
        schedule: Schedule,
        cluster: ClusterBackend,
        recorder: Recorder,
        step_seconds: float = 1.0,
        *,
        checked: bool = False,
    ) -> None:
        if not checked:  # the runner did not refuse a misfit schedule before its log began
            refuse_misfits(schedule, cluster)
        self.cluster = cluster
        self.recorder = recorder
        self.step_seconds = step_seconds
        self.pending: list[ScheduledFault] = list(schedule)
        self.fired: list[ScheduledFault] = []
        self._counts: dict[str, int] = {}
        self._mesh_slices: list[int] | None = None
        self._main = threading.get_ident()
        self._firing = False
        self.last_step = -1
        #: Where ``time=`` triggers count from (the clock's zero).
        self.time_origin = 0.0

    def handoff(self, entries: list[ScheduledFault]) -> dict[str, Any]:
        """What a preemption's next run (a new process) goes on from: the faults still to come
        and those fired (by their place in ``entries``, the schedule), the trigger counts."""
        return {
            "pending": [entries.index(e) for e in self.pending],
            "fired": [entries.index(e) for e in self.fired],
            "counts": dict(self._counts),
            "last_step": self.last_step,
            "time_origin": self.time_origin,
        }

    def go_on_from(self, entries: list[ScheduledFault], state: dict[str, Any]) -> None:
        self.pending = [entries[i] for i in state["pending"]]
        self.fired = [entries[i] for i in state["fired"]]
        self._counts = {str(k): int(v) for k, v in state["counts"].items()}
        self.last_step = int(state["last_step"])
        self.time_origin = float(state["time_origin"])

    def unfired(self) -> list[str]:
        """One line per scheduled fault that never fired, saying why it could not."""
        lines = []
        for entry in self.pending:
            at = entry.at
            if at.kind == "step":
                why = f"step={at.value} > last step {self.last_step}"
            elif at.kind == "time":
                why = f"time={at.value} > episode clock {self.cluster.clock.time():.1f} s"
            else:
                seen = self._counts.get(_EVENT_TRIGGERS[at.kind], 0)
                why = f"{at.kind}={at.value} but the episode had {seen}"
            lines.append(f"fault never fired: {entry.to_text()} ({why})")
        return lines

    def __enter__(self) -> FaultController:
        self.recorder.add_listener(self.on_event)
        if isinstance(self.cluster.clock, FakeClock):
            self.cluster.clock.add_listener(self.on_time)
        return self

    def __exit__(self, *exc: object) -> None:
        self.recorder.remove_listener(self.on_event)
        if isinstance(self.cluster.clock, FakeClock):
            self.cluster.clock.remove_listener(self.on_time)

    def on_event(self, event: Event) -> None:
        if self._firing:
            return  # the controller's own fault events
        kind = event["kind"]
        if kind == "attempt_start":
            self._mesh_slices = None
        elif kind == "mesh":
            self._mesh_slices = list(event["slices"])
        self._counts[kind] = self._counts.get(kind, 0) + 1
        if kind == "step":
            self.last_step = max(self.last_step, int(event["step"]))
        for entry in list(self.pending):
            if self._due(entry, event):
                self._fire(entry)
        if self._mesh_slices is not None:
            self._touch_mesh(kind, self._mesh_slices)
        clock = self.cluster.clock
        if kind == self.clock_event and self.step_seconds and isinstance(clock, FakeClock):
            clock.advance(self.step_seconds)

    def _touch_mesh(self, kind: str, slices: list[int]) -> None:
        """After an event the trainer's mesh is used by: a lost slice in it fails the access."""
        if kind in ACCESS_EVENTS:
            self.cluster.check_access(slices)

    def on_time(self, now: float) -> None:
        if threading.get_ident() != self._main:
            return  # faults fire only in the trainer's thread
        for entry in list(self.pending):
            if entry.at.kind == "time" and now - self.time_origin >= entry.at.value:
                self._fire(entry)

    def _due(self, entry: ScheduledFault, event: Event) -> bool:
        at = entry.at
        if at.kind == "step" and "step" not in self.triggers:
            return bool(event["kind"] == "step" and event["step"] == at.value)
        if at.kind == "time":
            return self.cluster.clock.time() - self.time_origin >= at.value
        counted = self.triggers[at.kind]
        return event["kind"] == counted and self._counts[counted] == at.value

    def _fire(self, entry: ScheduledFault) -> None:
        self.pending.remove(entry)
        self.fired.append(entry)
        fields = {
            "fault": entry.fault.to_json(),
            "text": entry.to_text(),
            "description": entry.fault.describe(),
        }
        if isinstance(self.cluster, SaveGated):  # a save still copying completes first
            self.cluster.save_gate.join_unjoined()
        self._firing = True
        try:
            try:
                touched = entry.fault.inject(self.cluster)
            except Exception as error:
                self.recorder.emit("fault", **fields, raised=str(error))
                raise
            self.recorder.emit("fault", **fields, touched=touched)
        finally:
            self._firing = False


@dataclasses.dataclass
class EpisodeResult:
    """What an episode left: its event log, each run's result, and the error that ended it."""

    events: list[Event]
    results: list[TrainResult]
    error: BaseException | None
    log_path: Path | None
    #: "fault never fired: ..." for each scheduled fault whose trigger never came.
    unfired: list[str] = dataclasses.field(default_factory=list)

    @property
    def completed(self) -> bool:
        # From the log: a supervised episode's results stayed in its child process.
        ends = [e for e in self.events if e["kind"] == "run_end"]
        return bool(ends) and ends[-1].get("status") == "completed"


def _trainer_class(factory: Any) -> Any:
    """The class a trainer factory makes (a class, or a ``functools.partial`` of one)."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


class TrainerWorkload:
    """The reference trainer (or a factory's): a suspended run is resumed by a new run."""

    caught: ClassVar[tuple[type[BaseException], ...]] = (Exception,)
    deadline_ends_episode: ClassVar[bool] = True

    def __init__(
        self,
        cluster: ClusterBackend,
        config: TrainerConfig,
        schedule: Schedule,
        trainer_factory: TrainerFactory,
        step_seconds: float,
        deadline: Deadline | None,
    ) -> None:
        self.cluster, self.config, self.schedule = cluster, config, schedule
        self.trainer_factory, self.step_seconds, self.deadline = (
            trainer_factory,
            step_seconds,
            deadline,
        )
        self.recorder: Recorder | None = None
        self.faults: FaultController | None = None

    def refuse(self) -> None:
        refuse_misfits(self.schedule, self.cluster)
        # More slices asked than the cluster has: one line before anything runs, not a wait.
        self.config.check_fits(self.cluster.topology.num_slices)
        from pathways_chaos.harness.reference.overrides import warn_dead_overrides

        warn_dead_overrides(_trainer_class(self.trainer_factory))

    def start_fields(self) -> dict[str, Any]:
        return {}

    def begin(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.faults = FaultController(
            self.schedule, self.cluster, recorder, self.step_seconds, checked=True
        )

    def enter(self, stack: contextlib.ExitStack) -> None:
        assert self.faults is not None  # built by begin()
        stack.enter_context(self.faults)
        stack.enter_context(
            episode_deadline(self.cluster.clock, self.deadline, cluster=self.cluster)
        )

    def start(self, index: int) -> Callable[[], TrainResult]:
        cluster, recorder = self.cluster, self.recorder
        assert recorder is not None  # set by controller(), before any run
        trainer = self.trainer_factory(
            self.config, recorder, devices=cluster.devices, run_index=index
        )
        if isinstance(cluster, SaveGated):  # slow_save holds this run's saves through it
            trainer.snapshotter_wrapper = functools.partial(
                cluster.save_gate.wrap, recorder=recorder, run=index
            )
        return trainer.run

    def failed(self, error: BaseException) -> BaseException:
        return error

    def after_run(self) -> None:
        pass

    def again(self, result: TrainResult) -> bool:
        return result.status == "suspended"

    def close(self, recorder: Recorder) -> list[str]:
        assert self.faults is not None
        return self.faults.unfired()

    def result(
        self,
        recorder: Recorder,
        results: list[TrainResult],
        error: BaseException | None,
        unfired: list[str],
    ) -> EpisodeResult:
        return EpisodeResult(recorder.events, results, error, recorder.path, unfired)


def run_episode(
    cluster: ClusterBackend,
    config: TrainerConfig,
    schedule: Schedule | None = None,
    *,
    log_path: str | Path | None = None,
    trainer_factory: TrainerFactory = ReferenceTrainer,
    step_seconds: float = 1.0,
    max_runs: int = 3,
    listeners: Iterable[Callable[[Event], None]] = (),
    deadline: Deadline | None = None,
    recorder: Recorder | None = None,
) -> EpisodeResult:
    """Runs the trainer under the schedule; a suspended run is resumed by a new run.

    ``deadline`` bounds the episode in fake-clock and wall time (default: the session's,
    ``--chaos-deadline`` / ``--chaos-wall-deadline``); past it the run ends with
    ``EpisodeDeadlineExceeded`` saying what it waited for.
    """
    schedule = schedule or Schedule()
    workload = TrainerWorkload(cluster, config, schedule, trainer_factory, step_seconds, deadline)
    runner = EpisodeRunner(
        workload,
        cluster,
        schedule,
        log_path=log_path,
        max_runs=max_runs,
        listeners=listeners,
        recorder=recorder,
    )
    return runner.run()
