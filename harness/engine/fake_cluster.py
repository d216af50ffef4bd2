"""N slices x M CPU devices in one process, that the real pathwaysutils elastic code believes.

A lost slice looks to the trainer as it does on Pathways: its health check fails, every live
array with a shard on it is gone, and the next access the trainer makes while its mesh still
holds the slice raises a slice-down ``jax.errors.JaxRuntimeError``; so does any JAX operation
on the slice's devices from any code (the JAX device-loss seam), a user's own loop included.
The fake is a context manager in the manner of chex's fakes: entering installs the
pathwaysutils and JAX seams, leaving removes them and brings every slice back up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pathways_chaos.harness.engine.clock import Clock, FakeClock
from pathways_chaos.harness.engine.save_gate import SaveGate
from pathways_chaos.harness.engine.seams import JaxDeviceLossSeam, PathwaysCpuSeams
from pathways_chaos.harness.engine.topology import SliceTopology, cpu_devices
from pathways_chaos.harness.errors import ChaosConfigError

#: Status codes that ``is_error_due_to_slice_down`` treats as a lost slice.
SLICE_DOWN_CODES = ("DATA_LOSS", "DEADLINE_EXCEEDED", "NOT_FOUND", "INTERNAL")


#: The health computation, compiled once per slice's devices for the whole process.
_HEALTH_FNS: dict[tuple[int, ...], Any] = {}


class SliceState(enum.StrEnum):
    UP = "up"
    DOWN = "down"
    REPAIRED = "repaired"  # healthy again and available to rejoin


@dataclasses.dataclass
class _Slice:
    state: SliceState = SliceState.UP
    code: str = "DATA_LOSS"
    polls_until_repaired: int | None = None  # None: stays down until repaired explicitly
    back_at: float | None = None  # the clock time from which its health polls find it back
    health_delay_s: float = 0.0  # > 0: a slow slice whose health check times out
    slow_polls_left: int = 0
    polls: int = 0
    flaps_left: int = 0  # losses still to come each time the slice has served `flap_up` accesses
    flap_up: int = 0
    flap_polls: int = 0
    accesses: int = 0


def slice_down_error(code: str, slice_index: int, detail: str = "") -> Exception:
    """The error Pathways raises when a workload touches data on a lost slice."""
    import jax

    what = detail or "slice unassigned after a hardware failure"
    error: Exception = jax.errors.JaxRuntimeError(
        f"{code}: slice {slice_index}: {what} (pathways-chaos fake)"
    )
    return error


class _DeadSliceResult:
    """What a health check on a dead slice returns: it fails when waited on.

    Each wait raises a new error: a kept one would hold its traceback, whose frames hold this
    result and the checker's other results (live arrays), a cycle only a full gc frees.
    """

    def __init__(self, code: str, slice_index: int, detail: str) -> None:
        self._args = (code, slice_index, detail)

    def block_until_ready(self) -> Any:
        raise slice_down_error(*self._args)


class FakeCluster:
    """The in-process fake: slice states, the health checks the seams route here, faults."""

    def __init__(
        self,
        topology: SliceTopology,
        clock: Clock | None = None,
    ) -> None:
        self.topology = topology
        self.clock: Clock = clock if clock is not None else FakeClock()
        self.devices: list[Any] = cpu_devices(topology.device_count)
        self._by_id = {d.id: i // topology.devices_per_slice for i, d in enumerate(self.devices)}
        self._slices = [_Slice() for _ in range(topology.num_slices)]
        self._lock = threading.RLock()
        self._seams = PathwaysCpuSeams(self.slice_of, self._health_check, self.clock)
        # Device id -> maker of its slice's slice-down error, while the slice is down.
        self._lost_devices: dict[int, Callable[[], BaseException | None]] = {}
        #: ``arm_error``'s: the thread it is for and the error, until raised once.
        self._armed: tuple[int, Callable[[], BaseException]] | None = None
        self._device_seam = JaxDeviceLossSeam(self._lost_devices)
        self._poll_listeners: list[Callable[[int], None]] = []
        self._repair_listeners: list[Callable[[int], None]] = []
        self.save_gate = SaveGate(self.clock)  # slow_save holds snapshot saves in flight here
        self._poll_listeners.append(self.save_gate.on_poll)

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> FakeCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._seams.start()
        try:
            self._device_seam.start()
        except BaseException:
            self._seams.stop()
            raise

    def stop(self) -> None:
        self._device_seam.stop()
        self._seams.stop()
        self.save_gate.reset()
        with self._lock:
            self._slices = [_Slice() for _ in range(self.topology.num_slices)]
            self._armed = None
            self._lost_devices.clear()

    @property
    def active(self) -> bool:
        return self._seams.installed

    # -- topology --------------------------------------------------------------------------
    @property
    def num_slices(self) -> int:
        return self.topology.num_slices

    def slice_of(self, device: Any) -> int:
        try:
            return self._by_id[device.id]
        except KeyError:
            raise ChaosConfigError(
                f"device {device} is not part of this {self.topology} fake cluster: build the "
                "Manager with devices=cluster.devices"
            ) from None

    def slice_devices(self, slice_index: int) -> list[Any]:
        self._check_index(slice_index)
        m = self.topology.devices_per_slice
        return self.devices[slice_index * m : (slice_index + 1) * m]

    def slice_to_device_ids(self) -> dict[int, list[int]]:
        return {s: [d.id for d in self.slice_devices(s)] for s in range(self.num_slices)}

    # -- state -----------------------------------------------------------------------------
    def state(self, slice_index: int) -> SliceState:
        self._check_index(slice_index)
        with self._lock:
            return self._slices[slice_index].state

    def states(self) -> dict[int, SliceState]:
        with self._lock:
            return {i: s.state for i, s in enumerate(self._slices)}

    def down_slices(self) -> frozenset[int]:
        with self._lock:
            return frozenset(i for i, s in enumerate(self._slices) if s.state is SliceState.DOWN)

    def handoff(self) -> dict[str, Any]:
        """What a preemption's next run (a new process, a new fake) goes on from: the slices
        down, each with its error code and the health polls left until its repair. Hardware
        that failed stays failed across a job's restart on GKE."""
        with self._lock:
            down = []
            for i, s in enumerate(self._slices):
                if s.state is SliceState.DOWN:
                    left = s.polls_until_repaired
                    down.append([i, s.code, None if left is None else left - s.polls])
        return {"down": down}

    def go_on_from(self, state: dict[str, Any]) -> None:
        for index, code, polls_left in state.get("down") or []:
            self.lose_slice(
                int(index), str(code), None if polls_left is None else max(1, int(polls_left))
            )

    def health_polls(self, slice_index: int) -> int:
        with self._lock:
            return self._slices[slice_index].polls

    # -- faults ----------------------------------------------------------------------------
    def lose_slice(
        self, slice_index: int, code: str = "DATA_LOSS", repair_after_polls: int | None = None
    ) -> list[str]:
        """Takes a slice down: health checks fail and its arrays are gone."""
        self._check_index(slice_index)
        if code not in SLICE_DOWN_CODES:
            raise ChaosConfigError(
                f"{code!r} is not a slice-down error: use one of {', '.join(SLICE_DOWN_CODES)} "
                "(raise_error injects other errors)"
            )
        # Before the device-loss seam knows: a held save's arrays are still readable here.
        self.save_gate.slices_lost(
            {d.id for d in self.slice_devices(slice_index)},
            lambda: slice_down_error(code, slice_index, "lost while a save was in flight"),
        )
        with self._lock:
            s = self._slices[slice_index]
            s.state, s.code, s.polls = SliceState.DOWN, code, 0
            s.polls_until_repaired, s.back_at = repair_after_polls, None
            self._refresh_lost_devices()
        deleted = self._delete_arrays_on(slice_index)
        if self._device_seam.installed:
            self._device_seam.on_loss()
        return [f"slice {slice_index}: down ({code}), {deleted} live arrays deleted"]

    def repair_slice(self, slice_index: int, after_polls: int = 0) -> list[str]:
        """The slice becomes healthy after ``after_polls`` more health checks (0: at once)."""
        self._check_index(slice_index)
        with self._lock:
            s = self._slices[slice_index]
            if s.state is not SliceState.DOWN:
                return [f"slice {slice_index}: already {s.state}"]
            if after_polls <= 0:
                s.state = SliceState.REPAIRED
                self._refresh_lost_devices()
                return [f"slice {slice_index}: repaired"]
            s.polls, s.polls_until_repaired = 0, after_polls
            return [f"slice {slice_index}: repaired after {after_polls} health polls"]

    def repair_slice_after(self, slice_index: int, seconds: float) -> list[str]:
        """The slice is healthy for every health poll from ``seconds`` on the clock on."""
        self._check_index(slice_index)
        with self._lock:
            s = self._slices[slice_index]
            if s.state is not SliceState.DOWN:
                return [f"slice {slice_index}: already {s.state}"]
            s.polls_until_repaired, s.back_at = None, self.clock.time() + seconds
            return [f"slice {slice_index}: repaired for health polls from {s.back_at:g} s on"]

    def slow_health(self, slice_index: int, delay_s: float, polls: int = 0) -> list[str]:
        """The next ``polls`` health checks (0: all) take ``delay_s`` and then time out."""
        self._check_index(slice_index)
        with self._lock:
            s = self._slices[slice_index]
            s.health_delay_s, s.slow_polls_left = delay_s, polls
        return [f"slice {slice_index}: health check takes {delay_s} s and times out"]

    def flap_slice(
        self, slice_index: int, times: int, up_accesses: int, repair_after_polls: int
    ) -> list[str]:
        """Lost now and ``times - 1`` more times, each after serving ``up_accesses`` accesses."""
        touched = self.lose_slice(slice_index, repair_after_polls=repair_after_polls)
        with self._lock:
            s = self._slices[slice_index]
            s.flaps_left, s.flap_up, s.flap_polls, s.accesses = (
                times - 1,
                up_accesses,
                repair_after_polls,
                0,
            )
        return [*touched, f"slice {slice_index}: flapping, {times - 1} more losses to come"]

    def check_access(self, slices: Iterable[int]) -> None:
        """Raises the slice-down error a workload sees when it touches a lost slice."""
        flapping = []
        with self._lock:
            for i in sorted(slices):
                s = self._slices[i]
                if s.state is SliceState.DOWN:
                    raise slice_down_error(s.code, i)
                if s.flaps_left > 0:
                    s.accesses += 1
                    if s.accesses > s.flap_up:
                        s.flaps_left -= 1
                        s.accesses = 0
                        flapping.append((i, s.flap_polls))
        for i, polls in flapping:  # down again, in the trainer's thread
            self.lose_slice(i, repair_after_polls=polls)
            raise slice_down_error("DATA_LOSS", i, "flapping slice lost again")

    def add_placement_listener(self, listener: Callable[[Any], None]) -> None:
        """``listener(sharding)`` for every placement of new data (device_put, jit arguments)."""
        self._device_seam.placement_listeners.append(listener)

    def remove_placement_listener(self, listener: Callable[[Any], None]) -> None:
        if listener in self._device_seam.placement_listeners:
            self._device_seam.placement_listeners.remove(listener)

    def add_error_listener(self, listener: Callable[[BaseException], None]) -> None:
        """``listener(error)`` for every slice-down error raised to the workload."""
        self._device_seam.error_listeners.append(listener)

    def remove_error_listener(self, listener: Callable[[BaseException], None]) -> None:
        if listener in self._device_seam.error_listeners:
            self._device_seam.error_listeners.remove(listener)

    @contextlib.contextmanager
    def unguarded(self) -> Iterator[None]:
        """Lost devices usable again for a while: the judge's one-device replay runs after the
        workload, on whatever device 0 is, lost or not. The slice states do not change."""
        with self._lock:
            self._lost_devices.clear()
        try:
            yield
        finally:
            with self._lock:
                self._refresh_lost_devices()

    def arm_error(self, make_error: Callable[[], BaseException]) -> None:
        """The next use of any device by this thread raises ``make_error()``, once, no slice
        lost (``raise_error`` on a loop: from its computation, where a program error comes
        from, not from inside the batch draw the trigger counted). Other threads (the health
        monitor's polls) do not meet it; a jitted function another thread calls meanwhile
        takes JAX's C++ fast path again, unless the lineage seam (on for loops) keeps it off."""
        with self._lock:
            self._armed = (threading.get_ident(), make_error)
            self._refresh_lost_devices()
        if self._device_seam.installed:
            self._device_seam.on_loss()  # the next jitted call comes through the seam

    def disarm_error(self) -> bool:
        """Takes back an armed error nothing met; whether one was still armed."""
        with self._lock:
            armed, self._armed = self._armed, None
            self._refresh_lost_devices()
        return armed is not None

    def _armed_error(self) -> BaseException | None:
        with self._lock:
            armed = self._armed
            if armed is None or armed[0] != threading.get_ident():
                return None
            self._armed = None
            self._refresh_lost_devices()
        return armed[1]()

    def count_access(self, slices: Iterable[int]) -> list[int]:
        """A flapping slice serves ``up_accesses`` accesses, then is lost again (no raise).

        For loops that emit no events: the device-loss seam makes their next use of the slice
        fail. Returns the slices lost by this access.
        """
        lost = []
        with self._lock:
            for i in sorted(slices):
                s = self._slices[i]
                if s.state is not SliceState.DOWN and s.flaps_left > 0:
                    s.accesses += 1
                    if s.accesses > s.flap_up:
                        s.flaps_left -= 1
                        s.accesses = 0
                        lost.append((i, s.flap_polls))
        for i, polls in lost:
            self.lose_slice(i, repair_after_polls=polls)
        return [i for i, _ in lost]

    def add_poll_listener(self, listener: Callable[[int], None]) -> None:
        self._poll_listeners.append(listener)

    def add_repair_listener(self, listener: Callable[[int], None]) -> None:
        self._repair_listeners.append(listener)

    def remove_repair_listener(self, listener: Callable[[int], None]) -> None:
        if listener in self._repair_listeners:
            self._repair_listeners.remove(listener)

    # -- internals -------------------------------------------------------------------------
    def _health_check(self, slice_index: int, devices: Sequence[Any]) -> Any:
        with self._lock:
            s = self._slices[slice_index]
            s.polls += 1
            repaired = s.state is SliceState.DOWN and (
                (s.polls_until_repaired is not None and s.polls > s.polls_until_repaired)
                or (s.back_at is not None and self.clock.time() >= s.back_at)
            )
            if repaired:
                s.state = SliceState.REPAIRED
                self._refresh_lost_devices()
            state, code, delay = s.state, s.code, s.health_delay_s
            if delay > 0 and s.slow_polls_left:
                s.slow_polls_left -= 1
                if s.slow_polls_left == 0:
                    s.health_delay_s = 0.0
        for listener in self._poll_listeners:
            listener(slice_index)
        if repaired:
            for listener in list(self._repair_listeners):
                listener(slice_index)
        if delay > 0:
            self.clock.sleep(delay)
            return _DeadSliceResult(
                "DEADLINE_EXCEEDED", slice_index, f"health check took {delay} s"
            )
        if state is SliceState.DOWN:
            return _DeadSliceResult(code, slice_index, "health check failed")
        return self._run_health_computation(devices)

    def _run_health_computation(self, devices: Sequence[Any]) -> Any:
        """The upstream check's computation (99 + 1 on every device of the slice, by pmap).

        Compiled once per slice: upstream pmaps a bound method of a new checker on every
        poll, which recompiles each time and keeps the checker's results alive.
        """
        import jax
        import numpy as np

        key = tuple(d.id for d in devices)
        fn = _HEALTH_FNS.get(key)
        if fn is None:
            fn = _HEALTH_FNS[key] = jax.pmap(lambda x: x + 1, devices=list(devices))
        return fn(np.zeros(len(devices), dtype=float) + 99)

    def _refresh_lost_devices(self) -> None:
        """Called with the lock held whenever a slice goes down or comes back."""
        lost: dict[int, Callable[[], BaseException | None]] = {}
        for i, s in enumerate(self._slices):
            if s.state is SliceState.DOWN:
                make = functools.partial(slice_down_error, s.code, i)
                lost.update({d.id: make for d in self.slice_devices(i)})
        if self._armed is not None:
            # The armed error comes first, on every device: a use that also touches a lost
            # slice meets it, whichever of its devices is looked at first (else which error a
            # callback met would depend on that order).
            for d in self.devices:
                down = lost.get(d.id)
                lost[d.id] = (
                    self._armed_error if down is None else _first_of(self._armed_error, down)
                )
        self._lost_devices.clear()
        self._lost_devices.update(lost)

    def _delete_arrays_on(self, slice_index: int) -> int:
        from pathways_chaos.harness.engine.census import live_arrays

        dead = {d.id for d in self.slice_devices(slice_index)}
        count = 0
        for array in live_arrays():
            try:
                if not array.is_deleted() and dead & {d.id for d in array.sharding.device_set}:
                    _free_buffers_on(array, dead)
                    count += 1
            except RuntimeError:  # deleted meanwhile
                continue
        return count

    def _check_index(self, slice_index: int) -> None:
        if not 0 <= slice_index < self.num_slices:
            raise ChaosConfigError(
                f"slice {slice_index} does not exist in this {self.topology} cluster: "
                f"use 0..{self.num_slices - 1}"
            )


def _first_of(
    *makers: Callable[[], BaseException | None],
) -> Callable[[], BaseException | None]:
    """The first error the makers give (each one returns None where it does not apply)."""

    def make() -> BaseException | None:
        for maker in makers:
            error = maker()
            if error is not None:
                return error
        return None

    return make


def _free_buffers_on(array: Any, dead: set[int]) -> None:
    """Frees an array's buffers on the lost devices only. A buffer on a surviving device may be
    another array's too (``jax.device_put`` of a one-device array onto a mesh keeps its buffer
    for that device), and that array lives on, as it would on Pathways; the lost slice's array
    is deleted all the same (``is_deleted`` holds when any of its buffers is). Read through
    ``_arrays``, the one-device arrays JAX keeps per buffer: ``addressable_shards`` checks the
    array first, and the device-loss seam already fails it."""
    for buffer in array._arrays:
        if {d.id for d in buffer.sharding.device_set} & dead:
            buffer.delete()


def devices_in_slice_order(cluster: FakeCluster, slices: Sequence[int]) -> list[Any]:
    return [d for s in sorted(slices) for d in cluster.slice_devices(s)]
