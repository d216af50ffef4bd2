"""Blast-radius rules for faults against a real cluster: arming, namespace allowlist, opt-in label.

Why separate from the injectors: every Kubernetes fault passes the same gate before it reads or
changes anything, so the rules live in one place and are tested once. Kube-monkey (dry run by
default, namespace allow lists) and Chaos Monkey (``leashed``) are the precedents.
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


class ChaosRefused(ChaosError, PermissionError):
    """A fault was asked to touch something outside its blast radius; nothing was changed."""


def check_namespace(namespace: str, allowed: Iterable[str]) -> None:
    allowed = frozenset(allowed)
    if namespace not in allowed:
        shown = ", ".join(sorted(allowed)) or "none"
        raise ChaosRefused(
            f"refused: namespace {namespace!r} is not in the allowed namespaces ({shown})"
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


def retry_delays(attempts: int = 5, base: float = 0.05, cap: float = 2.0) -> list[float]:
    """Exponential backoff: the sleeps between ``attempts`` tries (bounded: never forever)."""
    return [min(cap, base * 2**i) for i in range(attempts - 1)]


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

    ``fn`` must be safe to call again (re-read before a write, so a 409 is resolved by trying
    with fresh state). The last error is raised once the attempts are spent; anything that is
    not an API error with a retryable status is raised at once.
    """
    delays = retry_delays(attempts, base, cap)
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as error:
            status = getattr(error, "status", None)
            if status not in retry_on or attempt == attempts - 1:
                raise
            delay = delays[attempt]
            retry_after = _retry_after_seconds(error)
            if retry_after is not None:
                delay = min(cap, max(delay, retry_after))
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def _retry_after_seconds(error: BaseException) -> float | None:
    headers = getattr(error, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
