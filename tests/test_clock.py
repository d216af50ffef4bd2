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


def test_advance_wakes_a_poller_and_waits_for_its_poll():
    clock = FakeClock()
    stop = clock.make_event()
    polls: list[float] = []

    def poller() -> None:  # the shape of pathwaysutils' monitor thread
        while not stop.wait(10):
            time.sleep(0.05)  # real work that advance must wait for
            polls.append(clock.time())

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    time.sleep(0.05)
    clock.advance(9)
    assert polls == []
    clock.advance(1)
    assert polls == [10]  # advance returned only after the poll finished
    clock.advance(25)
    assert polls == [10, 35]  # one wake-up per advance past the deadline
    stop.set()
    thread.join(2)
    assert not thread.is_alive()


def test_set_event_returns_true_at_once():
    clock = FakeClock()
    event = clock.make_event()
    event.set()
    assert event.wait(100) is True and clock.time() == 0


def test_real_clock_is_real():
    assert abs(RealClock().time() - time.time()) < 1
    assert isinstance(RealClock().make_event(), threading.Event)
