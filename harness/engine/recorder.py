"""The event log: everything an oracle or a report may know about an episode, one JSON per line.

Writers emit events; listeners (the fault schedule, the fake cluster's access guard, the
progress line) see each event right after it is written, including events other listeners
emit, and may raise into the writer, which is how a fault reaches the trainer at the moment it
touches a lost slice. Readers see only the log.
"""

from __future__ import annotations

import json
import math
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from pathways_chaos.harness.engine.clock import Clock, RealClock
from pathways_chaos.harness.engine.owned_paths import open_append
from pathways_chaos.harness.engine.untrusted_files import (
    JSON_MAX_DEPTH,
    UntrustedFileError,
    load_json,
    open_regular,
    shown,
)
from pathways_chaos.harness.errors import ChaosConfigError

Event = dict[str, Any]
Listener = Callable[[Event], None]

#: Bumped when a field changes meaning; README documents every kind.
SCHEMA_VERSION = 1


def set_aside(path: Path) -> Path | None:
    """Makes room for a new log at ``path``: a log already there (an earlier session's, with
    the same ``--chaos-log-dir``) is renamed ``<stem>.previous<suffix>`` (one generation kept),
    since a judge reading both episodes as one would judge nonsense. Where it went, if any.

    Only an event log of ours is moved, and only over an event log of ours: any other file at
    either place (a user's notes named by a mistyped ``--log``) is refused in one line, and
    nothing is changed."""
    if not path.is_file() or path.is_symlink() or path.stat().st_size == 0:
        return None
    previous = path.with_name(f"{path.stem}.previous{path.suffix}")
    for place in (path, previous):
        if place.exists() and not is_event_log(place):
            raise ChaosConfigError(
                f"{shown(place)} exists and is not an event log of pathways-chaos: give the "
                "log another path (nothing was changed)"
            )
    os.replace(path, previous)
    return previous


def is_event_log(path: Path) -> bool:
    """Whether ``path`` is a regular file whose first line is an event log's ``log_start``
    (read bounded, never through a FIFO; an empty file counts: nothing is lost)."""
    try:
        fd = open_regular(path, what="event log", follow_symlinks=False)
    except ChaosConfigError:
        return False
    try:
        head = os.read(fd, 4096)
    finally:
        os.close(fd)
    if not head:
        return True
    try:
        first = load_json(head.split(b"\n", 1)[0], path, line=1, what="event log")
    except ValueError:  # not JSON, or nested too deep (UntrustedFileError is one too)
        return False
    return isinstance(first, dict) and first.get("kind") == "log_start"


class Recorder:
    """Appends events to memory and, when given a path, to a JSONL file."""

    def __init__(
        self,
        path: str | Path | None = None,
        clock: Clock | None = None,
        *,
        resume: list[Event] | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else RealClock()
        self.path = Path(path) if path is not None else None
        #: ``resume``: the events already in ``path`` (a later run's process goes on with the
        #: same log: numbering continues, no second ``log_start``).
        self.events: list[Event] = list(resume or [])
        self._pid = os.getpid()
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._file: IO[str] | None = None
        self._wall0 = time.perf_counter()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if resume is None:  # a new episode's log: never appended to an old one
                set_aside(self.path)
            # never through a symlink planted where the log goes, never blocked on a FIFO
            fd = open_append(self.path, what="event log")
            self._file = os.fdopen(fd, "a", encoding="utf-8")
            if resume is not None and self._file.tell() > 0:
                with self.path.open("rb") as f:  # a torn last line stays apart from ours
                    f.seek(-1, 2)
                    if f.read(1) != b"\n":
                        self._file.write("\n")
        if resume is None:
            self.emit("log_start", schema=SCHEMA_VERSION, epoch=time.time())

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def wall(self) -> float:
        """Seconds since this log's process started it: the ``wall`` an event emitted now has."""
        return round(time.perf_counter() - self._wall0, 6)

    def emit(self, kind: str, **fields: Any) -> Event:
        """Writes one event, then lets listeners react (they may raise into the caller)."""
        with self._lock:
            event: Event = {
                "seq": len(self.events),
                "kind": kind,
                "t": round(self.clock.time(), 6),
                "wall": self.wall(),
                **fields,
            }
            self.events.append(event)
            # A copy of the process made by a fork in the loop must not write into the log.
            if self._file is not None and os.getpid() == self._pid:
                self._file.write(json.dumps(event, default=_jsonable) + "\n")
                self._file.flush()
        for listener in list(self._listeners):
            listener(event)
        return event

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: How a message about a log that is not one an episode wrote says what to do.
LOG_FIX = "give the log an episode wrote (--log, --chaos-log-dir)"


def read_log(path: str | Path) -> list[Event]:
    """The events of a JSONL log an episode wrote (``--chaos-log-dir``, ``--log``), in order.

    Read as untrusted input: a line nested too deeply is refused in one line naming it
    (``UntrustedFileError``); a line that is not JSON raises ``json.JSONDecodeError``."""
    with Path(path).open(encoding="utf-8") as f:
        return [
            load_json(line, path, line=n, what="event log", fix=LOG_FIX)
            for n, line in enumerate(f, 1)
            if line.strip()
        ]


#: The fields a judge reads of an event of this kind without a default: a line lacking one
#: was not written by a ``Recorder``.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "run_end": ("status",),
    "fault": ("fault",),
    "batch": ("run", "attempt", "batch"),
    "subject": ("run", "event"),
}


def not_recorded(event: Any, due: int) -> str | None:
    """Why a log line was not written by the ``Recorder`` that numbers the log's events
    0, 1, 2, ... (``due``: the number the next one carries), or None."""
    if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
        return "a line that is not an event"
    kind, seq = event["kind"], event.get("seq")
    article = "an" if kind[:1] in tuple("aeiou") else "a"
    if seq != due:
        return f"{article} {kind} event numbered {seq!r} where {due} was due"
    missing = [f for f in REQUIRED_FIELDS.get(kind, ()) if f not in event]
    if missing:
        return f"{article} {kind} event without {', '.join(missing)}"
    t = event.get("t", 0.0)
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        return f"{article} {kind} event whose time t is {str(t)[:40]!r}, not a number"
    return None


class LogTail:
    """Reads a log another process is writing: whole lines only, a torn last line kept for
    the next read (or, once the writer is gone, counted as torn and dropped). A line the
    recorder did not write (not an event, out of its numbering, missing a field a judge
    reads) is counted in ``foreign``, the first said in ``first_foreign``, and never read."""

    def __init__(self, path: str | Path, limit: int = 1 << 30) -> None:
        self.path = Path(path)
        self.limit = limit
        self._offset = 0
        self._partial = b""
        self.torn = 0
        self.bad = 0
        self.foreign = 0
        self.first_foreign: str | None = None
        self._due = 0
        self._file: IO[bytes] | None = None

    def _opened(self) -> IO[bytes] | None:
        """The log, opened once and held: what the child's recorder writes stays readable if
        the child's own code then unlinks or replaces the path (a folder, a symlink put there).
        Only a regular file is held; a FIFO is never waited on."""
        if self._file is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
            self._file = os.fdopen(fd, "rb")
        return self._file

    def close(self) -> None:
        """Lets go of the log (a later ``read`` opens it again)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self, final: bool = False) -> list[Event]:
        held = self._opened()
        if held is None:
            return []
        try:
            chunk = os.pread(held.fileno(), max(0, self.limit - self._offset), self._offset)
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if final and self._partial.strip():
            self.torn += 1
            self._partial = b""
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = load_json(line, self.path, what="event log")
            except UntrustedFileError:
                self.bad += 1
                self._not_ours(f"a line nested deeper than {JSON_MAX_DEPTH} levels")
                continue
            except ValueError:
                self.bad += 1
                self._not_ours("a line that is not JSON")
                continue
            why = not_recorded(event, self._due)
            if why is None:
                self._due += 1
                out.append(event)
            else:  # the recorder's next line still carries the number due
                self.bad += not isinstance(event, dict) or "kind" not in event
                self._not_ours(why)
        return out

    def _not_ours(self, why: str) -> None:
        self.foreign += 1
        if self.first_foreign is None:
            self.first_foreign = why


def of_kind(events: Iterable[Event], *kinds: str) -> Iterator[Event]:
    return (e for e in events if e["kind"] in kinds)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    return str(value)


def child_folder(log: Path) -> Path:
    """The folder beside the event log ``log`` where an episode run in children keeps their
    work: spec and stack files, each run's output, the values (``<stem>.child``)."""
    return log.with_name(log.stem + ".child")


def values_folders(log: Path) -> tuple[Path, Path]:
    """The folders beside the event log ``log`` its runs' values go in (a ``run-N`` folder per
    run, a ``leaf-I.npy`` per leaf, as ``describe_state`` writes them): ``<stem>.child/values``
    for a loop run in a child (the supervisor's work folder), ``<stem>.values`` for one run in
    this process (``values_beside``). A value file a log names anywhere else is none of its
    runs' (the log was edited or moved), so a judge never opens it."""
    return child_folder(log) / "values", log.with_name(log.stem + ".values")
