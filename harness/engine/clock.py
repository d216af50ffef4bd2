"""Episode clocks: real time, or a fake clock so pathwaysutils' waits and polls cost nothing.

The fake clock moves only when someone sleeps on it or advances it. ``advance`` returns only
after every thread it woke (the elastic monitor thread) has finished its poll and is waiting
again, so a fault schedule on the fake clock plays out the same way on every run. A thread
started through the clock (``make_thread``; the seams give pathwaysutils' monitor thread this
way) also holds ``advance`` back until it first waits, so its first deadline is fixed at the
time it was started, however late the operating system runs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

_logger = logging.getLogger(__name__)

#: Real seconds ``advance`` waits for a woken thread to come back before giving up on it.
QUIESCENCE_TIMEOUT_S = 30.0


class EventLike(Protocol):
    def set(self) -> None: ...
    def clear(self) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


class Clock(Protocol):
    """What the harness needs of time."""

    fake: bool

    def time(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def make_event(self) -> EventLike: ...
    def make_thread(self, *args: Any, **kwargs: Any) -> threading.Thread: ...


class RealClock:
    """Wall time; waits really wait."""

    fake = False

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def make_event(self) -> EventLike:
        return threading.Event()

    def make_thread(self, *args: Any, **kwargs: Any) -> threading.Thread:
        return threading.Thread(*args, **kwargs)


class FakeClock:
    """Time that moves only when slept on or advanced."""

    fake = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._cond = threading.Condition()
        self._deadlines: dict[int, float] = {}  # waiting thread id -> deadline
        self._outstanding: set[int] = set()  # woken by advance, not yet waiting again
        self._starting: set[threading.Thread] = set()  # started here, not yet waiting once
        self._listeners: list[Callable[[float], None]] = []
        self._guards: list[Callable[[float], None]] = []

    def time(self) -> float:
        with self._cond:
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def add_listener(self, listener: Callable[[float], None]) -> None:
        """Calls ``listener(now)`` in the advancing thread after each advance."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[float], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_guard(self, guard: Callable[[float], None]) -> None:
        """Calls ``guard(now)`` in the advancing thread after each advance; it may raise
        (an episode deadline: harness.engine.deadline)."""
        self._guards.append(guard)

    def remove_guard(self, guard: Callable[[float], None]) -> None:
        if guard in self._guards:
            self._guards.remove(guard)

    def wake_all(self) -> None:
        """Wakes every thread waiting on this clock (they re-check and wait again)."""
        with self._cond:
            self._cond.notify_all()

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot advance a clock by {seconds} s: time only moves forward")
        me = threading.get_ident()
        with self._cond:
            give_up = time.monotonic() + QUIESCENCE_TIMEOUT_S
            # A thread started on this clock fixes its first deadline before time moves on.
            while self._starting - {threading.current_thread()}:
                left = give_up - time.monotonic()
                if left <= 0:
                    _logger.warning("fake clock: threads %s never waited", self._starting)
                    self._starting.clear()
                    break
                self._cond.wait(left)
            self._now += seconds
            woken = {t for t, d in self._deadlines.items() if d <= self._now and t != me}
            self._outstanding |= woken
            self._cond.notify_all()
            while self._outstanding & woken:
                left = give_up - time.monotonic()
                if left <= 0:
                    _logger.warning("fake clock: threads %s did not wait again", woken)
                    self._outstanding -= woken
                    break
                self._cond.wait(left)
            now = self._now
        for listener in list(self._listeners):
            listener(now)
        for guard in list(self._guards):
            guard(now)

    def make_event(self) -> EventLike:
        return FakeEvent(self)

    def make_thread(self, *args: Any, **kwargs: Any) -> threading.Thread:
        """A thread that ``advance`` waits for until it first waits on this clock (or ends)."""
        return _ClockThread(self, *args, **kwargs)

    def _starts(self, thread: threading.Thread) -> None:
        with self._cond:
            self._starting.add(thread)

    def _settled(self, thread: threading.Thread) -> None:
        with self._cond:
            if thread in self._starting:
                self._starting.discard(thread)
                self._cond.notify_all()

    # Used by FakeEvent, under self._cond.
    def _wait_until(self, event: FakeEvent, timeout: float | None) -> bool:
        me = threading.get_ident()
        with self._cond:
            self._arrived(me)
            if self._starting:
                self._starting.discard(threading.current_thread())
                self._cond.notify_all()
            if timeout is None:
                while not event._flag:
                    self._cond.wait()
                return True
            deadline = self._now + timeout
            self._deadlines[me] = deadline
            try:
                while not event._flag and self._now < deadline:
                    self._cond.wait()
            finally:
                del self._deadlines[me]
            if event._flag:
                self._arrived(me)
                return True
            return False

    def _arrived(self, ident: int) -> None:
        if ident in self._outstanding:
            self._outstanding.discard(ident)
            self._cond.notify_all()


class _ClockThread(threading.Thread):
    """A thread the fake clock knows is coming: it counts as busy until it first waits."""

    def __init__(self, clock: FakeClock, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock = clock

    def start(self) -> None:
        self._clock._starts(self)
        try:
            super().start()
        except BaseException:
            self._clock._settled(self)
            raise

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._clock._settled(self)


class FakeEvent:
    """A ``threading.Event`` whose ``wait(timeout)`` counts fake seconds."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._flag = False

    def set(self) -> None:
        with self._clock._cond:
            self._flag = True
            self._clock._cond.notify_all()

    def clear(self) -> None:
        with self._clock._cond:
            self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        return self._clock._wait_until(self, timeout)


def make_clock(kind: str) -> Clock:
    """``fake`` or ``real``."""
    if kind == "fake":
        return FakeClock()
    if kind == "real":
        return RealClock()
    from pathways_chaos.harness.errors import ChaosConfigError

    raise ChaosConfigError(f"unknown clock {kind!r}: use 'fake' (default) or 'real'")
