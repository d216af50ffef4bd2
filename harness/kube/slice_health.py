"""Slice health as the Pathways resource manager reports it, for the ``--cluster`` backend.

Why: on the twin a slice is up while its worker processes hold their connections to the
(fake) resource manager in the head Pod. The head's backend follows those reports, so a slice
goes down in the trainer only once a killed Pod's process has really died, and comes back only
once the replacement process has rejoined: no shortcut from the fault to the slice.

Used when ``PATHWAYS_CHAOS_SLICE_HEALTH=HOST:PORT`` is set (the twin's head Pod sets it to its
resource manager): then every report is followed, whatever ended a worker (a fault of ours, an
OOM kill, a hung process, a node lost outside the toolkit). Otherwise the backend follows the
worker Pods alone, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable

from pathways_chaos.harness.engine.fake_cluster import FakeCluster, SliceState

ENV = "PATHWAYS_CHAOS_SLICE_HEALTH"
TIMEOUT_S = 30.0


class SliceHealthWatch:
    """Follows ``SLICES {...}`` reports (hosts up per slice) from a ``WATCH`` connection."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{ENV}={address!r}: write HOST:PORT of the resource manager")
        self.address = (host, int(port))
        self._cond = threading.Condition()
        self._hosts: dict[int, int] = {}
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="slice-health", daemon=True)
        self.reports = 0
        #: Called (on the watch thread, outside the lock) with hosts up per slice on each report.
        self.on_report: Callable[[dict[int, int]], None] | None = None

    @classmethod
    def from_env(cls) -> SliceHealthWatch | None:
        value = os.environ.get(ENV)
        return cls(value) if value else None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.on_report = None
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def hosts(self, slice_index: int) -> int:
        with self._cond:
            return self._hosts.get(slice_index, 0)

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"slice health: {what} not reported within {timeout} s")
                self._cond.wait(min(left, 0.5))

    def wait_down(self, slice_index: int, hosts_per_slice: int) -> None:
        self.wait(
            lambda: self._hosts.get(slice_index, 0) < hosts_per_slice,
            f"slice {slice_index} down",
        )

    def wait_up(self, slice_index: int, hosts_per_slice: int, timeout: float = TIMEOUT_S) -> None:
        self.wait(
            lambda: self._hosts.get(slice_index, 0) >= hosts_per_slice,
            f"slice {slice_index} up",
            timeout,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with socket.create_connection(self.address, timeout=5) as sock:
                    sock.settimeout(None)
                    self._sock = sock
                    sock.sendall(b"WATCH\n")
                    for line in sock.makefile("r"):
                        if line.startswith("SLICES "):
                            counts = json.loads(line[len("SLICES ") :])
                            hosts = {int(k): int(v) for k, v in counts.items()}
                            with self._cond:
                                self._hosts = hosts
                                self.reports += 1
                                self._cond.notify_all()
                            if self.on_report is not None:
                                self.on_report(dict(hosts))
            except (OSError, ValueError):
                pass
            self._stop.wait(0.1)


class HealthFollower:
    """Turns the manager's reports into losses and repairs of the loop's fake slices.

    Why: whatever ended a worker (an OOM kill, a hung process, a node lost outside the
    toolkit), the loop must meet the slice-down error on its next step, as on Pathways. Slices
    inside a fault of the backend's own are left to that fault's waits; only slices the reports
    took down are brought back by them.
    """

    def __init__(self, cluster: FakeCluster, hosts_per_slice: int) -> None:
        self.cluster = cluster  # its own lose/repair (FakeCluster's), never the API faults
        self.hosts_per_slice = hosts_per_slice
        self._lock = threading.Lock()
        self._ours: set[int] = set()
        self._taken: set[int] = set()
        self._following = False

    def follow(self, watch: SliceHealthWatch) -> None:
        """From now on (the JobSet seen healthy), a host reported gone is a slice loss."""
        with self._lock:
            self._following = True
        watch.on_report = self.on_report
        self.on_report({s: watch.hosts(s) for s in range(self.cluster.num_slices)})

    def begin_fault(self, slice_index: int) -> None:
        with self._lock:
            self._ours.add(slice_index)
            self._taken.discard(slice_index)  # the fault owns it now, down or not

    def end_fault(self, slice_index: int) -> None:
        with self._lock:
            self._ours.discard(slice_index)

    def on_report(self, hosts: dict[int, int]) -> None:
        with self._lock:
            if not self._following:
                return
            for s in range(self.cluster.num_slices):
                if s in self._ours:
                    continue
                whole = hosts.get(s, 0) >= self.hosts_per_slice
                if not whole and self.cluster.state(s) is not SliceState.DOWN:
                    FakeCluster.lose_slice(self.cluster, s)
                    self._taken.add(s)
                elif whole and s in self._taken:
                    self._taken.discard(s)
                    FakeCluster.repair_slice(self.cluster, s)
