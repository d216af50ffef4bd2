"""A trainer class the toolkit did not write, in a child process of its own: the child side.

A ``--chaos-trainer`` subclass or an acceptance adapter's trainer runs here, on a fake cluster
made in this process, and writes the episode's log; the parent (``supervised_trainer``) follows
the log, holds the limits and judges. The replay of the committed batches runs the same trainer
class, so it runs in a child too (``ReplayChildSpec``): it writes the state it reached as one
``.npy`` per leaf, and the parent compares.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

from pathways_chaos.harness.episodes.child import (
    ChildFiles,
    end_marker,
    episode_cluster,
    hand_off,
    load_pickled,
    one_off,
    prior_run,
    resume,
    run_clock,
    toolkit_error,
)


@dataclasses.dataclass(kw_only=True)
class TrainerChildSpec(ChildFiles):
    """One run of a trainer episode: a preemption's next run is the next child, as on GKE a
    new container, going on from the ``run_handoff`` the previous run logged."""

    factory_pickle: bytes | None = None  # the trainer factory (a class, a partial), pickled
    factory_spec: str | None = None  # or MODULE:CLASS / FILE.py:CLASS, never imported by the parent
    #: Only load the trainer and say whether it is a ReferenceTrainer class (a command's check).
    probe: bool = False
    name: str
    config_pickle: bytes
    schedule: str
    clock: str
    down: list[int]  # slices down before the episode starts (the fixture's initially_down)
    max_runs: int
    step_seconds: float
    fake_s: float | None
    preload: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    modules: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def run_in_child(self) -> None:
        from pathways_chaos.harness.engine.recorder import Recorder

        prior, handoff = prior_run(self)
        recorder = Recorder(self.log_path, clock=run_clock(self.clock, handoff), resume=prior)
        try:
            status = _one_run(self, recorder, handoff)
        except BaseException as error:  # ours: the trainer's errors end its runs inside
            toolkit_error(recorder, self.run, error)
            status = "toolkit_error"
        end_marker(recorder, self.run, status)


def _one_run(spec: TrainerChildSpec, recorder: Any, handoff: dict[str, Any] | None) -> str:
    """Run ``spec.run`` of the episode: ``suspended`` after handing off to the next child,
    else ``ended`` (the episode's end logged)."""
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.deadline import Deadline, EpisodeDeadlineExceeded
    from pathways_chaos.harness.episodes.episode import TrainerWorkload

    schedule = parse_schedule(spec.schedule)
    cluster = episode_cluster(spec, recorder.clock, handoff, spec.down if spec.run == 1 else ())
    config = pickle.loads(spec.config_pickle)
    # Everything before this line is the toolkit's start-up; the trainer's wall time starts here.
    recorder.emit("child_ready", run=spec.run)
    factory = _load_factory(spec, recorder)
    if factory is None or spec.probe:
        return "ended"
    deadline = Deadline(fake_s=spec.fake_s, wall_s=None)
    workload = TrainerWorkload(cluster, config, schedule, factory, spec.step_seconds, deadline)
    error: BaseException | None = None
    again = False
    with cluster:
        if spec.run == 1:  # down before the episode (on --cluster: acted out by the test)
            cluster.go_on_from({"down": [[index, "DATA_LOSS", None] for index in spec.down]})
            workload.refuse()
            recorder.emit(
                "episode_start",
                topology=str(cluster.topology),
                schedule=schedule.to_text(),
                clock=spec.clock,
                **workload.start_fields(),
            )
        workload.begin(recorder)
        try:
            with contextlib.ExitStack() as stack:
                workload.enter(stack)
                if handoff is not None:
                    resume(workload, schedule, handoff)
                run = workload.start(spec.run)
                try:
                    result = run()
                except workload.caught as e:  # the oracle and the test decide what this means
                    error = workload.failed(e)
                finally:
                    workload.after_run()
                if error is None:
                    again = workload.again(result)
        except EpisodeDeadlineExceeded as e:  # raised between steps by the fake-clock guard
            error = e
        except (SystemExit, KeyboardInterrupt, GeneratorExit) as e:  # the trainer's own
            error = e
            text = f"{type(e).__name__}: {e}"
            recorder.emit("run_end", run=spec.run, status="failed", error=text[:2000])
        if again and spec.run < spec.max_runs:
            hand_off(workload, schedule, recorder)
            return "suspended"
        workload.close(recorder)
        recorder.emit(
            "episode_end",
            error=None if error is None else f"{type(error).__name__}: {error}"[:2000],
        )
    return "ended"


@dataclasses.dataclass(kw_only=True)
class ReplayChildSpec(ChildFiles):
    """The committed batches of an episode's log, replayed by the same trainer class with no
    faults; the state reached is written to ``out_dir`` (one ``.npy`` per leaf, an index)."""

    factory_pickle: bytes | None = None  # the trainer, by reference; or
    factory_spec: str | None = None  # MODULE:CLASS, as the episode's log names it
    episode_log: str
    out_dir: str
    preload: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    modules: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def run_in_child(self) -> None:
        one_off(self, lambda recorder: _replay_logged(self, recorder))


def _replay_logged(spec: ReplayChildSpec, recorder: Any) -> None:
    from pathways_chaos.harness.engine.recorder import LogTail
    from pathways_chaos.harness.judging.committed import committed_lineage, run_start

    events = LogTail(spec.episode_log).read(final=True)
    lineage, _ = committed_lineage(events)
    start = run_start(events)
    assert start is not None, "the episode's log has no run_start"
    factory = _load_factory(spec, recorder)
    if factory is not None:
        _replay(spec, _trainer_class(factory), start, lineage, recorder)


def _replay(spec: ReplayChildSpec, cls: Any, start: Any, lineage: Any, recorder: Any) -> None:
    import numpy as np

    from pathways_chaos.harness.judging.replay import replay_with_trainer

    try:
        state, losses, where = replay_with_trainer(
            cls, start["config"], lineage, start.get("slices")
        )
    except Exception as error:  # the trainer's code raised while replaying: its failure
        text = f"{type(error).__name__}: {error}"[:2000]
        recorder.emit("run_end", run=spec.run, status="failed", error=text)
        return
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for number, (path, value) in enumerate(state.items()):
        np.save(out / f"leaf-{number}.npy", np.asarray(value), allow_pickle=False)
        files[path] = f"leaf-{number}.npy"
    index = {"leaves": files, "losses": losses, "where": where}
    (out / "replay.json").write_text(json.dumps(index))
    recorder.emit("run_end", run=spec.run, status="completed", leaves=len(files))


def _load_factory(spec: TrainerChildSpec | ReplayChildSpec, recorder: Any) -> Any:
    """The trainer factory the parent sent (by reference, or by name), or None after logging
    one line on why it cannot be had: not importable, or not a ReferenceTrainer class."""
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer

    try:
        if spec.factory_spec is not None:
            from pathways_chaos.harness.engine.user_modules import load_name

            try:
                factory = load_name(spec.factory_spec)
            except (ValueError, ImportError, AttributeError) as error:
                recorder.emit(
                    "loop_unloadable",
                    message=f"{spec.factory_spec!r} cannot be loaded ({error}): write "
                    "MODULE:NAME, for example "
                    "pathways_chaos.harness.reference.trainer:ReferenceTrainer",
                )
                return None
        else:
            assert spec.factory_pickle is not None
            factory = load_pickled(spec.factory_pickle, spec.preload, spec.modules)
    except BaseException as error:  # importing the trainer's module: anything goes
        recorder.emit("loop_unloadable", message=f"{type(error).__name__}: {error}"[:500])
        return None
    cls = _trainer_class(factory)
    if isinstance(spec, TrainerChildSpec):  # said in the log: the parent warns as it would
        from pathways_chaos.harness.reference.overrides import dead_override_messages

        for message in dead_override_messages(cls):
            recorder.emit("trainer_warning", message=message)
    if not (isinstance(cls, type) and issubclass(cls, ReferenceTrainer)):
        recorder.emit(
            "loop_unloadable",
            message=f"{spec.factory_spec or cls!r} is not a ReferenceTrainer subclass: "
            "subclass pathways_chaos.ReferenceTrainer",
        )
        return None
    return factory


def _trainer_class(factory: Any) -> Any:
    import functools

    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory
