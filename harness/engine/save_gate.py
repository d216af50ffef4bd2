"""Snapshot saves held in flight on the episode clock: the ``slow_save`` fault's mechanism.

On CPU a Snapshotter save's copy takes microseconds, so on the fake every save is finished
before training goes on (``SaveGate.finish``, for the reference trainer and a watched user loop
alike); how long a save stays in flight is the episode clock's to say, through ``slow_save``. The
gate wraps the trainer's Snapshotter (``ReferenceTrainer.snapshotter_wrapper``): once armed, the
next save is held (not yet handed to the real Snapshotter, so ``latest`` and ``load`` still see
the previous snapshot) until its seconds on the episode clock or its health polls have passed,
or until the trainer waits for it with ``join`` (which then costs the remaining seconds). A
slice lost while a save is held drops the save, as losing a replica's host copy mid-transfer
does. Every transition is an event: ``save_held``, ``save_released``, ``save_dropped`` and
``save_skipped`` (a save while one is held: the Snapshotter is busy).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any

from pathways_chaos.harness.engine.clock import Clock, FakeClock
from pathways_chaos.harness.errors import ChaosConfigError


@dataclasses.dataclass
class _Arm:
    seconds: float
    polls: int


@dataclasses.dataclass
class _Held:
    step: int
    state: Any
    until: float | None  # episode-clock time it completes by itself
    polls_left: int | None


class SaveGate:
    """Owned by the fake cluster; armed by ``slow_save``, consulted by every wrapped Snapshotter."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._arms: list[_Arm] = []
        self._lock = threading.Lock()
        self._main = threading.get_ident()
        self._wrappers: weakref.WeakSet[GatedSnapshotter] = weakref.WeakSet()
        if isinstance(clock, FakeClock):
            clock.add_listener(self._on_time)

    def arm(self, seconds: float = 0.0, polls: int = 0, saves: int = 1) -> list[str]:
        if (seconds > 0) == (polls > 0):
            raise ChaosConfigError(
                f"slow_save seconds={seconds} polls={polls}: give exactly one of them, > 0 "
                "(for example slow_save@step=3:seconds=4)"
            )
        with self._lock:
            self._arms += [_Arm(seconds, polls) for _ in range(saves)]
        what = f"{seconds} s on the episode clock" if seconds else f"{polls} health polls"
        return [f"the next {saves} snapshot save(s) held in flight for {what}"]

    def finish(self, snapshotter: Any) -> None:
        """Waits for a save just handed to the Snapshotter (its public ``join``).

        Otherwise the OS would decide: on a loaded machine the Snapshotter's worker thread may
        not run for several steps, and the next save is skipped as "busy" (seen in CI: a
        restore from step 0, not 10).
        """
        snapshotter.join()

    def take(self) -> _Arm | None:
        with self._lock:
            return self._arms.pop(0) if self._arms else None

    def wrap(self, snapshotter: Any, recorder: Any, run: int = 1) -> GatedSnapshotter:
        gated = GatedSnapshotter(snapshotter, self, recorder, run)
        self._wrappers.add(gated)
        return gated

    def on_poll(self, slice_index: int) -> None:
        """A health poll of any slice counts for ``polls`` holds (the monitor thread polls the
        inactive slices every ``poll_interval``; each attempt's wait polls every slice)."""
        del slice_index
        for gated in list(self._wrappers):
            gated.count_poll()

    def slices_lost(self, device_ids: set[int]) -> None:
        for gated in list(self._wrappers):
            gated.drop_if_on(device_ids)

    def reset(self) -> None:
        with self._lock:
            self._arms.clear()

    def _on_time(self, now: float) -> None:
        if threading.get_ident() != self._main:
            return  # released only in the trainer's thread
        for gated in list(self._wrappers):
            gated.release_if_due()


class GatedSnapshotter:
    """The trainer's Snapshotter, through the gate: ``save``, ``join``, ``latest``, ``load``."""

    def __init__(self, inner: Any, gate: SaveGate, recorder: Any, run: int = 1) -> None:
        self.inner = inner
        self._gate = gate
        self._recorder = recorder
        self._run = run
        self._held: _Held | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, step: int, state: Any) -> None:
        self.release_if_due()
        if self._held is not None:
            self._recorder.emit("save_skipped", run=self._run, step=step, held=self._held.step)
            return
        arm = self._gate.take()
        if arm is None:
            self.inner.save(step, state)
            self._gate.finish(self.inner)
            return
        now = self._gate.clock.time()
        until = now + arm.seconds if arm.seconds else None
        self._held = _Held(step, state, until, arm.polls or None)
        self._recorder.emit(
            "save_held",
            run=self._run,
            step=step,
            until=until,
            polls=arm.polls or None,
            since=round(now, 6),
        )

    def join(self) -> None:
        self.release_if_due()
        held, self._held = self._held, None
        if held is not None:
            # Waiting for the save costs what is left of it on the episode clock.
            if held.until is not None and isinstance(self._gate.clock, FakeClock):
                left = held.until - self._gate.clock.time()
                if left > 0:
                    self._gate.clock.advance(left)
            self._release("joined", held)
        self.inner.join()

    @property
    def latest(self) -> Any:
        self.release_if_due()
        return self.inner.latest

    def load(self, *args: Any, **kwargs: Any) -> Any:
        self.release_if_due()
        return self.inner.load(*args, **kwargs)

    def count_poll(self) -> None:
        with self._lock:
            if self._held is not None and self._held.polls_left is not None:
                self._held.polls_left -= 1

    def release_if_due(self) -> None:
        held = self._held
        if held is None:
            return
        due_time = held.until is not None and self._gate.clock.time() >= held.until
        due_polls = held.polls_left is not None and held.polls_left <= 0
        if due_time or due_polls:
            self._held = None
            self._release("expired", held)

    def drop_if_on(self, device_ids: set[int]) -> None:
        import jax

        held = self._held
        if held is None:
            return
        on = set()
        for leaf in jax.tree.leaves(held.state):
            if isinstance(leaf, jax.Array):
                on |= {d.id for d in leaf.devices()}
        if on & device_ids:
            self._held = None
            self._recorder.emit(
                "save_dropped", run=self._run, step=held.step, reason="a slice it was on was lost"
            )

    def _release(self, how: str, held: _Held) -> None:
        import jax

        leaves = [x for x in jax.tree.leaves(held.state) if isinstance(x, jax.Array)]
        if any(x.is_deleted() for x in leaves):
            self._recorder.emit(
                "save_dropped", run=self._run, step=held.step, reason="its arrays were deleted"
            )
            return
        self.inner.save(held.step, held.state)
        self.inner.join()
        self._recorder.emit("save_released", run=self._run, step=held.step, how=how)
