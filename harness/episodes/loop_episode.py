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

import contextlib
import inspect
import logging
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from pathways_chaos.faults.model import Schedule, ScheduledFault
from pathways_chaos.faults.slice import CallbackError, RaiseError
from pathways_chaos.harness.blackbox.observer import LoopObserver
from pathways_chaos.harness.engine import user_modules
from pathways_chaos.harness.engine.backend import AccessCounting, ClusterBackend, ErrorArming
from pathways_chaos.harness.engine.deadline import Deadline, episode_deadline
from pathways_chaos.harness.engine.recorder import Event, Recorder, values_folders
from pathways_chaos.harness.engine.subject_events import reporting
from pathways_chaos.harness.engine.user_modules import load_name
from pathways_chaos.harness.episodes.fault_controller import FaultController
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.episodes.runner import EpisodeRunner, Workload
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.judging.clean_rerun import SAVE_EVENTS
from pathways_chaos.harness.judging.wording import plural

#: Trigger kind -> the observer's event it counts (``step`` is ``batch`` for a loop; ``save``
#: counts every event of ``SAVE_EVENTS``).
LOOP_TRIGGERS = {
    "batch": "batch",
    "step": "batch",
    "save": "save",
    "restore": "restore_begin",
    "attempt": "attempt_start",
    "callback": "elastic_event",
}

#: Keyword arguments the episode gives a loop that names them.
PROVIDED = ("devices", "checkpoint_dir")


def refuse_provided_options(options: dict[str, Any] | None) -> None:
    """The loop's options may not set what each episode gives it (the fake cluster's devices,
    an empty checkpoint folder of its own): a run would then write where it was told, or train
    on devices the faults do not act on."""
    given = sorted(set(options or ()) & set(PROVIDED))
    if given:
        raise ChaosConfigError(
            f"the loop option {given[0]} is the episode's to give (each run gets the cluster's "
            "devices and an empty checkpoint folder of its own): drop it from the options"
        )


class LoopFaultController(FaultController):
    """The schedule's faults, triggered by what the observer records of the loop.

    ``time=S`` counts from this episode's start: a fault-free run of the same loop may have
    run on the same cluster (and clock) before.
    """

    triggers: ClassVar[dict[str, str]] = LOOP_TRIGGERS
    clock_event: ClassVar[str] = "batch"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.time_origin = self.cluster.clock.time()
        self._armed: str | None = None  # the raise_error armed last, until the episode ends
        self._in_callback: str | None = None  # a callback_error armed for one callback call
        self._unmet: list[str] = []  # callback errors the callback never met

    def on_event(self, event: Event) -> None:
        if event["kind"] in SAVE_EVENTS and not self._firing:
            self._counts["save"] = self._counts.get("save", 0) + 1
        super().on_event(event)

    def _due(self, entry: ScheduledFault, event: Event) -> bool:
        if entry.at.kind == "save":  # a save on any path: Snapshotter, CheckpointManager, v1...
            return event["kind"] in SAVE_EVENTS and self._counts["save"] == entry.at.value
        return super()._due(entry, event)

    def _inject(self, entry: ScheduledFault) -> list[str]:
        """``raise_error`` is armed, not raised here: the loop's next use of a device raises
        it, from its computation, where a program error comes from (raised inside the batch
        draw that triggered it, a loop that guards only its step would never see it)."""
        fault = entry.fault
        if isinstance(fault, RaiseError) and isinstance(self.cluster, ErrorArming):
            self.cluster.arm_error(fault.error)
            if isinstance(fault, CallbackError):  # for one call of the callback only
                self._in_callback, whose = entry.to_text(), "callback"
            else:
                self._armed, whose = entry.to_text(), "loop"
            return [f"armed: the {whose}'s next use of a device raises {fault.code}"]
        return super()._inject(entry)

    def callback_done(self) -> None:
        """A call of the loop's elastic-event callback ended: an error armed for it that it
        never met is taken back (it must not reach the next attempt) and said unfired."""
        text, self._in_callback = self._in_callback, None
        cluster = self.cluster
        if text is not None and isinstance(cluster, ErrorArming) and cluster.disarm_error():
            self._unmet.append(
                f"fault never fired: {text} (armed, but the loop's on_elastic_event_callback "
                "used no device in that call, so it never raised)"
            )

    def _touch_mesh(self, kind: str, slices: list[int]) -> None:
        """A loop's batch uses its mesh: a flapping slice in it fails again (the loop's own
        arrays fail through the device-loss seam, not here)."""
        if kind == "batch" and isinstance(self.cluster, AccessCounting):
            for lost in self.cluster.count_access(slices):
                self.recorder.emit("slice_lost", slice=lost, how="flapping")

    def unfired(self) -> list[str]:
        """One line per fault that never fired: what the observer saw, and what to use."""
        lines = []
        for entry in self.pending:
            at = entry.at
            if at.kind == "time":
                now = self.cluster.clock.time() - self.time_origin
                why = (
                    f"the episode ended at {now:.1f} s on its clock; use a smaller time= or a "
                    "batch= trigger"
                )
            else:
                counted = LOOP_TRIGGERS[at.kind]
                seen = self._counts.get(counted, 0)
                why = {
                    "batch": f"the loop drew {seen} batches the observer can see (from a grain "
                    "iterator or DataLoader, or a generator of its own whose batches carry "
                    "sample ids)"
                    + (
                        "; it draws none it can see: use a save=, attempt= or time= trigger"
                        if not seen
                        else ""
                    ),
                    "save": f"the loop made {seen} Orbax saves"
                    + ("; use a batch=, attempt= or time= trigger" if not seen else ""),
                    "restore_begin": f"the loop restored {seen} times",
                    "attempt_start": f"the loop ran {plural(seen, 'elastic_retry attempt')}"
                    + (
                        "; it runs none through elastic_retry: use a batch= or time= trigger"
                        if not seen
                        else ""
                    ),
                    "elastic_event": "the loop's on_elastic_event_callback was called "
                    + plural(seen, "time")
                    + (
                        " (pass elastic_retry one, by keyword; it is called after each elastic "
                        "event)"
                        if not seen
                        else ""
                    ),
                }[counted]
            lines.append(f"fault never fired: {entry.to_text()} ({why})")
        lines += self._unmet
        if self._armed is not None and isinstance(self.cluster, ErrorArming):
            if self.cluster.disarm_error():  # taken back: it must not reach a later run
                lines.append(
                    f"fault never fired: {self._armed} (armed, but the loop used no device "
                    "after it, in the thread that drew its trigger, so it never raised)"
                )
            self._armed = None
        return lines

    def _fire(self, entry: ScheduledFault) -> None:
        if entry.fault.kind == "preemption" and not LoopObserver.handles_sigterm():
            # SIGTERM's default action ends the loop's process at once: what a preemption does
            # to it then (a restart of the Pod) is not acted out, so the fault is not judged.
            self.pending.remove(entry)
            self.recorder.emit(
                "fault",
                fault=entry.fault.to_json(),
                text=entry.to_text(),
                description=entry.fault.describe(),
                raised=(
                    "not injected: the loop installs no SIGTERM handler, so a preemption notice "
                    "would end its process at once; a restart after that is not acted out"
                ),
            )
            return
        super()._fire(entry)


def load_loop(spec: str, flag: str = "loop") -> Callable[..., Any]:
    """``pkg.module:function`` (or ``path/to/file.py:function``) -> the function.

    Whatever loading the user's module raises (a syntax error, an exception at import, a
    binary file) comes back as one line naming the file and line, never a traceback, and the
    argument it came in as (``flag``: ``loop=`` of ``chaos.run`` and ``play``, or an option).
    """
    shown = spec if len(spec) <= 120 else spec[:120] + "..."
    how = "write MODULE:FUNCTION, for example pathways_chaos.harness.reference.user_loop:main"
    _, sep, attr = spec.rpartition(":")
    if not spec.strip():
        raise ChaosConfigError(f"{flag} is empty: {how} (or leave the option out)")
    try:
        if not sep:
            raise ValueError("no colon")
        if not attr or not spec.rpartition(":")[0]:
            raise ValueError("no module or no name")
        loop = load_name(spec, "pathways_chaos_loop_")
    except (Exception, SystemExit, KeyboardInterrupt) as error:  # anything it does at import
        said, fix = said_at_its_line(error), _fix(error, spec, how)
        raise ChaosConfigError(f"{flag}={shown!r} cannot be loaded ({said}): {fix}") from None
    if inspect.isclass(loop) or not callable(loop):
        what = "a class" if inspect.isclass(loop) else f"a {type(loop).__name__}"
        raise ChaosConfigError(
            f"{flag}={shown!r} is {what}, not a function: name the function that runs "
            "the training (it takes keyword options and returns the final state)"
        )
    return loop


def _fix(error: BaseException, spec: str, how: str) -> str:
    """What to do about a loop that did not load: a module that was found and raised while
    being imported is not a spelling problem."""
    module = spec.rpartition(":")[0]
    if isinstance(error, ValueError) and str(error) in ("no colon", "no module or no name"):
        return how
    if isinstance(error, ModuleNotFoundError) and error.name and module.startswith(error.name):
        return (
            "no such module here: check its name and that its folder is importable "
            "(or give FILE.py:FUNCTION)"
        )
    if isinstance(error, AttributeError):
        return "name a function the module defines (MODULE:FUNCTION)"
    if isinstance(error, FileNotFoundError) or str(error).startswith("no such file"):
        return "check the file's path (relative to the folder the command or pytest runs in)"
    return "the module raised while it was imported: fix the line named, then run again"


def said_at_its_line(error: BaseException) -> str:
    """An exception as one line, with the file and line it came from when it has one."""
    import traceback

    if isinstance(error, SyntaxError):
        return f"SyntaxError: {error.msg} at {error.filename}:{error.lineno}"
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    text = text if len(text) <= 160 else text[:160] + "..."
    frames = traceback.extract_tb(error.__traceback__)
    ours = (__file__, user_modules.__file__)
    own = [f for f in frames if "importlib" not in f.filename and f.filename not in ours]
    if own:
        text += f" at {own[-1].filename}:{own[-1].lineno}"
    return text


class ExpectedSliceErrors(logging.Filter):
    """Holds back pathwaysutils' log records of the slice-down errors the episode injected
    (each logged at ERROR with its traceback, as if the run failed) and counts them; the
    verdict says how many were retried. Off with ``-v``: then every record is shown."""

    LOGGERS = ("pathwaysutils", "pathwaysutils.elastic.manager", "pathwaysutils.elastic.elastic")

    def __init__(self) -> None:
        super().__init__()
        self.held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        text = f"{record.getMessage()} {error or ''}"
        if "pathways-chaos fake" in text or "Elastic event" in text or "slice" in text.lower():
            self.held += 1
            return False
        return True

    def __enter__(self) -> ExpectedSliceErrors:
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


class LoopExited(Exception):
    """The loop called ``sys.exit`` with a failure code (``sys.exit(0)`` is a return of
    ``None``): a failed run naming the line (an exit from the process
    itself, ``os._exit`` or a signal, ends the episode's child, which its parent names)."""


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
    named = {
        name
        for name, p in parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    unknown = sorted(set(options) - named)
    if unknown and not takes_any:  # its TypeError would read as the loop's own crash
        raise ChaosConfigError(
            f"the loop {getattr(loop, '__qualname__', repr(loop))}() takes no option "
            f"{', '.join(unknown)} (it takes {', '.join(sorted(named)) or 'no keyword argument'}):"
            " fix the option's name, or drop it"
        )
    out = {k: v for k, v in provided.items() if takes_any or k in parameters}
    out.update(options)
    missing = [
        name
        for name, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and name not in out
    ]
    if missing:
        raise ChaosConfigError(
            f"the loop {getattr(loop, '__qualname__', repr(loop))}() needs "
            f"{', '.join(missing)}, which nothing passes: give "
            f"{'it a default' if len(missing) == 1 else 'them defaults'}, or pass "
            f"{'it' if len(missing) == 1 else 'them'} as the loop's options "
            f"(chaos.run(..., {missing[0]}=...), or pathways-chaos replay "
            f"--option {missing[0]}=...)"
        )
    return out


class LoopWorkload(Workload[Any]):
    """A user's loop: a run that a preemption notice ended (returning ``None``) runs again."""

    caught: ClassVar[tuple[type[BaseException], ...]] = (Exception, SystemExit)
    #: A deadline passed between runs propagates, as it always has for a loop.
    deadline_ends_episode: ClassVar[bool] = False

    def __init__(
        self,
        cluster: ClusterBackend,
        loop: Callable[..., Any],
        schedule: Schedule,
        options: dict[str, Any],
        checkpoint_dir: str | Path | None,
        step_seconds: float,
        settings: tuple[bool, bool, bool, Deadline | None],
    ) -> None:
        self.cluster, self.loop, self.schedule, self.options = cluster, loop, schedule, options
        self.checkpoint_dir, self.step_seconds = checkpoint_dir, step_seconds
        self.lineage, self.digests, self.show_library_logs, self.deadline = settings
        self.name = self.subject = loop_name(loop)
        self.held = ExpectedSliceErrors()
        self.arguments: dict[str, Any] = {}
        self.faults: LoopFaultController | None = None
        self.observer: LoopObserver | None = None
        self.previous: Any = None
        self.recorder: Recorder | None = None
        self.preemptions = 0

    def refuse(self) -> None:
        """Nothing to refuse here: every trigger a schedule can hold is one a loop's observer
        counts, and a slice outside the cluster was refused before the episode."""

    def start_fields(self) -> dict[str, Any]:
        return {"loop": self.name, "options": {k: repr(v) for k, v in self.options.items()}}

    def begin(self, recorder: Recorder) -> None:
        provided: dict[str, Any] = {"devices": list(self.cluster.devices)}
        if self.checkpoint_dir is not None:
            provided["checkpoint_dir"] = str(self.checkpoint_dir)
        self.arguments = loop_arguments(self.loop, provided, self.options)
        self.previous = signal.getsignal(signal.SIGTERM)
        self.faults = LoopFaultController(self.schedule, self.cluster, recorder, self.step_seconds)
        self.recorder = recorder

    def enter(self, stack: contextlib.ExitStack) -> None:
        assert self.faults is not None and self.recorder is not None  # set by begin()
        stack.enter_context(contextlib.nullcontext() if self.show_library_logs else self.held)
        stack.enter_context(self.faults)
        stack.enter_context(
            episode_deadline(self.cluster.clock, self.deadline, cluster=self.cluster)
        )
        observer = LoopObserver(
            self.recorder, self.cluster, lineage=self.lineage, digests=self.digests
        )
        observer.values_dir = values_beside(self.recorder.path)
        self.observer = stack.enter_context(observer)
        stack.enter_context(reporting(self.recorder, lambda: observer.run))
        self.faults.on_raised = observer.slice_error
        observer.on_callback_end = self.faults.callback_done

    def _preemptions(self) -> int:
        assert self.faults is not None
        return sum(1 for f in self.faults.fired if f.fault.kind == "preemption")

    def start(self, index: int) -> Callable[[], Any]:
        assert self.observer is not None  # entered by enter()
        self.observer.begin_run(index, self.name)
        self.preemptions = self._preemptions()
        return self._run

    def _run(self) -> Any:
        try:
            return self.loop(**self.arguments)
        except SystemExit as done:
            if done.code in (None, 0):  # a job's main ending in success (or after its
                return None  # preemption checkpoint), as a process exit would: it returned nothing
            raise

    def failed(self, error: BaseException) -> BaseException:
        assert self.observer is not None
        if isinstance(error, SystemExit):
            error = LoopExited(f"the loop called sys.exit({error.code!r})").with_traceback(
                error.__traceback__
            )
        self.observer.end_run("failed", error=error)
        return error

    def after_run(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)

    def again(self, result: Any) -> bool:
        assert self.observer is not None
        if self._preemptions() > self.preemptions and result is None:
            self.observer.end_run("suspended")
            return True
        self.observer.end_run("completed", result)
        return False

    def close(self, recorder: Recorder) -> list[str]:
        assert self.faults is not None
        return _close_episode(recorder, self.held.held, self.faults)


_scratch_dir: tempfile.TemporaryDirectory[str] | None = None
_scratch_lock = threading.Lock()  # episodes side by side (a scenario pool's threads)


def scratch() -> str:
    """One folder per process for the logs of episodes given no log path (a search's many):
    their value files must outlive the ``Outcome`` (a cached baseline is judged against
    later); removed when the process exits."""
    global _scratch_dir
    with _scratch_lock:
        if _scratch_dir is None:
            _scratch_dir = tempfile.TemporaryDirectory(prefix="pathways-chaos-episodes-")
        return _scratch_dir.name


def values_beside(log_path: Path | None) -> Path:
    """Where a run's final state's values go, never into the log: beside it, or for a log
    kept only in memory, a folder that lives as long as this process."""
    if log_path is not None:
        return values_folders(log_path)[1]
    return Path(tempfile.mkdtemp(prefix="values-", dir=scratch()))


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
    lineage: bool = True,
    show_library_logs: bool = False,
    deadline: Deadline | None = None,
    digests: bool = False,
) -> EpisodeResult:
    """Runs the loop under the schedule; a run that a preemption notice ended runs again.

    ``lineage=False`` runs without the lineage seam (the judges that follow the chain say
    "not judged"); ``digests`` puts a digest of each leaf in every save and restore event;
    ``show_library_logs`` lets pathwaysutils log the injected errors; ``deadline`` bounds the
    episode in fake-clock and wall time (the session's default if ``None``): a loop that never
    returns ends in a failed run saying what it waited for.
    """
    schedule = schedule or Schedule()
    settings = (lineage, digests, show_library_logs, deadline)
    workload = LoopWorkload(
        cluster, loop, schedule, options or {}, checkpoint_dir, step_seconds, settings
    )
    runner = EpisodeRunner(
        workload, cluster, schedule, log_path=log_path, max_runs=max_runs, listeners=listeners
    )
    return runner.run()


def _close_episode(recorder: Recorder, held: int, controller: FaultController) -> list[str]:
    """The episode's last events before its end (library logs held, faults that never fired);
    the faults that never fired, one line each."""
    if held:
        recorder.emit("library_logs_held", count=held)
    unfired = controller.unfired()
    for line in unfired:
        recorder.emit("fault_unfired", text=line)
    return unfired
