"""The worker-restarts manifest check: a lost worker pod must be recreated, or the JobSet
restarted, for training to go on."""

from __future__ import annotations

from pathways_chaos.harness.acceptance.manifest import ELASTIC_FLAGS, PROXY, Manifest, Pod
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.engine.untrusted_files import shown

TITLE = "a lost worker pod is recreated, or the JobSet restarted (backoffLimit, failurePolicy)"
FIX = (
    "give the worker replicatedJob a backoffLimit above 0 (pathwaysutils' generator writes VMs "
    "per slice x max_slice_restarts), or a podFailurePolicy rule {action: Ignore, "
    "onPodConditions: [{type: DisruptionTarget}]} (Kubernetes then wants restartPolicy: Never "
    "on the pod template), so a lost pod is recreated and its slice comes back"
)


def check_worker_restarts(m: Manifest) -> CheckResult:
    """A worker Job with ``backoffLimit: 0`` fails at its first lost pod (a node gone takes the
    pod with it, whatever its ``restartPolicy``), unless its ``podFailurePolicy`` ignores a
    disrupted pod. The JobSet then fails, which ends the training (a finding), or restarts
    every job, the JAX client's too: the guide's recovery without elastic training, and with
    it a recovery from the last checkpoint instead of an elastic one (said in the reason).
    pathwaysutils' generator writes the worker's ``backoffLimit`` as VMs x
    ``max_slice_restarts``."""
    if not m.worker_pods:
        return CheckResult(
            "worker-restarts",
            TITLE,
            FIX,
            skipped="no worker replicatedJob in the JobSet (a client of a shared Pathways "
            "service?): no worker Job here to recreate a pod",
        )
    elastic = any(flag in c.flags for c in m.role(PROXY) for flag in ELASTIC_FLAGS)
    findings: list[Finding] = []
    restarts: list[str] = []
    for p in m.worker_pods:
        unreadable = _unreadable(p)
        findings += unreadable
        if p.backoff_limit != 0 or unreadable or p.ignores_disruption:
            continue
        if p.max_restarts or p.restarts_ignoring_max:
            restarts.append(p.job)
            continue
        findings.append(
            Finding(
                p.where,
                "backoffLimit: 0 and no podFailurePolicy ignoring DisruptionTarget: a worker pod "
                "lost with its node fails the Job at once, and the JobSet with it "
                "(failurePolicy.maxRestarts is 0, no rule restarts it): the training ends",
            )
        )
    note = "every worker Job may recreate a lost pod"
    if restarts:
        note = f"a lost {', '.join(restarts)} pod restarts the whole JobSet, the JAX client too"
        note += (
            ": recovery from the last checkpoint, not elastic (for elastic recovery let the "
            "worker Job recreate its pod: backoffLimit above 0)"
            if elastic
            else " (no elastic flag on the proxy: the guide's recovery by restart)"
        )
    return CheckResult("worker-restarts", TITLE, FIX, tuple(dict.fromkeys(findings)), note)


def _unreadable(p: Pod) -> list[Finding]:
    """Fields Kubernetes would refuse, each said once per JobSet (``where`` names the job for
    ``backoffLimit``, the JobSet's file for ``maxRestarts``)."""
    out = []
    for field, value, where in (
        ("backoffLimit", p.backoff_limit, p.where),
        ("failurePolicy.maxRestarts", p.max_restarts, p.label),
    ):
        if value is not None and not (type(value) is int and value >= 0):
            out.append(
                Finding(
                    where,
                    f"{field} {shown(value)} is not a whole number >= 0: Kubernetes refuses the "
                    "JobSet",
                )
            )
    return out
