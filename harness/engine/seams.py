"""The only places pathwaysutils is patched, installed and removed as one context manager.

Two seams (see the README) let the real ``Manager`` and ``elastic_retry`` run on CPU slices:

- ``elastic.get_slice_to_devices``: CPU devices have no ``slice_index``; group them by slice.
- ``elastic.DefaultSliceHealthChecker._simple_execution``: a dead slice's result raises a
  slice-down ``JaxRuntimeError`` on ``block_until_ready``, as a real dead slice does.

With a fake clock, two more module attributes of the same package are swapped so that its
waits cost no real time: ``elastic.time`` (``wait_for_slices`` reads ``time.time`` and calls
``time.sleep``) and ``manager.threading`` (its ``Event``, which the monitor thread waits on
between polls, and its ``Thread``, so the clock holds time still until the monitor thread first
waits). Everything else runs unchanged: ``wait_for_slices``, ``get_active_slice_indices``,
``validate``, ``is_error_due_to_slice_down``, the monitor thread and the retry loop.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pathways_chaos.harness.engine.clock import Clock

SliceOf = Callable[[Any], int]
HealthCheck = Callable[[int, Sequence[Any]], Any]


class _ThreadingWithClock(types.ModuleType):
    """``threading`` with ``Event`` taken from the clock; every other name is the real one."""

    def __init__(self, clock: Clock) -> None:
        super().__init__("threading")
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(threading, name)

    def Event(self) -> Any:
        return self._clock.make_event()

    def Thread(self, *args: Any, **kwargs: Any) -> Any:
        # The monitor thread: the fake clock holds time still until it first waits.
        return self._clock.make_thread(*args, **kwargs)


class _TimeWithClock(types.ModuleType):
    def __init__(self, clock: Clock) -> None:
        super().__init__("time")
        self.time = clock.time
        self.sleep = clock.sleep


class PathwaysCpuSeams:
    """Installs the seams on enter and restores the originals on exit, whatever happened."""

    def __init__(self, slice_of: SliceOf, health_check: HealthCheck, clock: Clock) -> None:
        self._slice_of = slice_of
        self._health_check = health_check
        self._clock = clock
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> PathwaysCpuSeams:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def start(self) -> None:
        if self._saved:
            raise RuntimeError("pathwaysutils seams are already installed by this object")
        from pathwaysutils.elastic import elastic, manager

        if _ACTIVE:
            raise RuntimeError(
                "pathwaysutils is already patched by another fake cluster in this process: "
                "leave that one's `with` block first"
            )
        slice_of = self._slice_of
        health_check = self._health_check

        def get_slice_to_devices(devices: Sequence[Any]) -> Mapping[int, Sequence[Any]]:
            grouped: dict[int, list[Any]] = {}
            for device in devices:
                grouped.setdefault(slice_of(device), []).append(device)
            return grouped

        def _simple_execution(checker: Any, devices: Sequence[Any]) -> Any:
            del checker
            return health_check(slice_of(devices[0]), devices)

        self._patch(elastic, "get_slice_to_devices", get_slice_to_devices)
        self._patch(elastic.DefaultSliceHealthChecker, "_simple_execution", _simple_execution)
        if self._clock.fake:
            self._patch(elastic, "time", _TimeWithClock(self._clock))
            self._patch(manager, "threading", _ThreadingWithClock(self._clock))

    def stop(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
            _ACTIVE.remove((owner, name, value))

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        entry = (owner, name, getattr(owner, name))
        self._saved.append(entry)
        _ACTIVE.append(entry)
        setattr(owner, name, value)


# Seams currently installed in this process (a second fake cluster must not stack on top).
_ACTIVE: list[tuple[Any, str, Any]] = []
