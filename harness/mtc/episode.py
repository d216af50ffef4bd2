"""One MTC episode: the MTC trainer under a fault schedule on an ``MtcCluster``, all logged.

The service's decisions (restore plans, replications, backups) reach the log as ``mtc_*``
events, written from the trainer's thread right after the trainer event that caused them, so
the log reads in order and replays the same way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.episodes.fault_controller import FaultController
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.episodes.runner import EpisodeRunner, Workload
from pathways_chaos.harness.mtc.cluster import MtcCluster
from pathways_chaos.harness.mtc.trainer import MtcOptions, MtcTrainer
from pathways_chaos.harness.reference.trainer import TrainerConfig, TrainResult

MtcTrainerFactory = Callable[..., MtcTrainer]


class _ServiceLog:
    """Queues the service's events (from any thread) and writes them from the trainer's."""

    def __init__(self, cluster: MtcCluster, recorder: Recorder) -> None:
        self.cluster, self.recorder = cluster, recorder
        self._queue: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._flushing = False

    def __enter__(self) -> _ServiceLog:
        self.cluster.service.listeners.append(self.queue)
        self.recorder.add_listener(self.on_event)
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self.cluster.service.listeners.remove(self.queue)
        self.recorder.remove_listener(self.on_event)

    def queue(self, kind: str, fields: dict[str, Any]) -> None:
        with self._lock:
            self._queue.append((kind, fields))

    def on_event(self, event: Event) -> None:
        if self._flushing or event["kind"].startswith("mtc_restore"):
            return
        if event["kind"] == "checkpoint_save":
            self.cluster.service.pump()  # the service sees each complete step before the next
        if event["kind"] in ("checkpoint_save", "mtc_init", "fault", "run_end", "error"):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            queued, self._queue = self._queue, []
        self._flushing = True
        try:
            for kind, fields in queued:
                self.recorder.emit(kind, **fields)
        finally:
            self._flushing = False


class _MtcWorkload(Workload[TrainResult]):
    """One MTC job: its restarts are attempts of one run, so it runs once."""

    caught: ClassVar[tuple[type[BaseException], ...]] = (Exception,)
    deadline_ends_episode: ClassVar[bool] = True  # (no deadline is entered)

    def __init__(
        self,
        cluster: MtcCluster,
        config: TrainerConfig,
        schedule: Schedule,
        options: MtcOptions,
        trainer_factory: MtcTrainerFactory,
        step_seconds: float,
    ) -> None:
        self.cluster, self.config, self.schedule, self.options = cluster, config, schedule, options
        self.trainer_factory, self.step_seconds = trainer_factory, step_seconds
        self.recorder: Recorder | None = None
        self.faults: FaultController | None = None

    def refuse(self) -> None:
        pass  # the controller refuses a misfit schedule, after episode_start

    def start_fields(self) -> dict[str, Any]:
        return {"mtc_tiers": self.cluster.tiers.medium}

    def begin(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.faults = FaultController(self.schedule, self.cluster, recorder, self.step_seconds)

    def enter(self, stack: contextlib.ExitStack) -> None:
        assert self.faults is not None and self.recorder is not None  # set by begin()
        stack.enter_context(self.faults)
        stack.enter_context(_ServiceLog(self.cluster, self.recorder))

    def start(self, index: int) -> Callable[[], TrainResult]:
        assert self.recorder is not None
        trainer = self.trainer_factory(
            self.config, self.recorder, devices=self.cluster.devices, mtc=self.options
        )
        return trainer.run

    def again(self, result: TrainResult) -> bool:
        return False

    def close(self, recorder: Recorder) -> list[str]:
        return []  # an MTC episode's result has never listed unfired faults


def run_mtc_episode(
    cluster: MtcCluster,
    config: TrainerConfig,
    schedule: Schedule | None = None,
    *,
    options: MtcOptions | None = None,
    log_path: str | Path | None = None,
    trainer_factory: MtcTrainerFactory = MtcTrainer,
    step_seconds: float = 1.0,
) -> EpisodeResult:
    """Runs one MTC job under the schedule; its restarts are attempts of one run."""
    schedule = schedule or Schedule()
    options = options or MtcOptions(run_name=cluster.job, mount=cluster.mount)
    workload = _MtcWorkload(cluster, config, schedule, options, trainer_factory, step_seconds)
    return EpisodeRunner(workload, cluster, schedule, log_path=log_path, max_runs=1).run()
