"""The worker Pods of a JobSet, slice by slice, as a watch sees them.

Why: a fault acted out through the API is over only when the cluster shows it (the Pods gone,
their replacements running), and a Pod that dies without a fault of ours is a slice loss the
loop must meet. Both the judging process and an episode's child process keep one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pathways_chaos.faults.jobset import JOB_INDEX_LABEL, workers_selector
from pathways_chaos.faults.watching import ListWatch

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

#: Real seconds to wait for the API to show what a fault did (a watch event, a Pod running).
OBSERVE_TIMEOUT_S = 30.0


class Target(Protocol):
    """Which JobSet: a ``ClusterSpec`` is one."""

    @property
    def namespace(self) -> str: ...
    @property
    def jobset(self) -> str: ...


class PodBridge:
    """Watches a JobSet's worker Pods and keeps, per slice, which Pods are running."""

    def __init__(self, api: ApiClient, spec: Target, on_lost: Callable[[int], None]) -> None:
        self.api = api
        self.spec = spec
        self._on_lost = on_lost
        self._cond = threading.Condition()
        self._pods: dict[str, tuple[int, str, bool]] = {}  # name -> (slice, phase, deleting)
        self._expected: set[int] = set()
        self._watch: ListWatch | None = None
        self.seen_events = 0

    def start(self) -> None:
        self._run()
        self.wait(lambda: self.seen_events > 0 or bool(self._pods), "the first Pod list")

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def expect_loss(self, slice_index: int) -> None:
        with self._cond:
            self._expected.add(slice_index)

    def running_names(self, slice_index: int) -> set[str]:
        with self._cond:
            return {
                name
                for name, (s, phase, deleting) in self._pods.items()
                if s == slice_index and phase == "Running" and not deleting
            }

    def running(self, slice_index: int) -> int:
        return len(self.running_names(slice_index))

    def wait(self, predicate: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + OBSERVE_TIMEOUT_S
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"bridge: {what} not seen within {OBSERVE_TIMEOUT_S} s")
                self._cond.wait(min(left, 0.5))

    def _run(self) -> None:
        """Runs the shared list-then-watch loop (a fresh list on every reconnect: a Pod
        deleted while the watch was down must not linger as running)."""
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api)
        selector = workers_selector(self.spec.jobset)
        self._watch = ListWatch(
            core.list_namespaced_pod,
            self.spec.namespace,
            label_selector=selector,
            on_list=self._reset,
            on_event=self._apply,
            name="pathways-chaos-bridge",
            timeout_seconds=5,
        )
        self._watch.start()

    @staticmethod
    def _slice_of(pod: dict[str, Any]) -> int:
        return int((pod["metadata"].get("labels") or {}).get(JOB_INDEX_LABEL, -1))

    def _reset(self, pods: list[dict[str, Any]]) -> None:
        with self._cond:
            self._pods = {
                p["metadata"]["name"]: (
                    self._slice_of(p),
                    (p.get("status") or {}).get("phase") or "Pending",
                    p["metadata"].get("deletionTimestamp") is not None,
                )
                for p in pods
            }
            self.seen_events += 1
            self._cond.notify_all()

    def _apply(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        s = self._slice_of(pod)
        gone = kind == "DELETED" or pod["metadata"].get("deletionTimestamp") is not None
        lost = None
        with self._cond:
            self.seen_events += 1
            was = self._pods.get(name)
            if kind == "DELETED":
                self._pods.pop(name, None)
            else:
                self._pods[name] = (s, (pod.get("status") or {}).get("phase") or "Pending", gone)
            if gone and was is not None and not was[2]:
                if s in self._expected:
                    self._expected.discard(s)
                else:
                    lost = s  # a Pod died without a fault of ours
            self._cond.notify_all()
        if lost is not None:
            self._on_lost(lost)
