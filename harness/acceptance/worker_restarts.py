"""The worker-restarts manifest check: a lost worker pod must be recreated for its slice to
come back to an elastic loop."""

from __future__ import annotations

from pathways_chaos.harness.acceptance.manifest import ELASTIC_FLAGS, PROXY, Manifest
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.engine.untrusted_files import shown


def check_worker_restarts(m: Manifest) -> CheckResult:
    """A worker Job with ``backoffLimit: 0`` fails at its first lost pod (a node gone takes the
    pod with it, whatever its ``restartPolicy``), unless its ``podFailurePolicy`` ignores a
    disrupted pod; the JobSet then fails, or restarts every job, the JAX client's too. Without
    elastic training that restart is the guide's recovery; with it (an elastic flag on the
    proxy), no slice ever comes back to the loop. pathwaysutils' generator writes the worker's
    ``backoffLimit`` as VMs x ``max_slice_restarts``."""
    if not m.worker_pods:
        return CheckResult(
            "worker-restarts",
            WORKER_RESTARTS_TITLE,
            WORKER_RESTARTS_FIX,
            skipped="no worker replicatedJob in the JobSet (a client of a shared Pathways "
            "service?): no worker Job here to recreate a pod",
        )
    elastic = any(flag in c.flags for c in m.role(PROXY) for flag in ELASTIC_FLAGS)
    findings: list[Finding] = []
    restarts: list[str] = []
    for p in m.worker_pods:
        unreadable = [
            Finding(
                p.where,
                f"{field} {shown(value)} is not a whole number >= 0: Kubernetes refuses the JobSet",
            )
            for field, value in (("backoffLimit", p.backoff_limit), ("maxRestarts", p.max_restarts))
            if value is not None and not (type(value) is int and value >= 0)
        ]
        findings += unreadable
        if p.backoff_limit != 0 or unreadable or p.ignores_disruption:
            continue
        if p.max_restarts and not elastic:  # the guide's recovery without elastic training
            restarts.append(f"{p.job}: a lost worker restarts the JobSet ({p.max_restarts} times)")
            continue
        then = (
            "the JobSet then fails (failurePolicy.maxRestarts is 0)"
            if not p.max_restarts
            else f"the JobSet then restarts every job (maxRestarts {p.max_restarts}), the JAX "
            "client's too: the elastic loop never sees the slice come back"
        )
        findings.append(
            Finding(
                p.where,
                "backoffLimit: 0 and no podFailurePolicy ignoring DisruptionTarget: a worker pod "
                f"lost with its node fails the Job at once, and {then}",
            )
        )
    return CheckResult(
        "worker-restarts",
        WORKER_RESTARTS_TITLE,
        WORKER_RESTARTS_FIX,
        tuple(findings),
        "; ".join(restarts) + " (no elastic flag on the proxy: recovery by restart)"
        if restarts
        else "every worker Job may recreate a lost pod",
    )


WORKER_RESTARTS_TITLE = (
    "a lost worker pod is recreated (the worker Job's backoffLimit, podFailurePolicy)"
)
WORKER_RESTARTS_FIX = (
    "give the worker replicatedJob a backoffLimit above 0 (pathwaysutils' generator writes VMs "
    "per slice x max_slice_restarts), or a podFailurePolicy rule {action: Ignore, "
    "onPodConditions: [{type: DisruptionTarget}]}, so a lost pod is recreated and its slice "
    "comes back"
)
