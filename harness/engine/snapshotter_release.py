"""Letting go of an orbax Pathways ``Snapshotter`` once its episode is over.

orbax-checkpoint 0.12.8's ``Snapshotter`` has no ``close()``: its constructor starts a daemon
worker thread that loops on its queue forever and holds the ``Snapshotter`` (the thread's target
is a bound method), so the last snapshot (pinned-host arrays, one tree per replica) stays alive
for the whole process. Every later live-array count sees it, and a long property run
accumulates one idle thread and one snapshot per episode.

``release_snapshotter`` is the toolkit's one workaround, used wherever it creates a
``Snapshotter``: a public ``close()`` when orbax has one; otherwise drop ``_latest_snapshot``
under its ``_lock`` and stop the worker by queueing a sentinel whose first look (``dtype``)
raises ``SystemExit``, which ends the thread without a traceback (the worker's own ``finally``
marks the item done). test_snapshotter_release.py pins the private names it relies on.

The worker also logs a failed snapshot (a save whose arrays a slice loss deleted) with
``logging.exception``: the record's traceback holds JAX's frames and in them the pinned-host
copies, for as long as a handler keeps the record (pytest's log capture: the whole test).
``worker_log_frames_cleared`` formats such a record's traceback once and clears its frames.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

_logger = logging.getLogger(__name__)

#: Real seconds to wait for the worker thread to end after the sentinel.
JOIN_TIMEOUT_S = 5.0

_PRIVATE = ("_lock", "_latest_snapshot", "_queue", "_worker_thread")


class _StopWorker:
    """Queued as the state to snapshot: the worker's first look at it ends the thread."""

    @property
    def dtype(self) -> Any:
        raise SystemExit(0)


def release_snapshotter(snapshotter: Any) -> None:
    """Ends the Snapshotter's worker thread and drops its last snapshot; idempotent."""
    if snapshotter is None:
        return
    close = getattr(snapshotter, "close", None)
    if callable(close):  # a later orbax with a public way out
        close()
        return
    missing = [name for name in _PRIVATE if not hasattr(snapshotter, name)]
    if missing:
        _logger.warning(
            "cannot release this %s (no %s): its last snapshot stays alive; "
            "pin orbax-checkpoint 0.12.8 or use its close()",
            type(snapshotter).__name__,
            ", ".join(missing),
        )
        return
    snapshotter.join()
    with snapshotter._lock:
        snapshotter._latest_snapshot = None
    thread: threading.Thread = snapshotter._worker_thread
    if not thread.is_alive():
        return
    # The SystemExit reaches the thread's excepthook, which pytest wraps and would report:
    # this one thread's hook stays silent about it (and only about it).
    loud = thread._invoke_excepthook  # type: ignore[attr-defined]

    def quiet(t: threading.Thread) -> None:
        if sys.exc_info()[0] is not SystemExit:
            loud(t)

    thread._invoke_excepthook = quiet  # type: ignore[attr-defined]
    snapshotter._queue.put((_StopWorker(), -1), timeout=JOIN_TIMEOUT_S)
    thread.join(JOIN_TIMEOUT_S)
    if thread.is_alive():
        _logger.warning("the Snapshotter's worker thread did not stop within %s s", JOIN_TIMEOUT_S)


def live_snapshotter_threads() -> int:
    """Snapshotter worker threads still running in this process (0 after every release)."""
    return sum(
        1
        for t in threading.enumerate()
        if getattr(getattr(t, "_target", None), "__qualname__", "") == "Snapshotter._worker"
    )


class _ClearWorkerFrames(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.funcName == "_worker" and "snapshotter" in record.pathname:
            if not record.exc_text:  # the text stays; the frames (and their arrays) go
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            traceback.clear_frames(record.exc_info[2])
        return True


def worker_log_frames_cleared() -> Callable[[], None]:
    """Installs the root-logger filter (the worker logs on the root logger); returns its undo."""
    root = logging.getLogger()
    keeper = _ClearWorkerFrames()
    root.addFilter(keeper)
    return lambda: root.removeFilter(keeper)
