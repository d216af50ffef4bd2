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

A user's loop is not wrapped: the black-box observer hands the gate each save it sees, on any
orbax path (``hold``), as a ``HeldSave`` whose ``commit`` makes the real call. An asynchronous
save (Snapshotter, ``CheckpointManager`` with async checkpointing, ``AsyncCheckpointer``,
``StandardCheckpointer``, the v1 ``*_async`` calls) returns to the loop at once and is committed
when due or waited for (``wait``: ``join``, ``wait_until_finished``, ``result()``). A
synchronous save (``PyTreeCheckpointer``, a sync ``CheckpointManager``, v1 ``save``/``save_pytree``,
the training ``Checkpointer.save``) blocks the loop's thread, and nothing advances the fake
clock while it does: it costs its seconds on the clock itself (``block``), so losses due meanwhile
(``time=``) land in it, and a save whose slice was lost raises the slice-down error, as a
blocking save on Pathways does.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable
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


#: A sync save held for health polls advances the clock a second at a time, for at most this many
#: seconds per poll: while the loop blocks, only the monitor thread polls (inactive slices).
SECONDS_PER_POLL_BOUND = 10


@dataclasses.dataclass(eq=False)
class HeldSave:
    """A user's save the gate holds: ``commit`` makes the real orbax call when it is due."""

    gate: SaveGate
    recorder: Any
    fields: dict[str, Any]  # run, attempt, step, source, path: on each of its events
    state: Any
    commit: Callable[[], Any]
    owner: int  # id() of the object whose wait finishes it (a manager, a checkpointer)
    until: float | None
    polls_left: int | None
    done: bool = False
    waiting: bool = False  # the loop waits for it: its wait releases it, not the clock's tick
    #: The slice-down error a loss meanwhile left it (a blocking save raises it).
    lost: BaseException | None = None

    def due(self) -> bool:
        now = self.gate.clock.time()
        return (self.until is not None and now >= self.until) or (
            self.polls_left is not None and self.polls_left <= 0
        )

    def release(self, how: str) -> None:
        """Commits it (unless its arrays are gone): ``save_released`` or ``save_dropped``."""
        import jax

        if self.done:
            return
        self.done = True
        leaves = [x for x in jax.tree.leaves(self.state) if isinstance(x, jax.Array)]
        if any(x.is_deleted() for x in leaves):
            self._emit("save_dropped", reason="its arrays were deleted")
            return
        try:
            self.commit()
        except Exception as error:
            self._emit("save_dropped", reason=f"committing it raised {type(error).__name__}")
            raise
        self._emit("save_released", how=how)

    def drop(self, reason: str, error: BaseException | None = None) -> None:
        if not self.done:
            self.done, self.lost = True, error
            self._emit("save_dropped", reason=reason)

    def on_devices(self) -> set[int]:
        import jax

        on: set[int] = set()
        for leaf in jax.tree.leaves(self.state):
            if isinstance(leaf, jax.Array):
                on |= {d.id for d in leaf.devices()}
        return on

    def _emit(self, kind: str, **extra: Any) -> None:
        self.recorder.emit(kind, **self.fields, **extra)


class SaveGate:
    """Owned by the fake cluster; armed by ``slow_save``, consulted by every wrapped Snapshotter."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._arms: list[_Arm] = []
        self._lock = threading.Lock()
        self._main = threading.get_ident()
        self._wrappers: weakref.WeakSet[GatedSnapshotter] = weakref.WeakSet()
        self._held: list[HeldSave] = []  # a user's saves, on any orbax path
        self._unjoined: list[Any] = []  # a loop's Snapshotters with a save not yet joined
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

    def defer_join(self, snapshotter: Any) -> None:
        """A save just handed to a loop's Snapshotter copies in its worker while the loop goes
        on, as on Pathways; it is joined at the next point its completion could change what
        happens (``join_unjoined``): a fault, the next save, a restore, ``latest``, an
        attempt's start, the loop's ``join``, the run's end. The verdict stays deterministic and
        the copy overlaps the loop's steps, as in an unwatched run."""
        with self._lock:
            if all(s is not snapshotter for s in self._unjoined):
                self._unjoined.append(snapshotter)

    def join_unjoined(self) -> None:
        """Waits for every save ``defer_join`` left in flight."""
        with self._lock:
            pending, self._unjoined = self._unjoined, []
        for snapshotter in pending:
            snapshotter.join()

    def armed(self) -> bool:
        with self._lock:
            return bool(self._arms)

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
        with self._lock:
            for held in self._held:
                if held.polls_left is not None:
                    held.polls_left -= 1

    def slices_lost(
        self, device_ids: set[int], error: Callable[[], BaseException] | None = None
    ) -> None:
        """Before the arrays go: a held save on those devices is dropped (``error`` makes the
        slice-down error a blocking save then raises)."""
        self.join_unjoined()
        for gated in list(self._wrappers):
            gated.drop_if_on(device_ids)
        for held in self.held():
            if held.on_devices() & device_ids:
                held.drop("a slice it was on was lost", error() if error else None)
        self._forget()

    def reset(self) -> None:
        self.join_unjoined()
        with self._lock:
            self._arms.clear()
            self._held.clear()

    def _on_time(self, now: float) -> None:
        if threading.get_ident() != self._main:
            return  # released only in the trainer's thread
        for gated in list(self._wrappers):
            gated.release_if_due()
        self.release_due()

    # -- a user's saves (the black-box observer's) -------------------------------------------
    def hold(
        self,
        recorder: Any,
        fields: dict[str, Any],
        state: Any,
        commit: Callable[[], Any],
        owner: int = 0,
    ) -> HeldSave | None:
        """Holds this save if ``slow_save`` armed the gate (``save_held``); else ``None``."""
        arm = self.take()
        if arm is None:
            return None
        now = self.clock.time()
        until = now + arm.seconds if arm.seconds else None
        held = HeldSave(self, recorder, fields, state, commit, owner, until, arm.polls or None)
        with self._lock:
            self._held.append(held)
        recorder.emit(
            "save_held", **fields, until=until, polls=arm.polls or None, since=round(now, 6)
        )
        return held

    def held(self, owner: int | None = None) -> list[HeldSave]:
        """The saves still held (of ``owner``, or all)."""
        with self._lock:
            return [h for h in self._held if not h.done and owner in (None, h.owner)]

    def release_due(self) -> None:
        """Commits every held save whose seconds or polls have passed (the loop's thread)."""
        if threading.get_ident() != self._main:
            return
        for held in self.held():
            if held.due() and not held.waiting:
                held.release("expired")
        self._forget()

    def wait(self, owner: int | None = None) -> None:
        """The loop waits for its held saves: that costs what is left of them on the clock."""
        self.join_unjoined()
        for held in self.held(owner):
            held.waiting = True
            self._advance_until_due(held)
            held.release("waited")
        self._forget()

    def block(self, held: HeldSave) -> None:
        """A synchronous save: the loop's thread is blocked until it is done, so the save moves
        the clock itself; a slice lost meanwhile makes it raise the slice-down error."""
        held.waiting = True
        self._advance_until_due(held)
        if held.done:
            self._forget()
            if held.lost is not None:
                raise held.lost
            return
        held.release("blocked")
        self._forget()

    def settle(self) -> None:
        """The run ended with saves still held: they complete now, as the process would let an
        in-flight save finish before it exits."""
        self.join_unjoined()
        for held in self.held():
            held.release("at the run's end")
        self._forget()

    def _advance_until_due(self, held: HeldSave) -> None:
        if not isinstance(self.clock, FakeClock):
            return
        if held.until is not None:
            left = held.until - self.clock.time()
            if left > 0:
                self.clock.advance(left)  # faults due meanwhile fire (time=), losses drop it
            return
        for _ in range(SECONDS_PER_POLL_BOUND * max(1, held.polls_left or 0)):
            if held.done or held.due():
                return
            self.clock.advance(1.0)

    def _forget(self) -> None:
        with self._lock:
            self._held = [h for h in self._held if not h.done]


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
