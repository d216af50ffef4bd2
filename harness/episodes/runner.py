"""The one episode runner: the trainer's, a user loop's and the MTC episode are workloads of it.

What every episode repeats lives here once: the recorder and its listeners, ``episode_start``,
the contexts the runs happen in (the deadline among them), the runs loop
(``max_runs``, a suspended run run again, the first error ends it), ``episode_end`` and the
result. A ``Workload`` says what differs: the checks before the log, the extra start fields,
its controller and contexts, how a run starts, whether it runs again, what is logged last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.backend import ClusterBackend
from pathways_chaos.harness.engine.deadline import EpisodeDeadlineExceeded
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.episodes.result import EpisodeResult


class Workload[R](Protocol):
    """One kind of episode, as the runner needs it; a workload that subclasses this takes its
    defaults (``failed`` passes the error on, ``after_run`` does nothing)."""

    #: What a run may raise that ends the episode with that error (the rest propagate).
    caught: ClassVar[tuple[type[BaseException], ...]]
    #: Whether a deadline passed between runs ends the episode (else it propagates).
    deadline_ends_episode: ClassVar[bool]

    def refuse(self) -> None:
        """Bad input: one line before the log begins."""

    def start_fields(self) -> dict[str, Any]:
        """The workload's own ``episode_start`` fields, after the common ones."""

    def begin(self, recorder: Recorder) -> None:
        """After ``episode_start``: builds what the runs need (the fault controller among it)."""

    def enter(self, stack: contextlib.ExitStack) -> None:
        """Enters the contexts the runs happen in, the fault controller among them."""

    def start(self, index: int) -> Callable[[], R]:
        """Starts the ``index``-th run (from 1): what it raises ends the episode uncaught; what
        it returns runs the run, and what that returns goes into the results."""

    #: What ran, as the result names it (a loop's ``module:function``; empty: the trainer).
    subject: str = ""

    def failed(self, error: BaseException) -> BaseException:
        """A run raised one of ``caught``: the error the episode ends with."""
        return error

    def after_run(self) -> None:
        """After each run, whatever it did (undoes what the run may have left)."""
        return None

    def again(self, result: R) -> bool:
        """Whether the episode runs again after a run that returned ``result``."""

    def close(self, recorder: Recorder) -> list[str]:
        """The events logged before ``episode_end``; the faults that never fired."""


class EpisodeRunner[R]:
    """Runs a workload's episode on a cluster under a schedule, all logged."""

    def __init__(
        self,
        workload: Workload[R],
        cluster: ClusterBackend,
        schedule: Schedule,
        *,
        log_path: str | Path | None = None,
        max_runs: int = 1,
        listeners: Iterable[Callable[[Event], None]] = (),
        recorder: Recorder | None = None,
    ) -> None:
        #: ``recorder``: a log already begun (a supervised child's, after its ready marker).
        self.recorder = recorder
        self.workload = workload
        self.cluster = cluster
        self.schedule = schedule
        self.log_path = log_path
        self.max_runs = max_runs
        self.listeners = listeners

    def run(self) -> EpisodeResult:
        """The episode: checks, ``episode_start``, the runs, the closing events, the result."""
        workload, cluster = self.workload, self.cluster
        workload.refuse()
        recorder = self.recorder or Recorder(self.log_path, clock=cluster.clock)
        for listener in self.listeners:
            recorder.add_listener(listener)
        recorder.emit(
            "episode_start",
            topology=str(cluster.topology),
            schedule=self.schedule.to_text(),
            clock="fake" if cluster.clock.fake else "real",
            **workload.start_fields(),
        )
        results: list[R] = []
        error: BaseException | None = None
        workload.begin(recorder)
        try:
            with contextlib.ExitStack() as stack:
                workload.enter(stack)
                error = self._runs(results)
        except EpisodeDeadlineExceeded as e:  # raised between runs by the wall-time watchdog
            if not workload.deadline_ends_episode:
                raise
            error = e
        unfired = workload.close(recorder)
        recorder.emit(
            "episode_end", error=None if error is None else f"{type(error).__name__}: {error}"
        )
        if self.recorder is None:  # a log it was given goes on after the episode
            recorder.close()
        return EpisodeResult(
            recorder.events, list(results), error, recorder.path, unfired, subject=workload.subject
        )

    def _runs(self, results: list[R]) -> BaseException | None:
        """Up to ``max_runs`` runs: the next one while the last asks for it; the first error
        ends them (and is returned)."""
        workload = self.workload
        for index in range(1, self.max_runs + 1):
            run = workload.start(index)
            try:
                result = run()
            except workload.caught as e:  # the oracle and the test decide what this means
                return workload.failed(e)
            finally:
                workload.after_run()
            results.append(result)
            if not workload.again(result):
                break
        return None
