"""Kubernetes faults on a Pathways JobSet: kill, evict, cordon, drain, taint, delete a slice's Job.

Each fault names a slice index and finds its targets the way a Pathways JobSet labels them
(``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name=worker``, ``job-index=<slice>``); a
slice's Nodes are the Nodes its worker Pods run on. Each returns one line per object it changed,
nothing else. Against a cluster, nothing changes unless the target is armed; every change is
journalled (see faults/journal.py) before it is made.

Nothing heavy is imported at module load (faults.model imports this module to register kinds).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, ClassVar

from pathways_chaos.faults.jobset import (
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
)
from pathways_chaos.faults.kube_target import (
    KubeTarget,
    Settled,
    TargetNotFound,
    fault_identity,
    heal_from_journal,
    journal_of,
    kube_target_of,
    settled_write,
)
from pathways_chaos.faults.model import Fault, FaultSpecError
from pathways_chaos.faults.safety import (
    CORDONED_BY_ANNOTATION,
    RETRYABLE_STATUSES,
    api_status,
    check_opted_in,
)
from pathways_chaos.faults.undo import job_manifest_for_recreate

__all__ = [
    "JOBSET_NAME_LABEL",
    "JOB_INDEX_LABEL",
    "KUBERNETES_FAULTS",
    "REPLICATED_JOB_LABEL",
    "WORKER_REPLICATED_JOB",
    "KubeTarget",
    "TargetNotFound",
]

#: Taints GKE-style disruptions put on a Node. ``key``/``effect`` parameters override them.
TAINT_REASONS: dict[str, tuple[str, str, str]] = {
    "maintenance": ("cloud.google.com/active-node-maintenance", "true", "NoSchedule"),
    "preemption": ("cloud.google.com/impending-node-termination", "true", "NoSchedule"),
}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

#: For deletes and evictions a 404 means "already gone": handled, not retried.
_RETRY_BUT_NOT_404 = frozenset(RETRYABLE_STATUSES - {404})


# -- Pods ---------------------------------------------------------------------------------


def _controller(pod: Any) -> str | None:
    """``Kind/name`` of the Pod's controller (its Job, ReplicaSet...), or None."""
    for ref in pod.metadata.owner_references or []:
        if ref.controller:
            return f"{ref.kind}/{ref.name}"
    return None


def _pod_gone_or_going(target: KubeTarget, pod: Any) -> str | None:
    """After an answer was lost: 'gone' if this Pod (same uid) is deleted or terminating."""
    from kubernetes.client.rest import ApiException

    ns, name, uid = target.namespace, pod.metadata.name, pod.metadata.uid
    try:
        current = target.retry(
            lambda: target.core.read_namespaced_pod(name, ns), _RETRY_BUT_NOT_404
        )
    except ApiException as error:
        if error.status == 404:
            return "gone"
        raise
    if current.metadata.uid != uid:
        return "gone"  # a replacement holds the name: ours is gone
    if current.metadata.deletion_timestamp is not None:
        return "gone"
    return None


def _delete_pod(target: KubeTarget, pod: Any, grace: int | None, fault: Fault[Any]) -> str | None:
    """Deletes exactly this Pod (uid precondition); None when it was already gone."""
    from kubernetes import client

    ns, name, uid = target.namespace, pod.metadata.name, pod.metadata.uid
    # Is the Pod there (and the same one) before we journal anything?
    if _pod_gone_or_going(target, pod) is not None:
        target.echo(f"pod {ns}/{name} already gone")
        return None
    journal_of(target).record(
        "delete_pod",
        namespace=ns,
        name=name,
        uid=uid,
        grace=grace,
        owner=_controller(pod),
        fault=fault_identity(fault),
    )
    body = client.V1DeleteOptions(
        grace_period_seconds=grace, preconditions=client.V1Preconditions(uid=uid)
    )
    shown = "its own grace period" if grace is None else f"grace {grace}s"
    done = f"deleted pod {ns}/{name} on node {pod.spec.node_name} ({shown})"

    def write() -> str | None:
        try:
            target.core.delete_namespaced_pod(name, ns, body=body)
        except Exception as error:
            if api_status(error) == 404:  # first try: it went on its own before we asked
                raise Settled(f"pod {ns}/{name} already gone") from None
            raise
        return done

    def confirm() -> str | None:
        return done if _pod_gone_or_going(target, pod) else None

    result: str | None = settled_write(target, write, confirm)
    return result


def _evict_pod(target: KubeTarget, pod: Any, fault: Fault[Any]) -> str | None:
    ns, name, uid = target.namespace, pod.metadata.name, pod.metadata.uid
    if _pod_gone_or_going(target, pod) is not None:
        target.echo(f"pod {ns}/{name} already gone")
        return None
    journal_of(target).record(
        "evict_pod",
        namespace=ns,
        name=name,
        uid=uid,
        owner=_controller(pod),
        fault=fault_identity(fault),
    )
    # policy/v1beta1: the Eviction version every server from 1.20 on accepts.
    body = {
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
        "deleteOptions": {"preconditions": {"uid": uid}},
    }
    done = f"evicted pod {ns}/{name} from node {pod.spec.node_name}"
    refused_by_pdb: list[bool] = []

    def write() -> str | None:
        try:
            target.core.create_namespaced_pod_eviction(name, ns, body)
        except Exception as error:
            status = api_status(error)
            if status == 404:
                raise Settled(f"pod {ns}/{name} already gone") from None
            if status == 429:
                refused_by_pdb.append(True)
            raise
        return done

    def confirm() -> str | None:
        return done if _pod_gone_or_going(target, pod) else None

    try:
        result: str | None = settled_write(target, write, confirm)
    except Exception as error:
        if api_status(error) == 429 and refused_by_pdb:
            target.echo(f"pod {ns}/{name} not evicted: its PodDisruptionBudget refused (429)")
            return None
        raise
    return result


@dataclasses.dataclass(frozen=True)
class KillPods(Fault[KubeTarget]):
    """Deletes a slice's worker Pods, as a host failure or ``kubectl delete pod`` does.

    ``grace=-1`` uses each Pod's own ``terminationGracePeriodSeconds``; ``grace=0`` kills at once.
    """

    kind: ClassVar[str] = "kill_pods"
    needs_kubernetes: ClassVar[bool] = True
    signed_params: ClassVar[frozenset[str]] = frozenset({"grace"})
    slice: int
    grace: int = -1

    def __post_init__(self) -> None:
        _check_slice(self)
        if self.grace < -1:
            raise FaultSpecError(f"kill_pods: grace={self.grace}: use -1 (the Pod's own) or >= 0")

    def describe(self) -> str:
        how = "with each Pod's own grace period" if self.grace < 0 else f"with grace {self.grace}s"
        return f"kill slice {self.slice}'s worker Pods {how}"

    def inject(self, target: KubeTarget) -> list[str]:
        target = kube_target_of(target, self)
        target.check()
        pods = target.slice_pods(self.slice)
        grace = None if self.grace < 0 else self.grace
        if not target.armed:
            return target.dry(f"delete pod {target.namespace}/{p.metadata.name}" for p in pods)
        lines = [_delete_pod(target, pod, grace, self) for pod in pods]
        return [line for line in lines if line]


@dataclasses.dataclass(frozen=True)
class EvictPods(Fault[KubeTarget]):
    """Evicts a slice's worker Pods through the Eviction API (honours PodDisruptionBudgets)."""

    kind: ClassVar[str] = "evict_pods"
    needs_kubernetes: ClassVar[bool] = True
    slice: int

    def __post_init__(self) -> None:
        _check_slice(self)

    def describe(self) -> str:
        return f"evict slice {self.slice}'s worker Pods"

    def inject(self, target: KubeTarget) -> list[str]:
        target = kube_target_of(target, self)
        target.check()
        pods = target.slice_pods(self.slice)
        if not target.armed:
            return target.dry(f"evict pod {target.namespace}/{p.metadata.name}" for p in pods)
        lines = [_evict_pod(target, pod, self) for pod in pods]
        return [line for line in lines if line]


def _check_slice(fault: Any) -> None:
    if fault.slice < 0:
        raise FaultSpecError(f"{fault.kind}: slice={fault.slice}: use a slice index >= 0")


# -- Nodes --------------------------------------------------------------------------------


def _cordoned_by(node: Any, run: str) -> bool:
    marker = (node.metadata.annotations or {}).get(CORDONED_BY_ANNOTATION)
    return bool(node.spec.unschedulable) and marker == run


def _cordon(target: KubeTarget, node: Any, fault: Fault[Any]) -> str | None:
    """Cordons a Node we did not find cordoned, marking it ours; None when left alone.

    A lost answer is resolved by reading the Node back: our mark there means our cordon landed.
    """
    name, uid = node.metadata.name, node.metadata.uid
    journal = journal_of(target)
    run = journal.run_id
    current = target.retry(functools.partial(target.core.read_node, name))
    if current.spec.unschedulable:
        whose = "by this run" if _cordoned_by(current, run) else "not by this run"
        target.echo(f"node {name} already cordoned ({whose}); left alone")
        return None
    journal.record(
        "cordon",
        node=name,
        uid=uid,
        set={"spec.unschedulable": True, f"annotations.{CORDONED_BY_ANNOTATION}": run},
        fault=fault_identity(fault),
    )
    first = [current]

    def write() -> str:
        fresh = first.pop() if first else target.core.read_node(name)
        if fresh.metadata.uid != uid:
            raise Settled(f"node {name} was replaced meanwhile; left alone")
        if fresh.spec.unschedulable:
            if _cordoned_by(fresh, run):
                return f"cordoned node {name}"
            raise Settled(f"node {name} was cordoned by someone else meanwhile; left alone")
        body = {
            "metadata": {
                "resourceVersion": fresh.metadata.resource_version,
                "annotations": {CORDONED_BY_ANNOTATION: run},
            },
            "spec": {"unschedulable": True},
        }
        # 409 when someone changed the Node since the read: confirm() reads, write() retries.
        target.core.patch_node(name, body, field_manager=journal.field_manager)
        return f"cordoned node {name}"

    def confirm() -> str | None:
        fresh = target.core.read_node(name)
        return f"cordoned node {name}" if _cordoned_by(fresh, run) else None

    result: str | None = settled_write(target, write, confirm)
    return result


@dataclasses.dataclass(frozen=True)
class CordonNodes(Fault[KubeTarget]):
    """Marks a slice's Nodes unschedulable; heal uncordons only the Nodes this fault cordoned."""

    kind: ClassVar[str] = "cordon_nodes"
    needs_kubernetes: ClassVar[bool] = True
    slice: int

    def __post_init__(self) -> None:
        _check_slice(self)

    def describe(self) -> str:
        return f"cordon slice {self.slice}'s Nodes"

    def inject(self, target: KubeTarget) -> list[str]:
        target = kube_target_of(target, self)
        target.check()
        nodes = target.slice_nodes(self.slice)
        if not target.armed:
            return target.dry(f"cordon node {n.metadata.name}" for n in nodes)
        lines = [_cordon(target, node, self) for node in nodes]
        return [line for line in lines if line]

    def heal(self, target: KubeTarget) -> list[str]:
        return heal_from_journal(self, target)


@dataclasses.dataclass(frozen=True)
class DrainNodes(Fault[KubeTarget]):
    """Cordons a slice's Nodes and evicts the opted-in Pods of the target namespace on them.

    As ``kubectl drain``: a Pod that no controller owns is not evicted (nothing would bring it
    back) unless ``force=true``. Pods of other namespaces on those Nodes are outside the blast
    radius and are left alone.
    """

    kind: ClassVar[str] = "drain_nodes"
    needs_kubernetes: ClassVar[bool] = True
    slice: int
    force: bool = False

    def __post_init__(self) -> None:
        _check_slice(self)

    def describe(self) -> str:
        return f"drain slice {self.slice}'s Nodes" + (" (force)" if self.force else "")

    def inject(self, target: KubeTarget) -> list[str]:
        target = kube_target_of(target, self)
        target.check()
        nodes = target.slice_nodes(self.slice)
        pods: list[Any] = []
        for node in nodes:
            selector = f"spec.nodeName={node.metadata.name}"
            found = target.retry(
                functools.partial(
                    target.core.list_namespaced_pod, target.namespace, field_selector=selector
                )
            )
            for pod in sorted(found.items, key=lambda p: p.metadata.name):
                if pod.metadata.deletion_timestamp is not None:
                    continue
                check_opted_in(
                    "Pod",
                    f"{target.namespace}/{pod.metadata.name}",
                    pod.metadata.labels,
                    target.opt_in_label,
                )
                if _controller(pod) is None and not self.force:
                    target.echo(
                        f"pod {target.namespace}/{pod.metadata.name} left alone: no controller "
                        "owns it, so nothing would recreate it (drain_nodes force=true evicts "
                        "it, as kubectl drain --force)"
                    )
                    continue
                pods.append(pod)
        if not target.armed:
            return target.dry(
                [f"cordon node {n.metadata.name}" for n in nodes]
                + [f"evict pod {target.namespace}/{p.metadata.name}" for p in pods]
            )
        lines = [_cordon(target, node, self) for node in nodes]
        lines += [_evict_pod(target, pod, self) for pod in pods]
        return [line for line in lines if line]

    def heal(self, target: KubeTarget) -> list[str]:
        return heal_from_journal(self, target)


def _now_stamp() -> str:
    """A ``timeAdded`` for our taint: second resolution, as the API stores it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclasses.dataclass(frozen=True)
class TaintNode(Fault[KubeTarget]):
    """Taints a slice's Node as GKE maintenance or preemption does (``host=-1``: every Node).

    ``key`` and ``effect`` default to the reason's; a taint already present is left alone (it
    is someone else's) and heal removes only the taint this fault added, recognised by its
    ``timeAdded`` stamp, so an identical taint GKE puts back later is never removed.
    """

    kind: ClassVar[str] = "taint_node"
    needs_kubernetes: ClassVar[bool] = True
    signed_params: ClassVar[frozenset[str]] = frozenset({"host"})
    slice: int
    reason: str = "maintenance"
    host: int = 0
    effect: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        _check_slice(self)
        if self.reason not in TAINT_REASONS:
            raise FaultSpecError(
                f"taint_node: reason={self.reason!r}: use one of {', '.join(TAINT_REASONS)}"
            )
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise FaultSpecError(
                f"taint_node: effect={self.effect!r}: use one of {', '.join(TAINT_EFFECTS)}"
            )
        if self.host < -1:
            raise FaultSpecError(f"taint_node: host={self.host}: use -1 (all) or a host index")

    def taint(self) -> dict[str, str]:
        key, value, effect = TAINT_REASONS[self.reason]
        return {"key": self.key or key, "value": value, "effect": self.effect or effect}

    def describe(self) -> str:
        t = self.taint()
        which = "every Node" if self.host < 0 else f"host {self.host}'s Node"
        return f"taint slice {self.slice}'s {which} for {self.reason} ({t['key']}:{t['effect']})"

    def inject(self, target: KubeTarget) -> list[str]:
        target = kube_target_of(target, self)
        target.check()
        nodes = target.slice_nodes(self.slice)
        if self.host >= 0 and nodes:
            if self.host >= len(nodes):
                raise TargetNotFound(
                    f"taint_node: slice {self.slice} has {len(nodes)} Nodes; no host {self.host}"
                )
            nodes = [nodes[self.host]]
        taint = self.taint()
        shown = f"{taint['key']}={taint['value']}:{taint['effect']}"
        if not target.armed:
            return target.dry(f"taint node {n.metadata.name} with {shown}" for n in nodes)
        lines = [self._taint_one(target, node, taint, shown) for node in nodes]
        return [line for line in lines if line]

    def _taint_one(
        self, target: KubeTarget, node: Any, base: dict[str, str], shown: str
    ) -> str | None:
        from pathways_chaos.faults.undo import same_taint

        journal = journal_of(target)
        name, uid = node.metadata.name, node.metadata.uid
        current = target.retry(functools.partial(target.core.read_node, name))
        if any(
            t.key == base["key"] and t.effect == base["effect"] for t in current.spec.taints or []
        ):
            target.echo(
                f"node {name} already has a {base['key']}:{base['effect']} taint; left alone"
            )
            return None
        taint = {**base, "timeAdded": _now_stamp()}
        journal.record("taint", node=name, uid=uid, taint=taint, fault=fault_identity(self))
        done = f"tainted node {name} with {shown}"
        first = [current]

        def write() -> str:
            fresh = first.pop() if first else target.core.read_node(name)
            if fresh.metadata.uid != uid:
                raise Settled(f"node {name} was replaced meanwhile; left alone")
            taints = fresh.spec.taints or []
            if any(same_taint(t, taint) for t in taints):
                return done
            if any(t.key == taint["key"] and t.effect == taint["effect"] for t in taints):
                raise Settled(
                    f"node {name} got a {taint['key']} taint from someone else; left alone"
                )
            body = {
                "metadata": {"resourceVersion": fresh.metadata.resource_version},
                "spec": {"taints": [*target.api_client.sanitize_for_serialization(taints), taint]},
            }
            target.core.patch_node(name, body, field_manager=journal.field_manager)
            return done

        def confirm() -> str | None:
            fresh = target.core.read_node(name)
            return done if any(same_taint(t, taint) for t in fresh.spec.taints or []) else None

        result: str | None = settled_write(target, write, confirm)
        return result

    def heal(self, target: KubeTarget) -> list[str]:
        return heal_from_journal(self, target)


# -- Jobs ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DeleteJob(Fault[KubeTarget]):
    """Deletes a slice's worker Job (its Pods go with it); heal recreates it if still absent."""

    kind: ClassVar[str] = "delete_job"
    needs_kubernetes: ClassVar[bool] = True
    slice: int

    def __post_init__(self) -> None:
        _check_slice(self)

    def describe(self) -> str:
        return f"delete slice {self.slice}'s worker Job"

    def inject(self, target: KubeTarget) -> list[str]:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        target = kube_target_of(target, self)
        target.check()
        job = target.slice_job(self.slice)
        ns, name, uid = target.namespace, job.metadata.name, job.metadata.uid
        target.job_pods(job)  # its Pods go with it: each must be opted in, as kill_pods asks
        if not target.armed:
            return target.dry([f"delete job {ns}/{name} and its Pods"])
        journal_of(target).record(
            "delete_job",
            namespace=ns,
            name=name,
            uid=uid,
            manifest=job_manifest_for_recreate(target.api_client, job),
            fault=fault_identity(self),
        )
        body = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
        )
        done = f"deleted job {ns}/{name} and its Pods"

        def write() -> str:
            try:
                target.batch.delete_namespaced_job(name, ns, body=body)
            except Exception as error:
                if api_status(error) == 404:
                    raise Settled(f"job {ns}/{name} already gone") from None
                raise
            return done

        def confirm() -> str | None:
            try:
                current = target.batch.read_namespaced_job(name, ns)
            except ApiException as error:
                if error.status == 404:
                    return done
                raise
            if current.metadata.uid != uid or current.metadata.deletion_timestamp is not None:
                return done
            return None

        result = settled_write(target, write, confirm)
        return [result] if result else []

    def heal(self, target: KubeTarget) -> list[str]:
        return heal_from_journal(self, target)


KUBERNETES_FAULTS: tuple[type[Fault[KubeTarget]], ...] = (
    KillPods,
    EvictPods,
    CordonNodes,
    DrainNodes,
    TaintNode,
    DeleteJob,
)
