"""Watching one child process of a supervised episode: the parent's side of the boundary.

A child (a loop's run, a trainer's episode, a replay) is started from a pickled spec by the fork
server, or spawned; the parent follows the log it writes (listeners see each event), and holds
the limits: the wall deadline, counted from the child's ``child_ready`` marker (a stack dump of
every thread, then SIGKILL), memory and output caps. However the child ends (its end marker, an
exit code, a signal, a limit, a thread that keeps it alive), the log ends with what happened, in
one line naming the cause and, where there is one, the subject's own frame; the child's whole
process tree is ended and anything left is named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine import process_tree
from pathways_chaos.harness.engine.clock import Clock, FakeClock, RealClock
from pathways_chaos.harness.engine.deadline import (
    Deadline,
    EpisodeDeadlineExceeded,
    UnsatisfiableWait,
    default_deadline,
)
from pathways_chaos.harness.engine.recorder import Event, LogTail, Recorder, set_aside
from pathways_chaos.harness.episodes import exit_witness, fork_server
from pathways_chaos.harness.episodes.child import STACK_SIGNAL, ChildFiles
from pathways_chaos.harness.episodes.child_limits import GIB, MIB, ChildLimits, default_limits
from pathways_chaos.harness.episodes.stack_dump import loop_frame, main_stack
from pathways_chaos.harness.errors import ChaosConfigError, ChaosError
from pathways_chaos.harness.judging.final_values import seal


class LoopProcessEnded(ChaosError):
    """The loop's process ended before its run did (an exit, a signal, a limit)."""


class LoopUnloadable(ChaosConfigError):
    """The child could not import the loop (or trainer): one line, the user's to fix."""


class ToolkitFailed(ChaosError):
    """The toolkit itself failed in the child: a bug in pathways-chaos, not in the loop."""


class SetupFailed(ChaosConfigError):
    """The child could not set the episode up for a reason of the setup's, said in one line
    (a ``--cluster`` JobSet that is not running): neither the loop's failure nor our bug."""


#: A running child: spawned with ``python -m`` or forked by the fork server.
Child = subprocess.Popen[bytes] | fork_server.ForkedChild


@dataclasses.dataclass
class Ending:
    """How one child ended, as the parent saw it."""

    code: int | None
    cause: str | None = None  # None: it ended on its own after its end marker
    where: str | None = None
    left: list[str] = dataclasses.field(default_factory=list)
    deadline: bool = False
    toolkit: bool = False  # ended by the toolkit's own failure, before the loop was loaded
    #: Why whether it exits could not be judged (only a library's threads kept it alive).
    exit_not_judged: str | None = None


class ChildWatch:
    """Runs an episode's children one after another and watches each; ``spent_s`` is the wall
    time their subjects have had, start-ups left out (the wall deadline is over all of them)."""

    def __init__(
        self,
        log_path: Path,
        work: Path,
        *,
        deadline: Deadline,
        limits: ChildLimits,
        listeners: Iterable[Callable[[Event], None]] = (),
        subject: str = "loop",
    ) -> None:
        self.log_path, self.work = log_path, work
        self.deadline, self.limits = deadline, limits
        self.listeners = list(listeners)
        #: What the messages call the code under test ("the loop's process ...").
        self.subject = subject
        self.spent_s = 0.0
        self._ready_at: float | None = None
        self._foreign_said = 0

    def runs(
        self, spec: Callable[[int], ChildFiles], max_runs: int, tail: LogTail, events: list[Event]
    ) -> None:
        """An episode's runs, each in a child of its own (``spec(run)``): the next one while
        the last was suspended (a preemption's next run is a new process), at most
        ``max_runs``; the first that ends otherwise, or is ended, is the last."""
        for run in range(1, max_runs + 1):
            ending = self.child(spec(run), tail, events)
            status = last_exit_status(events, run)
            self.log_child_end(events, run, ending, tail)
            if ending.cause is not None or status != "suspended":
                break

    def one(self, spec: ChildFiles) -> list[Event]:
        """A one-off child (a probe, a replay, an adapter's or a trainer's answer) run to its
        end: its events, its ending logged among them (``error_of`` reads it)."""
        with contextlib.closing(LogTail(Path(spec.log_path))) as tail:
            events: list[Event] = []
            ending = self.child(spec, tail, events)
            self.log_child_end(events, spec.run, ending, tail)
        return events

    def child(self, spec: ChildFiles, tail: LogTail, events: list[Event]) -> Ending:
        """Runs one child from ``spec`` to its end, following the log; how it ended."""
        run = spec.run
        if run == 1:  # a new episode (or replay, or probe): an old log there is not part of it
            set_aside(Path(spec.log_path))
        spec_file = self.work / f"spec-{run}.pkl"
        write_private(spec_file, pickle.dumps(spec))
        output = self.work / f"output-{run}.txt"
        token = process_tree.new_token()
        env = dict(os.environ, **{process_tree.TOKEN_VAR: token})
        env.setdefault("JAX_PLATFORMS", "cpu")
        with output.open("wb") as out:
            child: Child | None = fork_server.start_child(str(spec_file), str(output), env, token)
            if child is None:
                child = subprocess.Popen(
                    [sys.executable, "-m", "pathways_chaos.harness.episodes.child", str(spec_file)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
        self._ready_at = None
        try:
            ending = self._watch(child, run, tail, events, output, spec)
        finally:
            if self._ready_at is not None:
                self.spent_s += time.monotonic() - self._ready_at
            left = process_tree.end_all(token, child.pid)
            with contextlib.suppress(Exception):
                child.wait(timeout=5)
        events += tail.read()
        ending.left = left
        return self._flooded(ending, output)  # printed fast and ended before the next look

    def _watch(
        self,
        child: Child,
        run: int,
        tail: LogTail,
        events: list[Event],
        output: Path,
        spec: ChildFiles,
    ) -> Ending:
        wall = self.deadline.wall_s
        marker_at: float | None = None
        launched, next_look = time.monotonic(), 0.0
        while True:
            code = child.poll()
            self._feed(tail.read(), events)
            if self._ready_at is None and _child_ready(events, run):
                self._ready_at = time.monotonic()
            if marker_at is None and last_exit_status(events, run) is not None:
                marker_at = time.monotonic()
            if code is not None:
                self._feed(tail.read(), events)
                if last_exit_status(events, run) is not None:
                    return Ending(code)
                if self._ready_at is None:  # only the toolkit's code had run, or the log went
                    return self._ended_unready(code, spec)
                return self._died(code, spec, events, lost=getattr(child, "status_lost", False))
            now = time.monotonic()
            if marker_at is not None and now - marker_at > self.limits.exit_grace_s:
                where = self._stacks_then_kill(child, spec)
                marker = _exit_marker(events, run)
                threads, libraries = _threads_named(marker), _library_threads(marker)
                if threads and libraries:
                    return Ending(None, where=where, exit_not_judged=self._library_wait(libraries))
                return Ending(
                    None,
                    f"the {self.subject}'s process did not exit "
                    f"{self.limits.exit_grace_s:g} s after the run ended: a thread it started is "
                    "still running"
                    f"{': ' + '; '.join(threads[:3]) if threads else _at(where)} (a real job "
                    "would hang instead of exiting: join it, or make it a daemon)",
                    where,
                )
            if self._ready_at is None and now - launched > self.limits.startup_s:
                where = self._stacks_then_kill(child, spec)
                return Ending(
                    None,
                    f"pathways-chaos's child process was not ready to load the {self.subject} "
                    f"{self.limits.startup_s:g} s after it started{_at(where)} (a bug in "
                    "pathways-chaos, or a machine too loaded to import JAX)",
                    where,
                    toolkit=True,
                )
            ran = None if self._ready_at is None else self.spent_s + now - self._ready_at
            if wall is not None and ran is not None and ran > wall and marker_at is None:
                where = self._stacks_then_kill(child, spec) or exit_witness.read(spec.witness_file)
                return Ending(
                    None,
                    f"the episode passed its wall-time deadline of {wall:g} s: the "
                    f"{self.subject} was {_blocked(where)} (raise it: --chaos-wall-deadline=S "
                    "in pytest, --wall-deadline S on the command line)",
                    where,
                    deadline=True,
                )
            if now >= next_look:
                next_look = now + 0.5
                over = self._over_limit(child, output)
                if over is not None:
                    where = self._stacks_then_kill(child, spec)
                    with contextlib.suppress(OSError):  # what the message says: kept, cut
                        if output.stat().st_size > self.limits.output_bytes:
                            os.truncate(output, self.limits.output_bytes)
                    return Ending(None, over + _at(where), where)
            time.sleep(0.05)

    def _ended_unready(self, code: int, spec: ChildFiles) -> Ending:
        """A child that ended with no event read from it: the toolkit's failure, unless the
        log's path is no longer a file (the subject's code put a folder or a link there)."""
        replaced = _replaced_log(self.log_path)
        if replaced is not None:
            return Ending(code, f"the {self.subject} {replaced}: nothing of its run can be read")
        return Ending(
            code,
            f"pathways-chaos's child process ended (code {code}) before it loaded the "
            f"{self.subject} (a bug in pathways-chaos; its output: "
            f"{self.work}/output-{spec.run}.txt)",
            toolkit=True,
        )

    def _recorder_after(self, events: list[Event], ending: Ending) -> Recorder:
        """The log, to go on with; if the child's code replaced it, the events stay in memory
        and the child's end names what it did."""
        clock = _clock_after(events)
        try:
            return Recorder(self.log_path, clock=clock, resume=list(events))
        except ChaosError:
            replaced = _replaced_log(self.log_path) or "replaced the episode's event log"
            ending.cause = ending.cause or f"the {self.subject} {replaced}"
            return Recorder(None, clock=clock, resume=list(events))

    def _library_wait(self, libraries: list[str]) -> str:
        return (
            f"its process was still running {self.limits.exit_grace_s:g} s after the run ended, "
            f"held only by threads of {', '.join(libraries)} with no line of the "
            f"{self.subject}'s in their stacks (a library's own wait, for example orbax's "
            "after a save that raised, which ends at that library's timeout); pathways-chaos "
            "does not wait that long"
        )

    def _feed(self, new: list[Event], events: list[Event]) -> None:
        for event in new:
            events.append(event)
            for listener in self.listeners:
                listener(event)

    def _over_limit(self, child: Child, output: Path) -> str | None:
        token_pids = [child.pid, *process_tree.descendants(child.pid)]
        used = process_tree.rss_bytes(token_pids)
        if used > self.limits.memory_bytes:
            return (
                f"the {self.subject} used more than {_size(self.limits.memory_bytes)} of memory "
                f"({_size(used)}; raise the cap with --chaos-memory-limit)"
            )
        return self._output_over(output)

    def _flooded(self, ending: Ending, output: Path) -> Ending:
        """Output over the cap once the child's processes are gone: cut, and said if first."""
        over = self._output_over(output)
        if over is None:
            return ending
        with contextlib.suppress(OSError):  # what the message says: kept, cut
            os.truncate(output, self.limits.output_bytes)
        if ending.cause is not None or self._ready_at is None:
            return ending
        return dataclasses.replace(ending, cause=over)

    def _output_over(self, output: Path) -> str | None:
        with contextlib.suppress(OSError):
            if output.stat().st_size > self.limits.output_bytes:
                return (
                    f"the {self.subject} wrote more than {_size(self.limits.output_bytes)} to "
                    f"stdout and stderr (kept, cut, in {output})"
                )
        return None

    def _stacks_then_kill(self, child: Child, spec: ChildFiles) -> str | None:
        """Asks the child for every thread's stack (faulthandler), then ends it; the loop's
        innermost frame in its main thread."""
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(STACK_SIGNAL)
        deadline = time.monotonic() + self.limits.stack_grace_s
        where = None  # until the main thread's section is written (the dump's last, on a
        while time.monotonic() < deadline:  # busy machine not at once), and holds a frame of
            time.sleep(0.05)  # the loop's own or is the main thread's whole stack
            stack = main_stack(spec.stack_file)  # None until a section is written
            where = None if stack is None else stack.where()
            if stack is not None and (stack.whole or stack.own_frame() is not None):
                break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            child.wait(timeout=5)
        return where or loop_frame(spec.stack_file)

    def _died(self, code: int, spec: ChildFiles, events: list[Event], lost: bool) -> Ending:
        """The child ended without its end marker: the exit code or signal, named."""
        witness = exit_witness.read(spec.witness_file)
        if lost:
            return Ending(
                code,
                f"the {self.subject}'s process ended and how is unknown: the fork server that "
                f"started it was killed (did the {self.subject} signal its parent?)"
                f"{_at(witness)}{_last_seen(events)}",
            )
        if witness is not None and witness.startswith("os.exec"):
            how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
            return Ending(
                code,
                f"the {self.subject}'s process replaced itself with another program, which "
                f"then {how}: {witness}{_last_seen(events)} (a Pod's container would run that "
                "program instead of the rest of the job)",
            )
        if code < 0:
            name = _signal_name(-code)
            where = loop_frame(spec.stack_file)
            how = f"was killed by {name}"
            if witness is not None:
                how += f" the {self.subject} sent itself: {witness}"
            elif where is not None:
                how += f" at {where}"
            return Ending(code, f"the {self.subject}'s process {how}{_last_seen(events)}", where)
        if witness is not None and witness.startswith("os._exit"):
            return Ending(
                code,
                f"the {self.subject}'s process exited with code {code}: "
                f"{witness}{_last_seen(events)}",
            )
        return Ending(
            code,
            f"the {self.subject}'s process exited with code {code} before its run ended"
            f"{_at(witness)}{_last_seen(events)} (its output: {self.work}/output-{spec.run}.txt)",
        )

    def log_child_end(self, events: list[Event], run: int, ending: Ending, tail: LogTail) -> None:
        """Appends the parent's own account: the run's end when the child could not write it,
        and what ended the child, with anything it left behind."""
        self._feed(tail.read(final=True), events)  # the child is gone: its last words
        for e in events:  # what its values files hold now, before any later episode runs
            if e["kind"] == "run_end" and e.get("run") == run:
                seal(e)
        recorder = self._recorder_after(events, ending)
        new: list[tuple[str, dict[str, Any]]] = []
        if tail.foreign > self._foreign_said:  # lines no recorder wrote: left unread, said
            count, self._foreign_said = tail.foreign - self._foreign_said, tail.foreign
            new.append(
                ("log_foreign_lines", {"run": run, "count": count, "first": tail.first_foreign})
            )
        ended = last_exit_status(events, run) is not None
        if ending.toolkit and not ended:
            new.append(("toolkit_error", {"run": run, "error": ending.cause}))
        elif ending.cause is not None and not ended:
            error = (
                f"EpisodeDeadlineExceeded: {ending.cause}"
                if ending.deadline
                else f"LoopProcessEnded: {ending.cause}"
            )
            new.append(
                (
                    "run_end",
                    {
                        "run": run,
                        "status": "failed",
                        "error": error,
                        "where": ending.where,
                        "process_end": not ending.deadline,
                    },
                )
            )
            new.append(("episode_end", {"error": error}))
        new.append(
            (
                "child_end",
                {
                    "run": run,
                    "exit_code": ending.code,
                    "cause": ending.cause,
                    "left_behind": ending.left,
                    "after_end": ended,
                    **(
                        {"exit_not_judged": ending.exit_not_judged}
                        if ending.exit_not_judged
                        else {}
                    ),
                },
            )
        )
        for kind, fields in new:
            self._feed([recorder.emit(kind, **fields)], events)
        recorder.close()
        tail.read()  # what was just written, already in ``events``


# -- helpers -----------------------------------------------------------------------------------
def _replaced_log(log: Path) -> str | None:
    """What is at the event log's path if it is no longer a file pathways-chaos writes."""
    try:
        info = os.lstat(log)
    except OSError:
        return None  # not made yet, or removed: the recorder makes it anew
    if stat.S_ISREG(info.st_mode):
        return None
    kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a symlink or special file"
    return f"replaced the episode's event log, which pathways-chaos made, with {kind} ({log})"


def _clock_after(events: list[Event]) -> Clock:
    """The log's clock for the events this process adds after a child: on the fake clock, the
    last time the child's events reached (the wall clock's epoch would read as 1.8e9 s into
    the episode); the wall clock otherwise."""
    fake = any(e.get("clock") == "fake" for e in events if e.get("kind") == "episode_start")
    if not fake:
        return RealClock()
    return FakeClock(start=max((float(e.get("t") or 0.0) for e in events), default=0.0))


def one_off_error(
    child: ChildFiles, work: Path, subject: str, deadline: Deadline | None = None
) -> BaseException | None:
    """Runs a one-off child (an adapter's or a trainer's answer) under ``deadline`` (else the
    default) and the default limits: None, or how its subject failed; a failure of ours is
    raised (``ToolkitFailed``), never the subject's."""
    watch = ChildWatch(
        Path(child.log_path),
        work,
        deadline=deadline or default_deadline(),
        limits=default_limits(),
        subject=subject,
    )
    error = error_of(watch.one(child))
    if isinstance(error, ToolkitFailed):
        raise error
    return error


def write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _exit_marker(events: list[Event], run: int) -> Event | None:
    """The run's ``child_exit`` event (its end marker), if the child wrote it."""
    return next(
        (e for e in reversed(events) if e["kind"] == "child_exit" and e.get("run") == run), None
    )


def last_exit_status(events: list[Event], run: int) -> str | None:
    marker = _exit_marker(events, run)
    return None if marker is None else str(marker.get("status"))


def _threads_named(marker: Event | None) -> list[str]:
    return [str(t) for t in (marker or {}).get("threads") or []]


def _library_threads(marker: Event | None) -> list[str]:
    """The libraries holding the process when every lingering thread is in library code
    (none in the loop's own); empty otherwise."""
    if marker is None or marker.get("threads_in_loop_code", 1):
        return []
    return [str(x) for x in marker.get("library_threads") or []]


def _child_ready(events: list[Event], run: int) -> bool:
    return any(e["kind"] == "child_ready" and e.get("run") == run for e in reversed(events))


def error_of(events: list[Event]) -> BaseException | None:
    unloadable = next((e for e in events if e["kind"] == "loop_unloadable"), None)
    if unloadable is not None:
        return LoopUnloadable(str(unloadable.get("message", "")))
    toolkit = next((e for e in events if e["kind"] == "toolkit_error"), None)
    if toolkit is not None:
        if toolkit.get("config"):  # the setup's (a JobSet not running), not a bug of ours
            return SetupFailed(str(toolkit.get("error", "")))
        return ToolkitFailed(str(toolkit.get("error", "")))
    ends = [e for e in events if e["kind"] == "run_end"]
    failed = ends[-1] if ends and ends[-1].get("status") == "failed" else None
    if failed is None:
        return None
    text = str(failed.get("error") or "")
    kind, _, message = text.partition(": ")
    types: dict[str, type[ChaosError]] = {
        "UnsatisfiableWait": UnsatisfiableWait,
        "EpisodeDeadlineExceeded": EpisodeDeadlineExceeded,
        "LoopProcessEnded": LoopProcessEnded,
    }
    if kind in types:
        return types[kind](message)
    return LoopProcessEnded(text) if failed.get("process_end") else _LoopRaised(text)


class _LoopRaised(ChaosError):
    """What the loop raised, as its text (the exception object stayed in the child)."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _at(where: str | None) -> str:
    return f" at {where}" if where else ""


def _blocked(where: str | None) -> str:
    return f"blocked at {where}" if where else "blocked (where is unknown: no stack came back)"


def _last_seen(events: list[Event]) -> str:
    batches = [e for e in events if e["kind"] == "batch"]
    return f" (after batch {batches[-1]['batch']})" if batches else ""


def _size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"
