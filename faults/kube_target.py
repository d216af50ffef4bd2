"""What a Kubernetes fault acts on: the JobSet target (client, namespace, JobSet, arming, the
rollback journal), the checks that keep a fault inside its slice (ownership, one node pool),
and the journal-aware write and heal every Kubernetes fault shares."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pathways_chaos.faults.jobset import (
    slice_selector,
)
from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.model import Fault
from pathways_chaos.faults.safety import (
    OPT_IN_LABEL,
    RETRYABLE_STATUSES,
    ChaosRefused,
    call_with_retries,
    check_namespace,
    check_opted_in,
    write_confirmed,
)
from pathways_chaos.harness.engine.backend import KubeBacked
from pathways_chaos.harness.errors import ChaosConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class TargetNotFound(ChaosConfigError, LookupError):
    """A fault's slice has nothing to act on (wrong JobSet name or slice index?)."""


class Settled(Exception):
    """A fresh read found the object in a state nobody should write over: report, move on."""


def stderr_line(line: str) -> None:
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
    echo: Callable[[str], None] = stderr_line
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
        if any(exclusive_pool(p) for p in pods):  # the JobSet promises one pool per slice
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
        owner = controller_ref(job)
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


def controller_ref(obj: Any) -> Any | None:
    for ref in obj.metadata.owner_references or []:
        if ref.controller:
            return ref
    return None


def check_owned_by(obj: Any, kind: str, name: str, uid: str, namespace: str) -> None:
    """Refuses ``obj`` unless its controller is exactly that ``kind``/``name`` with ``uid``."""
    ref = controller_ref(obj)
    if ref is None or ref.kind != kind or ref.uid != uid:
        whose = "no controller" if ref is None else f"controller {ref.kind} {ref.name!r}"
        raise ChaosRefused(
            f"refused: Pod {namespace}/{obj.metadata.name} carries the slice's labels but has "
            f"{whose}, not {kind} {name!r} (uid {uid}): a look-alike is never a target; "
            "remove it or its labels"
        )


#: The JobSet annotation that places each Job (a slice) in one topology domain (a node pool).
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def exclusive_pool(pod: Any) -> bool:
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


def fault_identity(fault: Fault[Any]) -> str:
    return json.dumps(fault.to_json(), sort_keys=True)


def journal_of(target: KubeTarget) -> RollbackJournal:
    assert target.journal is not None  # KubeTarget.check() refuses an armed target without one
    return target.journal


def heal_from_journal(fault: Fault[KubeTarget], target: KubeTarget) -> list[str]:
    """Undoes exactly the entries this fault wrote (not what the slice looks like now)."""
    target = kube_target_of(target, fault)
    target.check()
    if not target.armed or target.journal is None:
        return []
    mine = {
        e["seq"]
        for e in target.journal.pending()
        if e.get("fault") == fault_identity(fault) and e.get("run") == target.journal.run_id
    }
    if not mine:
        return []
    result = target.journal.replay(target.api_client, seqs=mine)
    if result.errors:
        raise RuntimeError(f"{fault.kind}: heal incomplete: {'; '.join(result.errors)}")
    return result.lines


def settled_write(target: KubeTarget, write: Callable[[], Any], confirm: Callable[[], Any]) -> Any:
    """``write_confirmed`` with the target's retry budget; a ``Settled`` ends it with a line."""
    try:
        return write_confirmed(write, confirm, attempts=target.retry_attempts)
    except Settled as settled:
        target.echo(str(settled))
        return None
