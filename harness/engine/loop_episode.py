"""One episode of a user's own elastic loop: a fault schedule, the black-box observer, a log.

The loop is a plain function (``pkg.module:main``). It is called with nothing from the
toolkit: only the keyword arguments it names among ``devices`` (the fake cluster's devices,
for ``Manager(devices)``; ``jax.devices()`` sees the same ones) and ``checkpoint_dir`` (where a
preemption checkpoint goes), plus the test's own options. It returns its final state (any
pytree of arrays) or ``None``. Faults fire on what the observer sees: the Nth batch drawn from
the loop's grain iterator (``batch=N``; ``step=N`` means the same for a loop), the Nth
Snapshotter save or restore, the Nth elastic attempt, or a time on the episode clock.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pathways_chaos.faults.model import Schedule, ScheduledFault
from pathways_chaos.harness.blackbox.observer import LoopObserver
from pathways_chaos.harness.engine.clock import FakeClock
from pathways_chaos.harness.engine.episode import ClusterBackend, FaultController
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.errors import ChaosConfigError

#: Trigger kind -> the observer's event it counts (``step`` is ``batch`` for a loop).
LOOP_TRIGGERS = {
    "batch": "batch",
    "step": "batch",
    "save": "snapshot_save",
    "restore": "restore_begin",
    "attempt": "attempt_start",
}

#: Keyword arguments the episode gives a loop that names them.
PROVIDED = ("devices", "checkpoint_dir")


@dataclasses.dataclass
class LoopResult:
    """Like ``EpisodeResult``: the log, what each run returned, the error that ended it."""

    events: list[Event]
    results: list[Any]
    error: BaseException | None
    log_path: Path | None
    loop: str

    @property
    def completed(self) -> bool:
        ends = [e for e in self.events if e["kind"] == "run_end"]
        return bool(ends) and ends[-1]["status"] == "completed"


class LoopFaultController(FaultController):
    """The schedule's faults, triggered by what the observer records of the loop.

    ``time=S`` counts from this episode's start: a fault-free run of the same loop may have
    run on the same cluster (and clock) before.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.t0 = self.cluster.clock.time()

    def on_time(self, now: float) -> None:
        super().on_time(now - self.t0)

    def on_event(self, event: Event) -> None:
        if self._firing:
            return
        kind = event["kind"]
        if kind == "attempt_start":
            self._mesh_slices = None
        elif kind == "mesh":
            self._mesh_slices = list(event["slices"])
        self._counts[kind] = self._counts.get(kind, 0) + 1
        for entry in list(self.pending):
            if self._due(entry, event):
                self._fire(entry)
        if kind == "batch":
            if self._mesh_slices is not None:
                count_access = getattr(self.cluster, "count_access", None)
                if count_access is not None:
                    count_access(self._mesh_slices)  # a flapping slice fails again
            if self.step_seconds and isinstance(self.cluster.clock, FakeClock):
                self.cluster.clock.advance(self.step_seconds)

    def _due(self, entry: ScheduledFault, event: Event) -> bool:
        at = entry.at
        if at.kind == "time":
            return self.cluster.clock.time() - self.t0 >= at.value
        counted = LOOP_TRIGGERS[at.kind]
        return event["kind"] == counted and self._counts[counted] == at.value

    def _fire(self, entry: ScheduledFault) -> None:
        if entry.fault.kind == "preemption" and not LoopObserver.handles_sigterm():
            # SIGTERM's default action would kill the test process, not suspend the loop.
            self.pending.remove(entry)
            self.recorder.emit(
                "fault",
                fault=entry.fault.to_json(),
                text=entry.to_text(),
                description=entry.fault.describe(),
                raised="not injected: the loop installs no SIGTERM handler",
            )
            return
        super()._fire(entry)


def load_loop(spec: str) -> Callable[..., Any]:
    """``pkg.module:function`` (or ``path/to/file.py:function``) -> the function."""
    module_name, sep, attr = spec.partition(":")
    try:
        if not sep or not attr:
            raise ValueError("no colon")
        if module_name.endswith(".py"):
            location = Path(module_name)
            loaded = importlib.util.spec_from_file_location(location.stem, location)
            if loaded is None or loaded.loader is None:
                raise ImportError(f"cannot import {module_name}")
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        loop = getattr(module, attr)
    except (ValueError, ImportError, AttributeError, OSError) as error:
        raise ChaosConfigError(
            f"--chaos-loop={spec!r} cannot be loaded ({error}): write MODULE:FUNCTION, for "
            "example pathways_chaos.harness.reference.user_loop:main"
        ) from None
    if not callable(loop):
        raise ChaosConfigError(f"--chaos-loop={spec!r} is not a function: name the loop's entry")
    return loop


def loop_name(loop: Callable[..., Any]) -> str:
    return f"{getattr(loop, '__module__', '?')}:{getattr(loop, '__qualname__', repr(loop))}"


def loop_arguments(
    loop: Callable[..., Any], provided: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """The test's options, plus those of ``devices`` / ``checkpoint_dir`` the loop takes."""
    try:
        parameters = inspect.signature(loop).parameters
    except (TypeError, ValueError):
        return dict(options)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    out = {k: v for k, v in provided.items() if takes_any or k in parameters}
    out.update(options)
    return out


def run_loop_episode(
    cluster: ClusterBackend,
    loop: Callable[..., Any],
    schedule: Schedule | None = None,
    *,
    options: dict[str, Any] | None = None,
    log_path: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    step_seconds: float = 1.0,
    max_runs: int = 3,
    listeners: Iterable[Callable[[Event], None]] = (),
) -> LoopResult:
    """Runs the loop under the schedule; a run that a preemption notice ended runs again."""
    schedule = schedule or Schedule()
    name = loop_name(loop)
    recorder = Recorder(log_path, clock=cluster.clock)
    for listener in listeners:
        recorder.add_listener(listener)
    recorder.emit(
        "episode_start",
        topology=str(cluster.topology),
        schedule=schedule.to_text(),
        clock="fake" if cluster.clock.fake else "real",
        loop=name,
        options={k: repr(v) for k, v in (options or {}).items()},
    )
    provided: dict[str, Any] = {"devices": list(cluster.devices)}
    if checkpoint_dir is not None:
        provided["checkpoint_dir"] = str(checkpoint_dir)
    arguments = loop_arguments(loop, provided, options or {})
    results: list[Any] = []
    error: BaseException | None = None
    previous = signal.getsignal(signal.SIGTERM)
    controller = LoopFaultController(schedule, cluster, recorder, step_seconds)
    with controller, LoopObserver(recorder, cluster) as observer:
        for run in range(1, max_runs + 1):
            observer.begin_run(run, name)
            preemptions = sum(1 for f in controller.fired if f.fault.kind == "preemption")
            try:
                value = loop(**arguments)
            except Exception as e:  # the oracle and the test decide what this means
                observer.end_run("failed", error=e)
                error = e
                break
            finally:
                signal.signal(signal.SIGTERM, previous)
            results.append(value)
            preempted = (
                sum(1 for f in controller.fired if f.fault.kind == "preemption") > preemptions
            )
            if preempted and value is None:
                observer.end_run("suspended")
                continue
            observer.end_run("completed", value)
            break
    recorder.emit(
        "episode_end", error=None if error is None else f"{type(error).__name__}: {error}"
    )
    recorder.close()
    return LoopResult(recorder.events, results, error, recorder.path, name)
