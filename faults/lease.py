"""One armed session per target: a ``coordination.k8s.io`` Lease held for the session.

Why: two armed sessions on one JobSet undo each other's faults and judge each other's
recoveries (three of six tests failed, with no warning). The Lease is the cluster's own lock,
as leader election uses it: the holder renews it every third of its duration, a second session
sees a live holder and refuses in one line naming it, and a holder that dies (SIGKILL, a lost
laptop) stops renewing, so its Lease expires and the next session takes it over.

Why a fence too: a session that stalls (SIGSTOP, a long GC, a network pause) past its Lease
while another takes it over would otherwise wake up and keep injecting, two sessions on one
JobSet. ``check_held`` is called right before every change (the journal calls it before it
records one): the Lease must still name this session and still be at the resourceVersion of
this session's own last write; otherwise ``LeaseLost`` stops the injection, and the session's
own changes are rolled back by its journal's guard as usual.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pathways_chaos.faults.safety import ChaosRefused, call_with_retries

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

LEASE_PREFIX = "pathways-chaos-"
DEFAULT_LEASE_SECONDS = 30


class LeaseHeld(ChaosRefused):
    """Another armed session holds the target's Lease; nothing was changed."""


class LeaseLost(ChaosRefused):
    """This session no longer holds its Lease: it stops injecting (and rolls back its own)."""


def lease_name(jobset: str) -> str:
    return f"{LEASE_PREFIX}{jobset}"[:253]


def holder_identity(run_id: str) -> str:
    return (
        f"{os.environ.get('USER', 'unknown')}@{socket.gethostname()} pid {os.getpid()} run {run_id}"
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _micro(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TargetLease:
    """Holds the Lease ``pathways-chaos-<jobset>`` in the target namespace while entered."""

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        jobset: str,
        run_id: str,
        duration_s: int = DEFAULT_LEASE_SECONDS,
    ) -> None:
        if not 1 <= duration_s <= 2**31 - 1:
            raise ValueError(
                f"lease duration {duration_s} s: use 1 s to {2**31 - 1} s (the API's int32)"
            )
        self.api_client = api_client
        self.namespace = namespace
        self.name = lease_name(jobset)
        self.holder = holder_identity(run_id)
        self.duration_s = duration_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._version: str | None = None  # resourceVersion of this session's last write
        self.renewals = 0
        self.lost: str | None = None
        self.renew_error: str | None = None

    @property
    def _api(self) -> Any:
        from kubernetes import client

        return client.CoordinationV1Api(self.api_client)

    def _body(self, resource_version: str | None, acquired: datetime.datetime) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": self.duration_s,
                "acquireTime": _micro(acquired),
                "renewTime": _micro(_now()),
            },
        }

    def acquire(self) -> None:
        """Takes the Lease, or raises ``LeaseHeld`` naming the live holder."""
        from kubernetes.client.rest import ApiException

        api = self._api
        try:
            current = call_with_retries(
                lambda: api.read_namespaced_lease(self.name, self.namespace),
                retry_on=frozenset({429, 500, 502, 503, 504}),
            )
        except ApiException as error:
            if error.status != 404:
                raise
            try:
                made = api.create_namespaced_lease(self.namespace, self._body(None, _now()))
                self._version = made.metadata.resource_version
                return
            except ApiException as create_error:
                if create_error.status != 409:  # 409: someone created it just now
                    raise
                current = api.read_namespaced_lease(self.name, self.namespace)
        spec = current.spec
        if spec.holder_identity and spec.holder_identity != self.holder:
            renewed = spec.renew_time or spec.acquire_time
            duration = spec.lease_duration_seconds or self.duration_s
            if renewed is not None:
                age = (_now() - renewed).total_seconds()
                if age < duration:
                    raise LeaseHeld(
                        f"refused: {self.namespace}/{self.name.removeprefix(LEASE_PREFIX)} is "
                        f"held by another armed session ({spec.holder_identity}), renewed "
                        f"{max(age, 0):.0f} s ago; its lease expires {duration - age:.0f} s after "
                        "its holder stops: wait for it or stop that session"
                    )
        try:  # free or expired: take it (409 if another session took it first)
            taken = api.replace_namespaced_lease(
                self.name,
                self.namespace,
                self._body(current.metadata.resource_version, _now()),
            )
            self._version = taken.metadata.resource_version
        except ApiException as error:
            if error.status == 409:
                raise LeaseHeld(
                    f"refused: {self.namespace}/{self.name} was just taken by another armed "
                    "session: wait for it or stop that session"
                ) from None
            raise

    def renew(self) -> None:
        with self._lock:
            if self.lost:
                return  # a lost Lease is never taken back silently
            api = self._api
            current = api.read_namespaced_lease(self.name, self.namespace)
            if self._lost_to(current):
                return
            acquired = current.spec.acquire_time or _now()
            renewed = api.replace_namespaced_lease(
                self.name, self.namespace, self._body(current.metadata.resource_version, acquired)
            )
            self._version = renewed.metadata.resource_version
            self.renewals += 1

    def _lost_to(self, current: Any) -> bool:
        """Records (and says) a loss: another holder, or a write since this session's last."""
        if current.spec.holder_identity != self.holder:
            self.lost = (
                f"lease {self.namespace}/{self.name} was taken over by "
                f"{current.spec.holder_identity or 'nobody'}"
            )
        elif self._version is not None and current.metadata.resource_version != self._version:
            self.lost = (
                f"lease {self.namespace}/{self.name} was written by someone else since this "
                f"session's last renewal (resourceVersion {current.metadata.resource_version}, "
                f"not {self._version})"
            )
        return self.lost is not None

    def check_held(self) -> None:
        """The fence, called right before every change: raises ``LeaseLost`` unless still ours.

        A Lease that expired while this session stalled but that nobody took is renewed here
        (with its resourceVersion as precondition: a racing taker wins, and this one stops).
        """
        from kubernetes.client.rest import ApiException

        with self._lock:
            if not self.lost:
                current = call_with_retries(
                    lambda: self._api.read_namespaced_lease(self.name, self.namespace),
                    retry_on=frozenset({429, 500, 502, 503, 504}),
                )
                if not self._lost_to(current) and self._expired(current):
                    try:
                        renewed = self._api.replace_namespaced_lease(
                            self.name,
                            self.namespace,
                            self._body(
                                current.metadata.resource_version,
                                current.spec.acquire_time or _now(),
                            ),
                        )
                        self._version = renewed.metadata.resource_version
                    except ApiException as error:
                        if error.status != 409:
                            raise
                        self.lost = f"lease {self.namespace}/{self.name} was taken meanwhile"
            if self.lost:
                raise LeaseLost(
                    f"refused: this session lost its Lease ({self.lost}): it stopped injecting; "
                    "its own changes are rolled back by its journal"
                )

    def _expired(self, current: Any) -> bool:
        return _durations_unrenewed(current.spec, self.duration_s) >= 1

    def release(self) -> None:
        """Deletes the Lease if it is still ours (a successor's is left alone)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            current = self._api.read_namespaced_lease(self.name, self.namespace)
            if current.spec.holder_identity == self.holder:
                self._api.delete_namespaced_lease(
                    self.name,
                    self.namespace,
                    body=client.V1DeleteOptions(
                        preconditions=client.V1Preconditions(uid=current.metadata.uid)
                    ),
                )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _renew_loop(self) -> None:
        interval = max(self.duration_s / 3, 0.2)
        while not self._stop.wait(interval):
            try:
                self.renew()
            except Exception as error:  # a missed renewal is retried at the next tick
                self.renew_error = f"renewing lease {self.namespace}/{self.name} failed: {error}"

    def __enter__(self) -> Self:
        self.acquire()
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"lease-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.release()


def check_holder(api_client: ApiClient, namespace: str, jobset: str, holder: str) -> None:
    """The fence of a process that acts for the session holding the Lease (an episode's child
    process): raises ``LeaseLost`` unless the Lease still names ``holder`` and has not expired.

    The holding session renews it; this one only reads it, so it never takes a Lease over.
    """
    from kubernetes import client

    name = lease_name(jobset)
    current: Any = call_with_retries(
        lambda: client.CoordinationV1Api(api_client).read_namespaced_lease(name, namespace),
        retry_on=frozenset({429, 500, 502, 503, 504}),
    )
    spec = current.spec
    if spec.holder_identity != holder:
        raise LeaseLost(
            f"refused: lease {namespace}/{name} is held by {spec.holder_identity or 'nobody'}, "
            f"not by this session ({holder}): stopped before the change"
        )
    # The session renews every third of the duration and, when it finds its Lease expired
    # but not taken, takes it back: a renewal or two missed in an API blip is not a loss.
    # Three durations without one is a session that stopped (a child dies with it anyway).
    if _durations_unrenewed(spec, DEFAULT_LEASE_SECONDS) >= 3:
        raise LeaseLost(
            f"refused: lease {namespace}/{name} expired (the session stopped renewing it): "
            "stopped before the change"
        )


def live_holder(api_client: ApiClient, namespace: str, jobset: str, run_id: str) -> str | None:
    """The holder identity when session ``run_id`` still holds the target's Lease (renewed
    within its duration), else None: a dead session's changes are anyone's to undo."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        current: Any = client.CoordinationV1Api(api_client).read_namespaced_lease(
            lease_name(jobset), namespace
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    spec = current.spec
    holder = str(spec.holder_identity or "")
    if not run_id or not holder.endswith(f" run {run_id}"):
        return None
    return None if _durations_unrenewed(spec, DEFAULT_LEASE_SECONDS) >= 1 else holder


def _durations_unrenewed(spec: Any, default_s: int) -> float:
    """How many of its durations a Lease has gone without a renewal (infinite: never held)."""
    renewed = spec.renew_time or spec.acquire_time
    if renewed is None:
        return float("inf")
    duration = spec.lease_duration_seconds or default_s
    return (_now() - renewed).total_seconds() / duration
