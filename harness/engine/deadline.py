"""Every episode ends: a fake-clock deadline, a wall-time watchdog, and what the run waited for.

A loop can wait for what never comes (``elastic_retry(minimum_slice_count=5)`` on 4 slices, a
slice that is never repaired with ``timeout=None``) or spin in code that never sleeps. Either
way the test must end with a verdict that says what the run was waiting for, not hang.

- **Fake time**: the ``FakeClock`` calls a guard after every ``advance`` (every sleep of
  pathwaysutils' ``wait_for_slices``, every step of the fault controller); past the deadline, the
  guard raises ``EpisodeDeadlineExceeded`` in the episode's own thread. It is a ``ChaosError``,
  not a ``JaxRuntimeError``, so ``elastic_retry`` re-raises it and the run ends. A wait that can
  never be met (more slices than the cluster has) raises ``UnsatisfiableWait`` at once.
- **Wall time**: a watchdog thread raises the same error in the episode's thread
  (``PyThreadState_SetAsyncExc``) for code that spins without the clock, again every few
  seconds until the episode ends, in case the code swallows it. On a real clock (no guard) it
  also spots a slice wait that can never be met, within a poll.

Use::

    with episode_deadline(cluster.clock, Deadline(fake_s=3600, wall_s=600), cluster=cluster):
        run_the_loop()

Nothing stays installed after the ``with`` block, whatever happened inside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

from pathways_chaos.harness.engine.backend import SliceStates
from pathways_chaos.harness.engine.option_values import Range, parse_number
from pathways_chaos.harness.errors import ChaosConfigError, ChaosError

#: Fake-clock seconds an episode may take: 360 health polls at pathwaysutils' default 10 s
#: interval, about 2 s of wall time on 2 cores. The longest scenario here takes ~700 s
#: (a 600 s slice-wait timeout plus steps). Change it with ``--chaos-deadline``.
DEFAULT_FAKE_S = 3600.0
#: Wall seconds an episode may take (the slowest scenario on 2 cores takes ~60 s).
DEFAULT_WALL_S = 600.0
#: Wall seconds between repeated raises, for code that swallows the first.
REFIRE_S = 5.0
#: Wall seconds between the watchdog's looks at the episode thread.
SAMPLE_S = 0.25

#: The toolkit's own frames, skipped when naming where the run was.
_TOOLKIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB = os.path.dirname(os.__file__)


class EpisodeDeadlineExceeded(ChaosError):
    """The episode passed its deadline; the message says what the run was waiting for."""

    _default = "the episode passed its deadline"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self._default)


class UnsatisfiableWait(EpisodeDeadlineExceeded):
    """The run waits for more slices than the cluster has: no deadline needed to know."""


@dataclasses.dataclass(frozen=True)
class Deadline:
    """The limits of one episode: fake-clock seconds and wall seconds (``None``: no limit)."""

    fake_s: float | None = DEFAULT_FAKE_S
    wall_s: float | None = DEFAULT_WALL_S

    def __post_init__(self) -> None:
        for name, flag in (("fake_s", "--chaos-deadline"), ("wall_s", "--chaos-wall-deadline")):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ChaosConfigError(
                    f"{flag}={value}: use a number of seconds > 0 (or leave it out for the "
                    f"default {DEFAULT_FAKE_S if name == 'fake_s' else DEFAULT_WALL_S:g})"
                )


_default = Deadline()


def default_deadline() -> Deadline:
    """The limits an episode gets when its caller names none (the plugin sets them)."""
    return _default


def set_default_deadline(limits: Deadline) -> Deadline:
    """Sets the process-wide default; returns the previous one (to restore it)."""
    global _default
    previous, _default = _default, limits
    return previous


#: ``--deadline``/``--wall-deadline`` (and the plugin's): finite, > 0, at most a year.
SECONDS = Range(0, 365 * 24 * 3600, unit="seconds", inclusive=False)


def parse_seconds(raw: str, flag: str) -> float | None:
    """``"600"`` -> 600.0; ``"off"``/``"none"``/``"0"`` -> None; anything else: one line."""
    text = str(raw).strip().lower()
    if text in ("off", "none", "0", "0.0"):
        return None
    try:
        return parse_number(text, flag, SECONDS)
    except ChaosConfigError:
        raise ChaosConfigError(
            f"{flag}={raw!r}: use a number of seconds > 0, or 'off' for none (0 too; at most a "
            f"year, {SECONDS.maximum:.0f} s)"
        ) from None


@dataclasses.dataclass
class DeadlineWatch:
    """What a ``with episode_deadline(...)`` block gives back: whether and why it fired."""

    limits: Deadline
    thread: int
    started_fake: float
    started_wall: float
    fired: str | None = None  # the message, once a limit passed

    @property
    def hit(self) -> bool:
        return self.fired is not None


def describe_wait(frame: types.FrameType | None, cluster: Any = None) -> str:
    """What the run is waiting for, read from its stack (read-only: nothing is patched).

    Recognises pathwaysutils' ``wait_for_slices`` (the slices wanted and the slices alive), a
    snapshot save in flight (a Snapshotter or the fake's save gate joining), a slice health
    poll; otherwise names the innermost frame outside the toolkit and the standard library.
    """
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    alive = _alive(cluster)
    for f in frames:  # innermost first
        name, path = f.f_code.co_name, f.f_code.co_filename
        if name == "wait_for_slices" and "pathwaysutils" in path:
            return _slice_wait_text(f.f_locals, cluster, alive)
    for f in frames:
        name, path = f.f_code.co_name, f.f_code.co_filename
        if name in ("join", "finish", "wait_until_finished") and (
            "orbax" in path or path.endswith("save_gate.py")
        ):
            return "a snapshot save in flight (the run waits in Snapshotter.join for it)" + (
                f"; slices alive {alive}" if alive is not None else ""
            )
        if name in ("_health_check", "_simple_execution", "get_active_slice_indices"):
            return "a slice health poll (pathwaysutils' health check)" + (
                f"; slices alive {alive}" if alive is not None else ""
            )
    where = _user_frame(frames)
    return f"the run was at {where}" + (f"; slices alive {alive}" if alive is not None else "")


def _slice_wait_text(local: dict[str, Any], cluster: Any, alive: list[int] | None) -> str:
    wanted = local.get("slice_count")
    mapping = local.get("slice_to_devices")
    total = len(mapping) if mapping is not None else _total(cluster)
    active = local.get("active_slice_indices")
    text = f"the loop waits for {wanted} slices; this cluster has {total}"
    if alive is not None:
        text += f", {len(alive)} alive (slices {alive})"
    elif active is not None:
        text += f", {len(active)} active at the last poll (slices {sorted(active)})"
    return text


def _alive(cluster: Any) -> list[int] | None:
    if not isinstance(cluster, SliceStates):
        return None
    try:
        return sorted(i for i, s in cluster.states().items() if str(s) != "down")
    except Exception:  # a describer must never raise over the deadline it explains
        return None


def _total(cluster: Any) -> int | str:
    topology = getattr(cluster, "topology", None)
    return getattr(topology, "num_slices", "?")


def _user_frame(frames: list[types.FrameType]) -> str:
    for f in frames:
        path = os.path.abspath(f.f_code.co_filename)
        if path.startswith((_TOOLKIT, _STDLIB)) or "site-packages" in path:
            continue
        return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"
    if frames:
        f = frames[0]
        return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"
    return "an unknown place"


def unsatisfiable(frame: types.FrameType | None, depth: int = 8) -> str | None:
    """The message when one of the ``depth`` innermost frames is a ``wait_for_slices`` that
    can never return (it wants more slices than it has), else None."""
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "wait_for_slices" and "pathwaysutils" in code.co_filename:
            local = frame.f_locals
            wanted, mapping = local.get("slice_count"), local.get("slice_to_devices")
            if isinstance(wanted, int) and mapping is not None and wanted > len(mapping):
                return (
                    f"the loop waits for {wanted} slices; this cluster has {len(mapping)}: "
                    f"elastic_retry(minimum_slice_count={wanted}) can never be met, use "
                    f"1..{len(mapping)} (or run on a cluster with {wanted} slices)"
                )
            return None
        frame = frame.f_back
    return None


def _fake_text(limits: Deadline, now: float) -> str:
    return (
        f"the episode passed its deadline of {limits.fake_s:g} s on the fake clock (at "
        f"{now:g} s; raise it with --chaos-deadline=FAKE_S in pytest, --deadline FAKE_S on "
        "the command line)"
    )


def _wall_text(limits: Deadline) -> str:
    return (
        f"the episode passed its wall-time deadline of {limits.wall_s:g} s (raise it with "
        "--chaos-wall-deadline=S in pytest, --wall-deadline S on the command line)"
    )


@contextlib.contextmanager
def episode_deadline(
    clock: Any,
    limits: Deadline | None = None,
    waiting_for: Callable[[types.FrameType | None], str] | None = None,
    *,
    cluster: Any = None,
) -> Iterator[DeadlineWatch]:
    """Bounds the block in fake-clock time (when ``clock`` is fake) and wall time.

    ``waiting_for(frame)`` says what the run waits for, given the episode thread's innermost
    frame; by default ``describe_wait`` (with ``cluster`` for the slices alive). The error is
    raised in the thread that entered the block; other threads (pathwaysutils' monitor) are
    left alone.
    """
    limits = limits or default_deadline()
    owner = threading.get_ident()
    describe = waiting_for or (lambda frame: describe_wait(frame, cluster))
    watch = DeadlineWatch(
        limits, owner, clock.time() if getattr(clock, "fake", False) else 0.0, time.monotonic()
    )
    fake_guard = _install_fake_guard(clock, limits, watch, describe)
    stop = threading.Event()
    lock = threading.Lock()
    done = [False]
    watchdog = None
    if limits.wall_s is not None or not getattr(clock, "fake", False):
        watchdog = threading.Thread(
            target=_watchdog,
            args=(clock, limits, watch, describe, stop, lock, done),
            name="pathways-chaos-deadline",
            daemon=True,
        )
        watchdog.start()
    try:
        yield watch
    finally:
        with lock:
            done[0] = True
            _clear_async(owner)  # a raise the block ended before meeting
        stop.set()
        if watchdog is not None:
            watchdog.join()
        if fake_guard is not None:
            clock.remove_guard(fake_guard)


def _install_fake_guard(
    clock: Any,
    limits: Deadline,
    watch: DeadlineWatch,
    describe: Callable[[types.FrameType | None], str],
) -> Callable[[float], None] | None:
    add_guard = getattr(clock, "add_guard", None)
    if add_guard is None:
        return None
    end = None if limits.fake_s is None else watch.started_fake + limits.fake_s

    def guard(now: float) -> None:
        if threading.get_ident() != watch.thread:
            return
        frame = sys._getframe(1)
        impossible = unsatisfiable(frame)
        if impossible is not None:
            watch.fired = impossible
            raise UnsatisfiableWait(impossible)
        if watch.fired is None and end is not None and now > end:
            watch.fired = f"{_fake_text(limits, now)}: {describe(frame)}"
        if watch.fired is not None:
            raise EpisodeDeadlineExceeded(watch.fired)

    add_guard(guard)
    return guard


def _watchdog(
    clock: Any,
    limits: Deadline,
    watch: DeadlineWatch,
    describe: Callable[[types.FrameType | None], str],
    stop: threading.Event,
    lock: threading.Lock,
    done: list[bool],
) -> None:
    """Samples the episode thread every ``SAMPLE_S``: past the wall deadline, or (on a real
    clock, which no guard sees) stuck in a slice wait that can never be met, it raises there."""
    kind: type[EpisodeDeadlineExceeded] = EpisodeDeadlineExceeded
    next_raise = 0.0
    while not stop.wait(SAMPLE_S):
        now = time.monotonic()
        with lock:
            if done[0]:
                return
            if watch.fired is None:
                frame = sys._current_frames().get(watch.thread)
                impossible = None if getattr(clock, "fake", False) else unsatisfiable(frame)
                if impossible is not None:
                    watch.fired, kind = impossible, UnsatisfiableWait
                elif limits.wall_s is not None and now - watch.started_wall >= limits.wall_s:
                    try:
                        what = describe(frame)
                    except Exception as error:  # say so, and still end the run
                        what = f"(what it waited for is unknown: {type(error).__name__}: {error})"
                    watch.fired = f"{_wall_text(limits)}: {what}"
                del frame
                if watch.fired is None:
                    continue
            if now < next_raise:
                continue
            _raise_in(watch.thread, watch.fired, kind)
            next_raise = now + REFIRE_S
        wake = getattr(clock, "wake_all", None)
        if wake is not None:
            wake()  # a thread waiting on the fake clock's condition runs again, and raises


def _raise_in(
    thread: int, message: str, kind: type[EpisodeDeadlineExceeded] = EpisodeDeadlineExceeded
) -> None:
    """Raises ``kind(message)`` in ``thread`` at its next bytecode (a subclass made per call:
    the C API takes a class, not an instance, so the class carries the message)."""
    exc = type(kind.__name__, (kind,), {"_default": message})
    exc.__module__ = __name__
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))


def _clear_async(thread: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), None)
