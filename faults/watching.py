"""Waiting on the Kubernetes API: one polling helper and one list-then-watch loop.

Why one of each: every piece that waits on the cluster (the control plane's readiness, a
workload settling, a rollback waiting out a terminating Job) polls the same way, and every piece
that follows Pods (the kubelet stand-in, the ``--cluster`` Pod bridge) needs the same care: list
first, watch from that list's resourceVersion, list again after a dropped stream or a 410, and
stop at once when asked. Written once, they cannot drift apart.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Polls ``predicate`` until it returns something truthy; raises TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)


class ListWatch:
    """Follows a collection in a daemon thread: ``on_list`` with every object, then each event.

    ``list_fn`` is a ``list_namespaced_*`` method of the kubernetes client; objects reach the
    callbacks as plain dicts (the API's JSON). Errors are kept in ``errors`` and the loop lists
    again; ``stop`` closes the open stream so the thread ends at once.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        *args: Any,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        name: str = "list-watch",
        timeout_seconds: int = 30,
        **kwargs: Any,
    ) -> None:
        self._list_fn = list_fn
        self._args = args
        self._kwargs = kwargs
        self._on_list = on_list
        self._on_event = on_event
        self._timeout = timeout_seconds
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors: list[str] = []
        self.lists = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()  # unblocks the stream read at once (urllib3 >= 2.3)
        self._thread.join(timeout=timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _call(self, **extra: Any) -> Any:
        return self._list_fn(*self._args, _preload_content=False, **self._kwargs, **extra)

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    listed = json.loads(self._call().data)
                    self.lists += 1
                    self._on_list(listed.get("items") or [])
                    resource_version = listed["metadata"].get("resourceVersion", "")
                response = self._call(
                    watch=True,
                    resource_version=resource_version,
                    timeout_seconds=self._timeout,
                    allow_watch_bookmarks=True,
                )
                self._response = response
                for line in iter_resp_lines(response):
                    if self._stop.is_set():
                        break
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # 410 Gone and friends: list again
                        resource_version = ""
                        break
                    obj = event["object"]
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if event["type"] != "BOOKMARK":
                        self._on_event(event["type"], obj)
                response.release_conn()
            except Exception as error:
                if self._stop.is_set():
                    return
                self.errors.append(str(error)[:200])
                resource_version = ""
                time.sleep(0.05)
