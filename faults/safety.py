"""Blast-radius rules for faults against a real cluster, and how a write is made and confirmed.

Why separate from the injectors: every Kubernetes fault passes the same gate before it reads or
changes anything, and every write meets the same unreliable network, so the rules live in one
place and are tested once. Kube-monkey (dry run by default, namespace allow lists) and Chaos
Monkey (``leashed``) are the precedents.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from pathways_chaos.harness.errors import ChaosError

T = TypeVar("T")

#: Pods, Jobs and Nodes a fault may touch must carry this label with value ``"true"``.
OPT_IN_LABEL = "pathways-chaos/opt-in"
OPT_IN_VALUE = "true"

#: Annotation put on a Node we cordoned (value: our run id), so we never uncordon a Node that
#: someone else cordoned.
CORDONED_BY_ANNOTATION = "pathways-chaos/cordoned-by"
#: Annotation on a Job re-created by a rollback (value: ``<run id>#<journal seq>``), so a lost
#: answer to the create can be told from someone else's Job of the same name.
RECREATED_BY_ANNOTATION = "pathways-chaos/recreated-by"
#: Prefix of the field manager every write of a run uses (``pathways-chaos-<run id>``): the
#: server's managedFields then say whether a field we set was set again by someone else since.
FIELD_MANAGER_PREFIX = "pathways-chaos-"


def field_manager(run_id: str) -> str:
    return f"{FIELD_MANAGER_PREFIX}{run_id}"


class ChaosRefused(ChaosError, PermissionError):
    """A fault was asked to touch something outside its blast radius; nothing was changed."""

    exit_code = 3


def check_namespace(namespace: str, allowed: Iterable[str]) -> None:
    allowed = frozenset(allowed)
    if namespace not in allowed:
        shown = ", ".join(sorted(allowed)) or "none"
        raise ChaosRefused(
            f"refused: namespace {namespace!r} is not in the allowed namespaces ({shown}); "
            "add it with --chaos-allow-namespace"
        )


def check_opted_in(
    kind: str, name: str, labels: Mapping[str, str] | None, label: str = OPT_IN_LABEL
) -> None:
    if (labels or {}).get(label) != OPT_IN_VALUE:
        raise ChaosRefused(
            f"refused: {kind} {name!r} has no opt-in label {label}={OPT_IN_VALUE}; "
            "label it to allow chaos"
        )


#: HTTP answers worth retrying: conflict (re-read and retry), not found (a cache behind), too
#: many requests (eviction blocked by a PodDisruptionBudget, or throttling), server errors.
RETRYABLE_STATUSES = frozenset({404, 409, 429, 500, 502, 503, 504})
#: For reads whose 404 means something (gone): retried on everything else that is transient.
RETRY_READS = frozenset(RETRYABLE_STATUSES - {404})
#: Answers after which a write may or may not have happened: the server (or a proxy in front of
#: it) may have applied it and lost the answer. Only a fresh read tells.
UNKNOWN_OUTCOME_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


def retry_delays(attempts: int = 5, base: float = 0.05, cap: float = 2.0) -> list[float]:
    """Exponential backoff: the sleeps between ``attempts`` tries (bounded: never forever)."""
    return [min(cap, base * 2**i) for i in range(attempts - 1)]


def api_status(error: BaseException) -> int | None:
    status = getattr(error, "status", None)
    return status if isinstance(status, int) and status else None


def is_transport_error(error: BaseException) -> bool:
    """A timeout or a dropped connection: the request may have reached the server or not."""
    if isinstance(error, (TimeoutError, ConnectionError)):
        return True
    module = type(error).__module__
    return module.startswith("urllib3") or module.startswith("http.client")


def outcome_unknown(error: BaseException) -> bool:
    """True when a write that raised this may still have been applied."""
    return api_status(error) in UNKNOWN_OUTCOME_STATUSES or is_transport_error(error)


def call_with_retries[T](
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base: float = 0.05,
    cap: float = 2.0,
    retry_on: frozenset[int] = RETRYABLE_STATUSES,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Calls ``fn`` until it succeeds, retrying API answers in ``retry_on`` with backoff.

    ``fn`` must be safe to call again (a read, or a write that re-reads first). Timeouts and
    dropped connections are retried too. The last error is raised once the attempts are spent;
    anything else is raised at once.
    """
    delays = retry_delays(attempts, base, cap)
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as error:
            retryable = api_status(error) in retry_on or is_transport_error(error)
            if not retryable or attempt == attempts - 1:
                raise
            sleep(_delay(error, delays[attempt], cap))
    raise AssertionError("unreachable")  # pragma: no cover


def write_confirmed[T](
    write: Callable[[], T],
    confirm: Callable[[], T | None],
    *,
    attempts: int = 5,
    base: float = 0.05,
    cap: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Makes a write whose answer may be lost, learning from a fresh read whether it happened.

    ``write()`` makes the change (with preconditions: a uid, a resourceVersion) and returns what
    to report. When it fails with a timeout, a 5xx, a 429 or a 409, ``confirm()`` re-reads the
    object: it returns what to report if the change is in place (ours), raises if the object is
    now in a state nobody should write over, and returns None when the change did not happen,
    in which case the write is tried again, bounded. Never "already done by someone else" for a
    change that was our own lost answer.
    """
    delays = retry_delays(attempts, base, cap)
    for attempt in range(attempts):
        try:
            return write()
        except Exception as error:
            if not outcome_unknown(error):
                raise
            seen = call_with_retries(confirm, attempts=attempts, base=base, cap=cap, sleep=sleep)
            if seen is not None:
                return seen
            if attempt == attempts - 1:
                raise
            sleep(_delay(error, delays[attempt], cap))
    raise AssertionError("unreachable")  # pragma: no cover


def _delay(error: BaseException, delay: float, cap: float) -> float:
    retry_after = _retry_after_seconds(error)
    if retry_after is not None:
        delay = min(cap, max(delay, retry_after))
    return delay


def _retry_after_seconds(error: BaseException) -> float | None:
    headers = getattr(error, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
