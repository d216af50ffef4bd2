"""The parent side of a supervised loop episode: a user's loop runs in a child process per run.

The parent never imports the loop's module. It starts ``child`` (one process per run: a
preemption's next run is a new process, as a restarted Pod) and watches it (``child_watch``:
the wall deadline, memory and output caps, whatever ends it, named). The judges read only the
log and the value files beside it.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.deadline import Deadline, default_deadline
from pathways_chaos.harness.engine.recorder import Event, LogTail, child_folder
from pathways_chaos.harness.episodes.child import ChildSpec
from pathways_chaos.harness.episodes.child_limits import ChildLimits, default_limits
from pathways_chaos.harness.episodes.child_watch import ChildWatch, error_of
from pathways_chaos.harness.episodes.loop_episode import scratch
from pathways_chaos.harness.episodes.loop_reference import (
    file_modules,
    loop_reference,
    named_modules,
)
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.kube.child_bridge import BridgeBinding


class SupervisedLoopEpisode:
    """One episode of a user's loop, each run in a child process; the log is the contract."""

    def __init__(
        self,
        loop: Callable[..., Any] | str,
        schedule: Schedule,
        *,
        topology: str,
        clock: str = "fake",
        options: dict[str, Any] | None = None,
        log_path: str | Path | None = None,
        checkpoint_dir: str | Path | None = None,
        step_seconds: float = 1.0,
        max_runs: int = 3,
        listeners: Iterable[Callable[[Event], None]] = (),
        lineage: bool = True,
        show_library_logs: bool = False,
        deadline: Deadline | None = None,
        digests: bool = False,
        limits: ChildLimits | None = None,
        kube: BridgeBinding | None = None,
        down: Iterable[int] = (),
    ) -> None:
        self.kube = kube
        self.down = sorted(down)  # slices down before the episode starts (the test's own)
        self.schedule, self.topology, self.clock = schedule, topology, clock
        self.options = dict(options or {})
        self.checkpoint_dir = None if checkpoint_dir is None else str(checkpoint_dir)
        self.step_seconds, self.max_runs = step_seconds, max_runs
        self.listeners = list(listeners)
        self.lineage, self.show_library_logs, self.digests = lineage, show_library_logs, digests
        self.deadline = deadline or default_deadline()
        self.limits = limits or default_limits()
        self.loop_spec, self.loop_pickle, self.name = loop_reference(loop)
        try:
            self.options_pickle = pickle.dumps(self.options)
        except Exception as error:
            raise ChaosConfigError(
                f"the loop's options cannot be sent to its process ({type(error).__name__}: "
                f"{error}): pass plain values (numbers, strings, lists, dicts)"
            ) from None
        self.probe = False
        self.temporary = log_path is None
        if log_path is None:  # the log and value files live as long as this process
            log_path = Path(tempfile.mkdtemp(prefix="episode-", dir=scratch())) / "episode.jsonl"
        self.log_path = Path(log_path)
        self.work = child_folder(self.log_path)

    def run(self) -> EpisodeResult:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(mode=0o700, parents=True, exist_ok=True)
        tail = LogTail(self.log_path)
        events: list[Event] = []
        watch = ChildWatch(
            self.log_path,
            self.work,
            deadline=self.deadline,
            limits=self.limits,
            listeners=self.listeners,
        )
        try:
            watch.runs(self._spec, self.max_runs, tail, events)
        finally:
            tail.close()
        result = EpisodeResult(
            events,
            [],
            error_of(events),
            None if self.temporary else self.log_path,
            [e["text"] for e in events if e["kind"] == "fault_unfired"],
            subject=self.name,
        )
        return result

    def _spec(self, run: int) -> ChildSpec:
        return ChildSpec(
            probe=self.probe,
            loop=self.loop_spec,
            loop_pickle=self.loop_pickle,
            name=self.name,
            options_pickle=self.options_pickle,
            schedule=self.schedule.to_text(),
            topology=self.topology,
            clock=self.clock,
            log_path=str(self.log_path),
            values_dir=str(self.work / "values"),
            checkpoint_dir=self.checkpoint_dir,
            run=run,
            max_runs=self.max_runs,
            step_seconds=self.step_seconds,
            lineage=self.lineage,
            show_library_logs=self.show_library_logs,
            digests=self.digests,
            fake_s=self.deadline.fake_s,
            stack_file=str(self.work / f"stacks-{run}.txt"),
            witness_file=str(self.work / f"exits-{run}.txt"),
            # resolved as the parent sees them now ("" is its working folder)
            sys_path=[os.path.abspath(p or os.curdir) for p in sys.path],
            preload=file_modules(self.loop_pickle or b"") + file_modules(self.options_pickle),
            modules=named_modules(self.loop_pickle or b"") + named_modules(self.options_pickle),
            options_shown={k: repr(v) for k, v in self.options.items()},
            kube=self.kube,
            down=self.down,
        )


_checked: dict[str, str | None] = {}


def check_loop(spec: str, flag: str = "--chaos-loop") -> str | None:
    """Whether ``spec`` names a loop that loads: None, or one line saying why not. The module
    is imported in a child (never here); the answer is kept for the rest of this process."""
    if not spec.strip():
        return (
            f"{flag} is empty: write MODULE:FUNCTION, for example "
            "pathways_chaos.harness.reference.user_loop:main (or leave the option out)"
        )
    if spec not in _checked:
        episode = SupervisedLoopEpisode(spec, Schedule(), topology="1x1")
        episode.probe = True
        error = episode.run().error
        _checked[spec] = None if error is None else str(error)
    said = _checked[spec]
    if said is not None and said.startswith("loop="):  # the child names no option: this one
        said = flag + said.removeprefix("loop")
    return said


def run_supervised_loop_episode(
    loop: Callable[..., Any] | str, schedule: Schedule | None = None, **kwargs: Any
) -> EpisodeResult:
    """``SupervisedLoopEpisode(...).run()``: the user's loop, each run in its own process."""
    return SupervisedLoopEpisode(loop, schedule or Schedule(), **kwargs).run()
