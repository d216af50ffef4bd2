"""One run of a user's loop in a process of its own: the child side of a supervised episode.

``python -m pathways_chaos.harness.episodes.child SPEC`` hosts the fake cluster, the observer
and the loop; it appends to the episode's log and ends it with a ``child_exit`` marker, so a log
without one is known to be cut short. A preemption's next run is the next child: it reads the
log so far and goes on from the ``run_handoff`` event the previous run wrote (the schedule's
faults still to come, the trigger counts, the clock), sharing nothing else but the checkpoint
folder, as a restarted Pod on GKE. The parent (``supervisor``) holds the deadline and the judges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.kube.child_bridge import BridgeBinding

#: The parent's signal for "dump every thread's stack now" (faulthandler, in C: works while
#: the loop blocks in a system call).
STACK_SIGNAL = signal.SIGUSR1
#: The stack file's first line, before the main thread's id as faulthandler writes it.
MAIN_THREAD_LINE = "main thread "
#: The line after the main thread's whole stack: a section read before it is not yet whole.
WHOLE_STACK_END = "end of the main thread's stack"
#: Frames of the main thread's whole stack kept (the innermost, and the outermost 10).
WHOLE_STACK_FRAMES = 500

#: Modules every child imports before its ready marker, and the fork server once for all
#: (none initialises a backend).
PRELOAD = (
    "numpy",
    "jax",
    "jax.numpy",
    "jax.sharding",
    "orbax.checkpoint",
    "grain",
    "pathwaysutils",
    "pathwaysutils.elastic.manager",
    "pathways_chaos.harness.episodes.child",
    "pathways_chaos.harness.episodes.loop_episode",
    "pathways_chaos.harness.engine.fake_cluster",
    "pathways_chaos.harness.blackbox.observer",
)


@dataclasses.dataclass(kw_only=True)
class ChildFiles:
    """What every child needs whatever it runs: its devices, its log and run number, where its
    stacks and fatal calls are written, and the parent's ``sys.path``."""

    topology: str
    log_path: str
    run: int
    stack_file: str
    witness_file: str
    sys_path: list[str]
    #: ``--cluster``: the slices are bridged to the session's JobSet (``harness/kube``).
    kube: BridgeBinding | None = None

    def run_in_child(self) -> None:
        """The child's work, once the process is set up (``main``)."""
        raise NotImplementedError


@dataclasses.dataclass(kw_only=True)
class ChildSpec(ChildFiles):
    """What one child run of a loop needs; written by the parent, pickled (it may carry the
    test's own callable, which the child imports to unpickle)."""

    loop: str | None  # MODULE:FUNCTION or FILE.py:FUNCTION
    loop_pickle: bytes | None  # or the callable itself, pickled by reference
    name: str
    options_pickle: bytes
    schedule: str
    clock: str
    values_dir: str
    checkpoint_dir: str | None
    max_runs: int
    step_seconds: float
    lineage: bool
    show_library_logs: bool
    digests: bool
    fake_s: float | None
    #: Only load the loop and say whether it loads (a command's check of a spec, done where
    #: the loop's module may run).
    probe: bool = False
    #: Files loaded as modules in the parent under made-up names the pickles refer to.
    preload: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Modules the pickles name that the parent imported from files no ``sys.path`` entry
    #: finds (pytest's ``--import-mode=importlib`` test modules): loaded under the same name.
    modules: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: The options as the log shows them (``repr``, made by the parent).
    options_shown: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Slices down before the episode starts (the test's own; on --cluster, acted out by it).
    down: list[int] = dataclasses.field(default_factory=list)

    def run_in_child(self) -> None:
        run_child(self)


def main(argv: list[str]) -> None:
    _fresh_signals()
    spec: ChildFiles = pickle.loads(Path(argv[0]).read_bytes())
    for entry in reversed(spec.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    # This child's own file, emptied: one a reused log folder kept from an earlier session
    # would name another process's main thread and another line.
    stacks = open(spec.stack_file, "w", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    _follow_main_thread(stacks)
    faulthandler.enable(file=stacks, all_threads=True)
    faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True, chain=True)
    from pathways_chaos.harness.episodes import exit_witness, thread_origins

    exit_witness.install(spec.witness_file)
    thread_origins.install()
    from pathways_chaos.harness.engine import compilation_cache
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices

    request_cpu_devices(SliceTopology.parse(spec.topology).device_count)
    _preload()
    with contextlib.suppress(Exception):  # a cache it may not use is only slower
        compilation_cache.enable()
    spec.run_in_child()
    # A normal exit: atexit runs and non-daemon threads are joined; a thread the loop left
    # running keeps the process alive, which the parent sees and names.
    sys.exit(0)


def _follow_main_thread(stacks: Any) -> None:
    """faulthandler names threads only by id and keeps a thread's innermost 100 frames, which
    a loop stuck in JAX's lowering or deep in its own calls outruns. So the stack file starts
    with the main thread's id, and on ``STACK_SIGNAL`` (chained after faulthandler's dump, which
    works even while the loop blocks in C) the main thread adds its whole stack as soon as it
    runs Python again, in faulthandler's layout."""
    ident = f"{threading.get_ident():#018x}"
    stacks.write(f"{MAIN_THREAD_LINE}{ident}\n")
    stacks.flush()

    busy = threading.Lock()

    def whole_stack(signum: int, frame: Any) -> None:
        # Runs inside the loop's code: it must never raise there, nor run twice at once. The
        # innermost frames are the ones that say where; past a cap the outermost few follow.
        if not busy.acquire(blocking=False):
            return
        try:
            frames = []
            while frame is not None:
                code = frame.f_code
                frames.append(
                    f'  File "{code.co_filename}", line {frame.f_lineno} in {code.co_name}'
                )
                frame = frame.f_back
            if len(frames) > WHOLE_STACK_FRAMES:
                frames = [*frames[: WHOLE_STACK_FRAMES - 10], "  ...", *frames[-10:]]
            header = f"Thread {ident} in full (most recent call first):"
            stacks.write("\n".join([header, *frames, WHOLE_STACK_END]) + "\n")
            stacks.flush()
        except BaseException:
            pass
        finally:
            busy.release()

    signal.signal(STACK_SIGNAL, whole_stack)


#: Signals a fresh ``python train.py`` handles as the default says, whatever its parent ignored.
_DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2, signal.SIGALRM)


def _fresh_signals() -> None:
    """The loop starts with the signal handling of a process started from a clean shell, not
    the judging process's: an ignored disposition and a blocked mask are inherited through fork
    and exec (a CI shell's background job ignores SIGINT, and Python then leaves it ignored), so
    a loop's own ``raise_signal(SIGINT)`` would otherwise do nothing there and raise
    KeyboardInterrupt on a laptop."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for number in _DEFAULT_SIGNALS:
        signal.signal(number, signal.SIG_DFL)


def _preload() -> None:
    """What a forked child has from its server: a spawned one imports it before its ready
    marker, so the loop's wall time is the same however the child started."""
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def run_child(spec: ChildSpec) -> None:
    """One run, logged; the toolkit's own failure is logged as ``toolkit_error``."""
    from pathways_chaos.harness.engine.recorder import Recorder

    prior, handoff = prior_run(spec)
    recorder = Recorder(spec.log_path, clock=run_clock(spec.clock, handoff), resume=prior)
    try:
        status = _one_run(spec, recorder, handoff)
    except BaseException as error:  # ours: the loop's errors were caught inside
        toolkit_error(recorder, spec.run, error)
        status = "toolkit_error"
    end_marker(recorder, spec.run, status)


def one_off(spec: ChildFiles, body: Callable[[Any], None]) -> None:
    """A one-off child's work (an answer, a replay: no next run): its log, its ready marker,
    ``body(recorder)`` (which catches the subject's own errors), a failure of the toolkit's
    logged as ``toolkit_error``, and the end marker."""
    from pathways_chaos.harness.engine.recorder import Recorder

    recorder = Recorder(spec.log_path)
    status = "ended"
    try:
        recorder.emit("child_ready", run=spec.run)
        body(recorder)
    except BaseException as error:  # ours: the subject's errors are caught inside ``body``
        toolkit_error(recorder, spec.run, error)
        status = "toolkit_error"
    end_marker(recorder, spec.run, status)


def toolkit_error(recorder: Any, run: int, error: BaseException) -> None:
    """The toolkit could not run the subject: its own bug, or (``config``) the setup's, such
    as a ``--cluster`` JobSet that is not running, said as the one line it is."""
    from pathways_chaos.harness.errors import ChaosConfigError

    config = isinstance(error, ChaosConfigError)
    recorder.emit(
        "toolkit_error",
        run=run,
        error=str(error)[:500] if config else f"{type(error).__name__}: {error}"[:500],
        traceback="".join(traceback.format_exception(error))[-8000:],
        **({"config": True} if config else {}),
    )


def end_marker(recorder: Any, run: int, status: str) -> None:
    """The child's last event (``child_exit``): a log without it was cut short."""
    recorder.emit(
        "child_exit",
        run=run,
        status=status,
        **lingering_threads(),
        peak_rss_bytes=peak_rss_bytes(),
    )
    recorder.close()


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory (``VmHWM``), or None where Linux's ``/proc`` is not."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def lingering_threads() -> dict[str, Any]:
    """Non-daemon threads still running once the run is over: each keeps the process from
    exiting. ``threads`` names them, with who started each (``thread_origins``) and the innermost
    frame of the loop's own code it runs, where it has one; ``library_threads`` lists the
    installed libraries (by top-level package) that started a thread now running no line of the
    loop's, so a wait left by a library (orbax's, after a save that raised; the idle worker of a
    pool it made) is not blamed on the loop. A thread the loop started is the loop's whatever it
    runs; one of unknown start in the standard library only counts as the loop's."""
    import threading

    from pathways_chaos.harness.blackbox.values import installed_package, is_plumbing
    from pathways_chaos.harness.episodes import thread_origins

    frames = sys._current_frames()
    out, libraries, own = [], [], 0
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon or not thread.is_alive():
            continue
        where, library, frame = "", None, frames.get(thread.ident or -1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not is_plumbing(filename):
                where = f" at {filename}:{frame.f_lineno} in {frame.f_code.co_name}"
                break
            library = library or installed_package(filename)  # the innermost library's
            frame = frame.f_back
        origin = thread_origins.of(thread)
        if origin is not None:
            library = origin.library
        target = getattr(thread, "_target", None)
        what = f", running {getattr(target, '__qualname__', target)!s}" if target else ""
        started = f", started by {origin.library or 'the loop'} at {origin.where}" if origin else ""
        out.append(f"{thread.name!r}{what}{where}{started}")
        if where or library is None:  # the loop's line or start, or the standard library's only
            own += 1
        else:
            libraries.append(library)
    return {
        "threads": out,
        "threads_in_loop_code": own,
        "library_threads": sorted(set(libraries)),
    }


def _one_run(spec: ChildSpec, recorder: Any, handoff: dict[str, Any] | None) -> str:
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.deadline import Deadline
    from pathways_chaos.harness.episodes.loop_episode import LoopWorkload

    if spec.probe:  # ready first: a module that ends the process at import is the loop's
        recorder.emit("child_ready", run=spec.run)
        return "loaded" if _load(spec, recorder) is not None else "unloadable"
    schedule = parse_schedule(spec.schedule)
    cluster = episode_cluster(spec, recorder.clock, handoff, spec.down if spec.run == 1 else ())
    if spec.run == 1:
        recorder.emit(
            "episode_start",
            topology=spec.topology,
            schedule=schedule.to_text(),
            clock=spec.clock,
            loop=spec.name,
            options=spec.options_shown,
            isolation="child",
        )
    # Started before the ready marker: a bridged cluster waits there for the JobSet's slices,
    # which is start-up, not the loop's time (a JobSet not running is the setup's one line).
    with cluster:
        # Everything before this line is the toolkit's start-up; the loop's wall time starts here.
        recorder.emit("child_ready", run=spec.run)
        loop = _load(spec, recorder)
        if loop is None:
            return "unloadable"
        options: dict[str, Any] = pickle.loads(spec.options_pickle)
        deadline = Deadline(fake_s=spec.fake_s, wall_s=None)
        settings = (spec.lineage, spec.digests, spec.show_library_logs, deadline)
        workload = LoopWorkload(
            cluster, loop, schedule, options, spec.checkpoint_dir, spec.step_seconds, settings
        )
        workload.name = spec.name
        again = False
        error: BaseException | None = None
        if spec.run == 1:  # the test's own down slices (a next run has them in its handoff)
            cluster.go_on_from({"down": [[index, "DATA_LOSS", None] for index in spec.down]})
        workload.begin(recorder)
        with contextlib.ExitStack() as stack:
            workload.enter(stack)
            assert workload.observer is not None and workload.faults is not None
            workload.observer.values_dir = Path(spec.values_dir)
            if handoff is not None:
                resume(workload, schedule, handoff)
            run = workload.start(spec.run)
            try:
                result = run()
            except BaseException as e:  # every ending of the loop's own code is a failed run
                error = workload.failed(e)
            finally:
                workload.after_run()
            if error is None:
                again = workload.again(result)
        if again and spec.run < spec.max_runs:
            hand_off(workload, schedule, recorder)
            return "suspended"
        workload.close(recorder)
        recorder.emit(
            "episode_end", error=None if error is None else f"{type(error).__name__}: {error}"
        )
    return "ended"


def episode_cluster(
    spec: ChildFiles, clock: Any, handoff: dict[str, Any] | None, down: Any = ()
) -> FakeCluster:
    """This run's cluster, not started: a fake of the episode's shape, or (``--cluster``) the
    fake bridged to the session's JobSet, not waiting for the slices an earlier run, or the
    test (``down``), left down."""
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    topology = SliceTopology.parse(spec.topology)
    if spec.kube is None:
        return FakeCluster(topology, clock=clock)
    left = ((handoff or {}).get("cluster") or {}).get("down") or []
    stays_down = {int(index) for index, _, polls in left if polls is None} | set(down)
    return spec.kube.cluster(topology, clock, stays_down)


def _load_as(name: str, file: str) -> None:
    """Loads ``file`` as module ``name`` unless the name imports as it is; parent packages no
    path finds become namespace stand-ins on the file's folders (as pytest's importlib mode)."""
    import importlib
    import importlib.util
    import types

    with contextlib.suppress(ImportError):
        importlib.import_module(name)
        return
    parts = name.split(".")
    folder = Path(file).parent
    for depth in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:depth])
        if parent not in sys.modules:
            stand_in = types.ModuleType(parent)
            stand_in.__path__ = [str(folder)]
            sys.modules[parent] = stand_in
        folder = folder.parent
    found = importlib.util.spec_from_file_location(name, file)
    if found is None or found.loader is None:
        raise ImportError(f"cannot load {file} as {name}")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)


def load_pickled(
    data: bytes, preload: list[tuple[str, str]], modules: list[tuple[str, str]]
) -> Any:
    """Unpickles what the parent sent by reference, after loading the files of the modules it
    names that this process's ``sys.path`` would not find (``loop_reference``)."""
    from pathways_chaos.harness.engine.user_modules import import_file

    for prefix, file in preload:
        import_file(Path(file), prefix)
    for name, file in modules:
        _load_as(name, file)
    return pickle.loads(data)


def _load(spec: ChildSpec, recorder: Any) -> Any:
    """The loop, or None after logging one line on why it cannot be loaded."""
    from pathways_chaos.harness.episodes.loop_episode import load_loop
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        if spec.loop_pickle is not None:
            return load_pickled(spec.loop_pickle, spec.preload, spec.modules)
        assert spec.loop is not None
        return load_loop(spec.loop)
    except ChaosConfigError as error:
        recorder.emit("loop_unloadable", message=str(error))
    except BaseException as error:  # unpickling imports the loop's module: anything goes
        recorder.emit("loop_unloadable", message=f"{type(error).__name__}: {error}"[:500])
    return None


def hand_off(workload: Any, schedule: Any, recorder: Any) -> None:
    """What the next run's process needs to go on: the fault controller's, the fake cluster's
    and (a loop's) the observer's state, and the clock."""
    observer = getattr(workload, "observer", None)
    recorder.emit(
        "run_handoff",
        **workload.faults.handoff(list(schedule)),
        clock=recorder.clock.time(),
        cluster=workload.cluster.handoff(),
        **(observer.handoff() if observer is not None else {}),
    )


def resume(workload: Any, schedule: Any, handoff: dict[str, Any]) -> None:
    """The next run goes on from the previous run's ``hand_off``."""
    workload.faults.go_on_from(list(schedule), handoff)
    workload.cluster.go_on_from(handoff.get("cluster") or {})
    observer = getattr(workload, "observer", None)
    if observer is not None:
        observer.go_on_from(handoff)


def prior_run(spec: ChildFiles) -> tuple[list[Any] | None, dict[str, Any] | None]:
    """A next run's log so far and the ``run_handoff`` it goes on from (None, None in run 1)."""
    from pathways_chaos.harness.engine.recorder import LogTail

    prior = LogTail(spec.log_path).read(final=True) if spec.run > 1 else None
    handoff = next((e for e in reversed(prior or []) if e["kind"] == "run_handoff"), None)
    return prior, handoff


def run_clock(kind: str, handoff: dict[str, Any] | None) -> Any:
    """The run's clock: a fake one goes on from where the previous run's stopped."""
    from pathways_chaos.harness.engine.clock import FakeClock, make_clock

    if kind == "fake":
        return FakeClock(start=float(handoff["clock"]) if handoff else 0.0)
    return make_clock(kind)


if __name__ == "__main__":
    main(sys.argv[1:])
