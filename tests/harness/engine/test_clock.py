from __future__ import annotations

import threading
import time

from pathways_chaos.harness.engine.clock import FakeClock, RealClock


def test_sleep_on_a_fake_clock_costs_no_real_time():
    clock = FakeClock()
    t0 = time.perf_counter()
    clock.sleep(3600)
    assert clock.time() == 3600
    assert time.perf_counter() - t0 < 1.0


def _poller(clock: FakeClock, stop: object, polls: list[float], late: float = 0.0):
    """The shape of pathwaysutils' monitor thread; ``late`` plays an overloaded scheduler."""

    def run() -> None:
        if late:
            time.sleep(late)  # not a synchronisation: the thread is slow to reach its wait
        while not stop.wait(10):  # type: ignore[attr-defined]
            time.sleep(0.05)  # real work that advance must wait for
            polls.append(clock.time())

    return run


def test_advance_wakes_a_poller_and_waits_for_its_poll():
    clock = FakeClock()
    stop = clock.make_event()
    polls: list[float] = []
    thread = clock.make_thread(target=_poller(clock, stop, polls), daemon=True)
    thread.start()  # no sleep: advance itself waits for the thread's first wait
    clock.advance(9)
    assert polls == []
    clock.advance(1)
    assert polls == [10]  # advance returned only after the poll finished
    clock.advance(25)
    assert polls == [10, 35]  # one wake-up per advance past the deadline
    stop.set()
    thread.join(2)
    assert not thread.is_alive()


def test_a_late_thread_keeps_the_deadline_of_its_start():
    """Under load the monitor thread may reach its first wait long after it was started: its
    first poll is still due 10 fake seconds after the start, not after it got there."""
    clock = FakeClock()
    stop = clock.make_event()
    polls: list[float] = []
    thread = clock.make_thread(target=_poller(clock, stop, polls, late=0.3), daemon=True)
    thread.start()
    clock.advance(10)
    assert polls == [10]
    stop.set()
    thread.join(2)


def test_a_thread_that_ends_without_waiting_does_not_hold_the_clock():
    clock = FakeClock()
    thread = clock.make_thread(target=lambda: None)
    thread.start()
    thread.join(2)
    clock.advance(1)
    assert clock.time() == 1


def test_the_monitor_thread_is_started_through_the_clock():
    """The seams hand pathwaysutils' manager module the clock's Thread."""
    from pathways_chaos.harness.engine.seams import _ThreadingWithClock

    clock = FakeClock()
    made = _ThreadingWithClock(clock).Thread(target=lambda: None)
    assert type(made) is type(clock.make_thread(target=lambda: None))
    assert type(RealClock().make_thread(target=lambda: None)) is threading.Thread


def test_set_event_returns_true_at_once():
    clock = FakeClock()
    event = clock.make_event()
    event.set()
    assert event.wait(100) is True and clock.time() == 0


def test_real_clock_is_real():
    assert abs(RealClock().time() - time.time()) < 1
    assert isinstance(RealClock().make_event(), threading.Event)
