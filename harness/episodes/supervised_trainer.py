"""A trainer class the toolkit did not write, run and replayed in child processes: the parent.

``play`` sends here a trainer that is not the toolkit's own (a ``--chaos-trainer`` subclass, an
acceptance adapter's trainer): its whole episode runs in one child on a fake cluster made there
(``trainer_child``), and the replay of its committed batches in another; this process follows
the log, holds the limits (``child_watch``) and judges. Whatever the trainer does (exit, hang,
fork, leak, patch a library) ends as a failed run that names it, and nothing of it outlives its
child.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.deadline import Deadline, default_deadline
from pathways_chaos.harness.engine.recorder import Event, LogTail, child_folder
from pathways_chaos.harness.engine.untrusted_files import load_json
from pathways_chaos.harness.episodes.child_limits import ChildLimits, default_limits
from pathways_chaos.harness.episodes.child_watch import ChildWatch, error_of
from pathways_chaos.harness.episodes.loop_reference import file_modules, named_modules
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.episodes.trainer_child import ReplayChildSpec, TrainerChildSpec
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.judging.replay import Replayed
from pathways_chaos.harness.kube.child_bridge import BridgeBinding


def is_toolkits_own(factory: Any) -> bool:
    """Whether a trainer factory is only the toolkit's code (run in this process, as ours):
    a class, or a partial of one, every part of which pickles by reference to
    ``pathways_chaos`` modules alone."""
    if factory is None:
        return True
    try:
        data = pickle.dumps(factory)
    except Exception:
        return False
    return not named_modules(data) and not file_modules(data) and _only_ours(factory)


def _only_ours(factory: Any) -> bool:
    """Every callable in the factory (through partials and dataclass fields, an acceptance
    adapter's among them) is the toolkit's, and nothing was loaded from a user's source."""
    pending, seen = [factory], 0
    while pending and seen < 1000:
        part, seen = pending.pop(), seen + 1
        if isinstance(part, functools.partial):
            pending += [part.func, *part.args, *part.keywords.values()]
            continue
        if dataclasses.is_dataclass(part) and not isinstance(part, type):
            source = getattr(part, "source", None)
            if isinstance(source, str) and not source.startswith("pathways_chaos."):
                return False
            pending += [getattr(part, f.name) for f in dataclasses.fields(part)]
            continue
        module = str(getattr(part, "__module__", None) or "pathways_chaos.")
        if callable(part) and not module.startswith("pathways_chaos."):
            return False
    return not pending


def _sendable(factory: Any, name: str) -> bytes:
    try:
        return pickle.dumps(factory)
    except Exception as error:
        raise ChaosConfigError(
            f"the trainer {name} cannot be sent to its episode's process "
            f"({type(error).__name__}: {error}): define it at module level (or pass "
            "'MODULE:CLASS'), or pass isolate=False to run it in the judging process"
        ) from None


def _name(factory: Any) -> str:
    inner = factory
    while isinstance(inner, functools.partial):
        inner = inner.func
    return f"{getattr(inner, '__module__', '?')}:{getattr(inner, '__qualname__', inner)}"


class SupervisedTrainerEpisode:
    """One episode of a trainer the toolkit did not write, in a child process."""

    def __init__(
        self,
        factory: Callable[..., Any] | str,
        config: Any,
        schedule: Schedule,
        *,
        topology: str,
        clock: str = "fake",
        down: Iterable[int] = (),
        log_path: str | Path | None = None,
        step_seconds: float = 1.0,
        max_runs: int = 3,
        listeners: Iterable[Callable[[Event], None]] = (),
        deadline: Deadline | None = None,
        limits: ChildLimits | None = None,
        kube: BridgeBinding | None = None,
    ) -> None:
        self.kube = kube  # --cluster: the episode's children act its faults out on the JobSet
        #: A spec string travels as it is: this process never imports the trainer's module.
        self.factory_spec = factory if isinstance(factory, str) else None
        self.name = factory if isinstance(factory, str) else _name(factory)
        self.factory_pickle = None if isinstance(factory, str) else _sendable(factory, self.name)
        self.probe = False
        self.config_pickle = pickle.dumps(config)
        self.schedule, self.topology, self.clock = schedule, topology, clock
        self.down = sorted(down)
        self.step_seconds, self.max_runs = step_seconds, max_runs
        self.listeners = list(listeners)
        self.deadline = deadline or default_deadline()
        self.limits = limits or default_limits()
        self.temporary = log_path is None
        if log_path is None:
            log_path = Path(tempfile.mkdtemp(prefix="trainer-episode-")) / "episode.jsonl"
        self.log_path = Path(log_path)
        self.work = child_folder(self.log_path)

    def _watch(self, log_path: Path, listeners: Iterable[Callable[[Event], None]]) -> ChildWatch:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(mode=0o700, parents=True, exist_ok=True)
        return ChildWatch(
            log_path,
            self.work,
            deadline=self.deadline,
            limits=self.limits,
            listeners=listeners,
            subject="trainer",
        )

    def _files(self, log_path: Path, tag: str, run: int = 1) -> dict[str, Any]:
        data = self.factory_pickle or b""
        return child_files(self.topology, log_path, self.work, tag, data, run=run)

    def run(self) -> EpisodeResult:
        """Each run in a child of its own: a preemption's next run is a new process, which
        shares with the last only the checkpoint folder and the log's ``run_handoff``."""
        watch = self._watch(self.log_path, self.listeners)
        tail = LogTail(self.log_path)
        events: list[Event] = []
        try:
            watch.runs(self._spec, self.max_runs, tail, events)
        finally:
            tail.close()
        if not self.probe:  # the warnings the trainer's class earned, where the user sees them
            from pathways_chaos.harness.reference.overrides import TrainerOverrideWarning

            said = {str(e["message"]) for e in events if e["kind"] == "trainer_warning"}
            for message in sorted(said):  # each run's child says them again
                warnings.warn(message, TrainerOverrideWarning, stacklevel=3)
        unfired = [str(e["text"]) for e in events if e["kind"] == "fault_unfired"]
        return EpisodeResult(
            events, [], error_of(events), None if self.temporary else self.log_path, unfired
        )

    def _spec(self, run: int) -> TrainerChildSpec:
        return TrainerChildSpec(
            **self._files(self.log_path, f"episode-{run}", run),
            factory_pickle=self.factory_pickle,
            factory_spec=self.factory_spec,
            probe=self.probe,
            name=self.name,
            config_pickle=self.config_pickle,
            schedule=self.schedule.to_text(),
            clock=self.clock,
            down=self.down,
            max_runs=self.max_runs,
            step_seconds=self.step_seconds,
            fake_s=self.deadline.fake_s,
            kube=self.kube,
        )

    def replay(self) -> Replayed:
        """The trainer's fault-free replay of this episode's committed batches, in a child of
        its own: the state it reached, its losses and where it ran, or why there is none."""
        return replay_in_child(
            self.log_path,
            self.work,
            self._files(self.work / "replay.jsonl", "replay"),
            factory_pickle=self.factory_pickle,
            factory_spec=self.factory_spec,
            deadline=self.deadline,
            limits=self.limits,
        )


_checked: dict[str, str | None] = {}


def check_trainer(spec: str, flag: str = "--chaos-trainer") -> str | None:
    """Whether ``spec`` names a ReferenceTrainer class that loads: None, or one line saying
    why not. Imported in a child (never here); the answer is kept for this process."""
    if spec not in _checked:
        from pathways_chaos.harness.reference.trainer import TrainerConfig

        if not spec.strip():
            _checked[spec] = f"{flag} is empty: write MODULE:CLASS or FILE.py:CLASS"
        else:
            episode = SupervisedTrainerEpisode(spec, TrainerConfig(), Schedule(), topology="1x1")
            episode.probe = True
            error = episode.run().error
            _checked[spec] = None if error is None else f"{flag}={error}"
    return _checked[spec]


def child_files(
    topology: str,
    log_path: Path,
    work: Path,
    tag: str,
    data: bytes = b"",
    *,
    run: int = 1,
    pickled: bool = True,
) -> dict[str, Any]:
    """The ``ChildFiles`` fields of a child: its log, where its stacks and fatal calls go,
    this process's ``sys.path``, and (``pickled``: a trainer's child) the modules ``data``
    (the pickled trainer) needs loaded from files."""
    files: dict[str, Any] = {
        "topology": topology,
        "log_path": str(log_path),
        "run": run,
        "stack_file": str(work / f"stacks-{tag}.txt"),
        "witness_file": str(work / f"exits-{tag}.txt"),
        "sys_path": [os.path.abspath(p or os.curdir) for p in sys.path],
    }
    if pickled:
        files |= {"preload": file_modules(data), "modules": named_modules(data)}
    return files


def replay_logged_trainer(episode_log: Path, spec: str, topology: str) -> Replayed:
    """The replay of a logged episode by the trainer its log names (``MODULE:CLASS``), in a
    child: ``pathways-chaos check`` never imports a trainer it did not write."""
    work = Path(tempfile.mkdtemp(prefix="trainer-replay-"))
    files = child_files(topology, work / "replay.jsonl", work, "replay")
    return replay_in_child(
        episode_log,
        work,
        files,
        factory_spec=spec,
        deadline=default_deadline(),
        limits=default_limits(),
    )


def replay_in_child(
    episode_log: Path,
    work: Path,
    files: dict[str, Any],
    *,
    deadline: Deadline,
    limits: ChildLimits,
    factory_pickle: bytes | None = None,
    factory_spec: str | None = None,
) -> Replayed:
    """Runs ``ReplayChildSpec`` and reads what it wrote (memory-mapped ``.npy`` files)."""
    log = Path(files["log_path"])
    out = work / "replay"
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    watch = ChildWatch(log, work, deadline=deadline, limits=limits, subject="trainer")
    spec = ReplayChildSpec(
        **files,
        factory_pickle=factory_pickle,
        factory_spec=factory_spec,
        episode_log=str(episode_log),
        out_dir=str(out),
    )
    error = error_of(watch.one(spec))
    if error is not None:
        return f"{type(error).__name__}: {error}"
    index = load_json((out / "replay.json").read_text(), out / "replay.json", what="replay index")
    state = {
        path: np.load(out / file, mmap_mode="r", allow_pickle=False)
        for path, file in index["leaves"].items()
    }
    return state, [float(x) for x in index["losses"]], str(index["where"])
