"""One episode of the reference trainer: a fault schedule applied through a cluster backend by
the one fault controller (``fault_controller``), all logged."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.backend import ClusterBackend, SaveGated
from pathways_chaos.harness.engine.deadline import Deadline, episode_deadline
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.episodes.fault_controller import FaultController, refuse_misfits
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.episodes.runner import EpisodeRunner, Workload
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig, TrainResult

TrainerFactory = Callable[..., ReferenceTrainer]


def _trainer_class(factory: Any) -> Any:
    """The class a trainer factory makes (a class, or a ``functools.partial`` of one)."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


class TrainerWorkload(Workload[TrainResult]):
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

    def again(self, result: TrainResult) -> bool:
        return result.status == "suspended"

    def close(self, recorder: Recorder) -> list[str]:
        assert self.faults is not None
        return self.faults.unfired()


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
