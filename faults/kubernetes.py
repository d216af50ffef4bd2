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
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from pathways_chaos.faults.jobset import (
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
    slice_selector,
)
from pathways_chaos.faults.journal import RollbackJournal, job_manifest_for_recreate
from pathways_chaos.faults.model import Fault, FaultSpecError
from pathways_chaos.faults.safety import (
    CORDONED_BY_ANNOTATION,
    OPT_IN_LABEL,
    RETRYABLE_STATUSES,
    ChaosRefused,
    api_status,
    call_with_retries,
    check_namespace,
    check_opted_in,
    write_confirmed,
)
from pathways_chaos.harness.engine.backend import KubeBacked
from pathways_chaos.harness.errors import ChaosConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

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


class TargetNotFound(ChaosConfigError, LookupError):
    """A fault's slice has nothing to act on (wrong JobSet name or slice index?)."""


class _Settled(Exception):
    """A fresh read found the object in a state nobody should write over: report, move on."""


def _stderr(line: str) -> None:
    print(f"pathways-chaos: {line}", file=sys.stderr)


@dataclasses.dataclass
class KubeTarget:
    """Where Kubernetes faults act, and the rules they obey there.

    ``armed=False`` (the default) is a dry run: faults read the cluster, check the rules and
    report what they would change, and change nothing. Armed faults need a journal.
    """

    api_client: ApiClient
    namespace: str
    jobset: str
    armed: bool = False
    allowed_namespaces: frozenset[str] = frozenset()
    opt_in_label: str = OPT_IN_LABEL
    journal: RollbackJournal | None = None
    echo: Callable[[str], None] = _stderr
    retry_attempts: int = 5

    # The client's models type every field Optional; these are Any so call sites stay readable.
    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    @property
    def batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.api_client)

    def check(self) -> None:
        """The checks every fault passes before it reads anything.

        An armed target's journal is tied to this cluster before its first change, so that a
        later rollback with another kubeconfig is refused.
        """
        check_namespace(self.namespace, self.allowed_namespaces)
        if self.armed and self.journal is None:
            raise ChaosRefused("refused: an armed KubeTarget needs a RollbackJournal")
        if self.armed and self.journal is not None and not self.journal.bound:
            self.journal.bind(
                self.api_client,
                namespace=self.namespace,
                jobset=self.jobset,
                allowed_namespaces=sorted(self.allowed_namespaces),
            )

    def slice_selector(self, slice_index: int) -> str:
        return slice_selector(self.jobset, slice_index)

    def retry(self, fn: Callable[[], Any], retry_on: frozenset[int] = RETRYABLE_STATUSES) -> Any:
        return call_with_retries(fn, attempts=self.retry_attempts, retry_on=retry_on)

    # -- target resolution ------------------------------------------------------------------

    def slice_pods(self, slice_index: int) -> list[Any]:
        """The slice's live worker Pods (not already terminating), checked for opt-in and owner.

        Labels find them; ownership decides: every Pod the selector finds must be controlled by
        the slice's own Job (``slice_job``: one Job, opted in, of this JobSet), so a Pod that
        merely copies a worker's labels (ownerless, or another workload's) is refused rather
        than acted on, together with the Node it sits on.
        """
        selector = self.slice_selector(slice_index)
        pods = self.retry(
            lambda: self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        )
        live = sorted(
            (p for p in pods.items if p.metadata.deletion_timestamp is None),
            key=lambda p: p.metadata.name,
        )
        if not live:
            raise TargetNotFound(
                f"no live worker Pods for slice {slice_index} of JobSet {self.jobset!r} in "
                f"namespace {self.namespace!r} (selector {selector})"
            )
        job = self.slice_job(slice_index)
        for pod in live:
            check_opted_in(
                "Pod",
                f"{self.namespace}/{pod.metadata.name}",
                pod.metadata.labels,
                self.opt_in_label,
            )
            check_owned_by(pod, "Job", job.metadata.name, job.metadata.uid, self.namespace)
        return live

    def slice_nodes(self, slice_index: int) -> list[Any]:
        """The Nodes the slice's worker Pods are bound to, checked for opt-in.

        Empty (and said so) when the slice's Pods are all Pending, e.g. because an earlier
        fault cordoned its Nodes: such a slice is down already and has no Node to act on.
        """
        pods = self.slice_pods(slice_index)
        names = sorted({p.spec.node_name for p in pods if p.spec.node_name})
        if not names:
            self.echo(f"slice {slice_index}'s worker Pods are all Pending: no Node to act on")
            return []
        nodes = [self.retry(functools.partial(self.core.read_node, name)) for name in names]
        for node in nodes:
            check_opted_in("Node", node.metadata.name, node.metadata.labels, self.opt_in_label)
        if any(_exclusive_pool(p) for p in pods):  # the JobSet promises one pool per slice
            check_one_pool(slice_index, nodes)
        return nodes

    def slice_job(self, slice_index: int) -> Any:
        selector = self.slice_selector(slice_index)
        jobs = self.retry(
            lambda: self.batch.list_namespaced_job(self.namespace, label_selector=selector)
        )
        if len(jobs.items) != 1:
            raise TargetNotFound(
                f"expected one worker Job for slice {slice_index} of JobSet {self.jobset!r} in "
                f"namespace {self.namespace!r}, found {len(jobs.items)} (selector {selector})"
            )
        job = jobs.items[0]
        check_opted_in(
            "Job", f"{self.namespace}/{job.metadata.name}", job.metadata.labels, self.opt_in_label
        )
        owner = _controller_ref(job)
        if owner is not None and (owner.kind != "JobSet" or owner.name != self.jobset):
            raise ChaosRefused(
                f"refused: Job {self.namespace}/{job.metadata.name} carries JobSet "
                f"{self.jobset!r}'s labels but is controlled by {owner.kind} {owner.name!r}: "
                "not a Job of the target JobSet"
            )
        return job

    def job_pods(self, job: Any) -> list[Any]:
        """The Job's live Pods (found by its controller uid), each checked for opt-in."""
        selector = f"controller-uid={job.metadata.uid}"
        pods = self.retry(
            lambda: self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        )
        live = [p for p in pods.items if p.metadata.deletion_timestamp is None]
        for pod in live:
            check_opted_in(
                "Pod",
                f"{self.namespace}/{pod.metadata.name}",
                pod.metadata.labels,
                self.opt_in_label,
            )
        return live

    def dry(self, lines: Iterable[str]) -> list[str]:
        out = [f"DRY RUN: would {line}" for line in lines]
        for line in out:
            self.echo(line)
        return out


#: GKE's node pool label: one TPU slice is one node pool.
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"


def _controller_ref(obj: Any) -> Any | None:
    for ref in obj.metadata.owner_references or []:
        if ref.controller:
            return ref
    return None


def check_owned_by(obj: Any, kind: str, name: str, uid: str, namespace: str) -> None:
    """Refuses ``obj`` unless its controller is exactly that ``kind``/``name`` with ``uid``."""
    ref = _controller_ref(obj)
    if ref is None or ref.kind != kind or ref.uid != uid:
        whose = "no controller" if ref is None else f"controller {ref.kind} {ref.name!r}"
        raise ChaosRefused(
            f"refused: Pod {namespace}/{obj.metadata.name} carries the slice's labels but has "
            f"{whose}, not {kind} {name!r} (uid {uid}): a look-alike is never a target; "
            "remove it or its labels"
        )


#: The JobSet annotation that places each Job (a slice) in one topology domain (a node pool).
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def _exclusive_pool(pod: Any) -> bool:
    annotations = pod.metadata.annotations or {}
    return annotations.get(EXCLUSIVE_TOPOLOGY_ANNOTATION) == NODEPOOL_LABEL


def check_one_pool(slice_index: int, nodes: list[Any]) -> None:
    """A slice placed exclusively per node pool lives in one: several pools mean a stray target.

    Applied where the JobSet promises it (the exclusive-topology annotation on the node pool
    key, as GKE TPU JobSets carry): a JobSet without it may spread a slice over pools.
    """
    pools = {(n.metadata.labels or {}).get(NODEPOOL_LABEL) for n in nodes}
    pools.discard(None)
    if len(pools) > 1:
        shown = ", ".join(sorted(str(p) for p in pools))
        raise ChaosRefused(
            f"refused: slice {slice_index}'s Pods run on Nodes of several node pools ({shown}); "
            "a slice is one pool: find the Pod that does not belong before injecting"
        )


def kube_target_of(target: Any, fault: Fault[Any]) -> KubeTarget:
    """The KubeTarget a Kubernetes fault acts on, or one line saying where it can run.

    The bridged ``--cluster`` backend carries its target; the in-process fake has no Pods,
    Nodes or Jobs, so a Kubernetes fault there is refused instead of failing on a missing name.
    """
    if isinstance(target, KubeTarget):
        return target
    if isinstance(target, KubeBacked) and isinstance(target.target, KubeTarget):
        return target.target
    raise ChaosConfigError(
        f"{fault.kind} acts on Kubernetes objects and needs --cluster (with --namespace and "
        "--jobset) or the local control plane (the kube_chaos_target fixture); the in-process "
        "fake cluster has no Pods, Nodes or Jobs"
    )


def _identity(fault: Fault[Any]) -> str:
    return json.dumps(fault.to_json(), sort_keys=True)


def _journal(target: KubeTarget) -> RollbackJournal:
    assert target.journal is not None  # KubeTarget.check() refuses an armed target without one
    return target.journal


def _heal_from_journal(fault: Fault[KubeTarget], target: KubeTarget) -> list[str]:
    """Undoes exactly the entries this fault wrote (not what the slice looks like now)."""
    target = kube_target_of(target, fault)
    target.check()
    if not target.armed or target.journal is None:
        return []
    mine = {
        e["seq"]
        for e in target.journal.pending()
        if e.get("fault") == _identity(fault) and e.get("run") == target.journal.run_id
    }
    if not mine:
        return []
    result = target.journal.replay(target.api_client, seqs=mine)
    if result.errors:
        raise RuntimeError(f"{fault.kind}: heal incomplete: {'; '.join(result.errors)}")
    return result.lines


def _api_status(error: BaseException) -> int | None:
    return api_status(error)


def _settled_write(target: KubeTarget, write: Callable[[], Any], confirm: Callable[[], Any]) -> Any:
    """``write_confirmed`` with the target's retry budget; a ``_Settled`` ends it with a line."""
    try:
        return write_confirmed(write, confirm, attempts=target.retry_attempts)
    except _Settled as settled:
        target.echo(str(settled))
        return None


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
    _journal(target).record(
        "delete_pod",
        namespace=ns,
        name=name,
        uid=uid,
        grace=grace,
        owner=_controller(pod),
        fault=_identity(fault),
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
            if _api_status(error) == 404:  # first try: it went on its own before we asked
                raise _Settled(f"pod {ns}/{name} already gone") from None
            raise
        return done

    def confirm() -> str | None:
        return done if _pod_gone_or_going(target, pod) else None

    result: str | None = _settled_write(target, write, confirm)
    return result


def _evict_pod(target: KubeTarget, pod: Any, fault: Fault[Any]) -> str | None:
    ns, name, uid = target.namespace, pod.metadata.name, pod.metadata.uid
    if _pod_gone_or_going(target, pod) is not None:
        target.echo(f"pod {ns}/{name} already gone")
        return None
    _journal(target).record(
        "evict_pod",
        namespace=ns,
        name=name,
        uid=uid,
        owner=_controller(pod),
        fault=_identity(fault),
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
            status = _api_status(error)
            if status == 404:
                raise _Settled(f"pod {ns}/{name} already gone") from None
            if status == 429:
                refused_by_pdb.append(True)
            raise
        return done

    def confirm() -> str | None:
        return done if _pod_gone_or_going(target, pod) else None

    try:
        result: str | None = _settled_write(target, write, confirm)
    except Exception as error:
        if _api_status(error) == 429 and refused_by_pdb:
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
    journal = _journal(target)
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
        fault=_identity(fault),
    )
    first = [current]

    def write() -> str:
        fresh = first.pop() if first else target.core.read_node(name)
        if fresh.metadata.uid != uid:
            raise _Settled(f"node {name} was replaced meanwhile; left alone")
        if fresh.spec.unschedulable:
            if _cordoned_by(fresh, run):
                return f"cordoned node {name}"
            raise _Settled(f"node {name} was cordoned by someone else meanwhile; left alone")
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

    result: str | None = _settled_write(target, write, confirm)
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
        return _heal_from_journal(self, target)


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
        return _heal_from_journal(self, target)


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
        from pathways_chaos.faults.journal import same_taint

        journal = _journal(target)
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
        journal.record("taint", node=name, uid=uid, taint=taint, fault=_identity(self))
        done = f"tainted node {name} with {shown}"
        first = [current]

        def write() -> str:
            fresh = first.pop() if first else target.core.read_node(name)
            if fresh.metadata.uid != uid:
                raise _Settled(f"node {name} was replaced meanwhile; left alone")
            taints = fresh.spec.taints or []
            if any(same_taint(t, taint) for t in taints):
                return done
            if any(t.key == taint["key"] and t.effect == taint["effect"] for t in taints):
                raise _Settled(
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

        result: str | None = _settled_write(target, write, confirm)
        return result

    def heal(self, target: KubeTarget) -> list[str]:
        return _heal_from_journal(self, target)


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
        _journal(target).record(
            "delete_job",
            namespace=ns,
            name=name,
            uid=uid,
            manifest=job_manifest_for_recreate(target.api_client, job),
            fault=_identity(self),
        )
        body = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
        )
        done = f"deleted job {ns}/{name} and its Pods"

        def write() -> str:
            try:
                target.batch.delete_namespaced_job(name, ns, body=body)
            except Exception as error:
                if _api_status(error) == 404:
                    raise _Settled(f"job {ns}/{name} already gone") from None
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

        result = _settled_write(target, write, confirm)
        return [result] if result else []

    def heal(self, target: KubeTarget) -> list[str]:
        return _heal_from_journal(self, target)


KUBERNETES_FAULTS: tuple[type[Fault[KubeTarget]], ...] = (
    KillPods,
    EvictPods,
    CordonNodes,
    DrainNodes,
    TaintNode,
    DeleteJob,
)
