"""One MTC episode: the MTC trainer under a fault schedule on an ``MtcCluster``, all logged.

The service's decisions (restore plans, replications, backups) reach the log as ``mtc_*``
events, written from the trainer's thread right after the trainer event that caused them, so
the log reads in order and replays the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.episodes.episode import EpisodeResult, FaultController
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
    options = options or MtcOptions(run_name=cluster.job, mount=cluster.mount)
    recorder = Recorder(log_path, clock=cluster.clock)
    recorder.emit(
        "episode_start",
        topology=str(cluster.topology),
        schedule=(schedule or Schedule()).to_text(),
        clock="fake" if cluster.clock.fake else "real",
        mtc_tiers=cluster.tiers.medium,
    )
    results: list[TrainResult] = []
    error: BaseException | None = None
    controller = FaultController(schedule or Schedule(), cluster, recorder, step_seconds)
    with controller, _ServiceLog(cluster, recorder):
        trainer = trainer_factory(config, recorder, devices=cluster.devices, mtc=options)
        try:
            results.append(trainer.run())
        except Exception as e:  # the properties and the test decide what this means
            error = e
    recorder.emit(
        "episode_end", error=None if error is None else f"{type(error).__name__}: {error}"
    )
    recorder.close()
    return EpisodeResult(recorder.events, results, error, recorder.path)
