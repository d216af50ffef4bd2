"""Every Kubernetes fault against the real local apiserver: the right objects change, nothing else.

Each test snapshots the whole cluster (Nodes, Namespaces, Pods, Jobs, PriorityClasses, Services,
ConfigMaps) before and after, and states exactly which keys may differ.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from kubernetes import client, watch

from pathways_chaos.faults.kubernetes import (
    JOB_INDEX_LABEL,
    CordonNodes,
    DeleteJob,
    DrainNodes,
    EvictPods,
    KillPods,
    KubeTarget,
    TaintNode,
)
from pathways_chaos.faults.safety import CORDONED_BY_ANNOTATION
from pathways_chaos.fixtures.control_plane import wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.fixtures.kubernetes.state import cluster_state, state_diff

pytestmark = pytest.mark.kube


def pod_key(workload: PathwaysWorkload, name: str) -> str:
    return f"Pod/{workload.namespace}/{name}"


def node_key(name: str) -> str:
    return f"Node//{name}"


def slice_node_names(workload: PathwaysWorkload, slice_index: int) -> list[str]:
    return sorted({p.spec.node_name for p in workload.worker_pods(slice_index)})


def assert_only_slice_pods_replaced(
    workload: PathwaysWorkload,
    before: dict[str, Any],
    after: dict[str, Any],
    slice_index: int,
    victims: list[str],
) -> None:
    diff = state_diff(before, after)
    assert diff["removed"] == {pod_key(workload, v) for v in victims}
    assert len(diff["added"]) == len(victims)
    for key in diff["added"]:
        pod = after[key]
        assert key.startswith(f"Pod/{workload.namespace}/")
        assert pod["metadata"]["labels"][JOB_INDEX_LABEL] == str(slice_index)
        assert pod["metadata"]["ownerReferences"][0]["name"] == workload.worker_jobs[slice_index]
    # Only the slice's Job may differ (its status counts the replacement).
    assert diff["changed"] <= {f"Job/{workload.namespace}/{workload.worker_jobs[slice_index]}"}


class PodEvents:
    """Watches the namespace's Pods in a thread and records (type, name, grace) per event."""

    def __init__(self, workload: PathwaysWorkload) -> None:
        self.events: list[tuple[str, str, int | None, bool]] = []
        self._watch = watch.Watch()
        core: Any = client.CoreV1Api(workload.api_client)
        listed = core.list_namespaced_pod(workload.namespace)
        self._thread = threading.Thread(
            target=self._run,
            args=(core, workload.namespace, listed.metadata.resource_version),
            daemon=True,
        )
        self._thread.start()

    def _run(self, core: Any, namespace: str, resource_version: str) -> None:
        stream = self._watch.stream(
            core.list_namespaced_pod,
            namespace,
            resource_version=resource_version,
            timeout_seconds=20,
        )
        with contextlib.suppress(Exception):  # the stream ends when the test is over
            for event in stream:
                meta = event["object"].metadata
                self.events.append(
                    (
                        event["type"],
                        meta.name,
                        meta.deletion_grace_period_seconds,
                        meta.deletion_timestamp is not None,
                    )
                )

    def deleted(self, names: list[str]) -> bool:
        gone = {name for kind, name, _, _ in self.events if kind == "DELETED"}
        return set(names) <= gone

    def stop(self) -> None:
        self._watch.stop()


@pytest.mark.parametrize("grace", [0, 5])
def test_kill_pods_deletes_the_slice_pods_and_only_they_are_replaced(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget, grace: int
) -> None:
    workload = pathways_workload
    placed = {p.metadata.name: p.spec.node_name for p in workload.worker_pods(1)}
    victims = sorted(placed)
    before = cluster_state(workload.api_client)
    events = PodEvents(workload)

    lines = KillPods(slice=1, grace=grace).inject(kube_target)

    assert lines == [
        f"deleted pod {workload.namespace}/{name} on node {placed[name]} (grace {grace}s)"
        for name in victims
    ]
    wait_for(lambda: events.deleted(victims), what="the victims' DELETED events")
    events.stop()
    # The apiserver first marks each Pod Terminating with the grace asked for (with grace > 0
    # the kubelet stand-in then removes it, as a kubelet would once the container stopped).
    first_grace: dict[str, int | None] = {}
    for kind, name, g, deleting in events.events:
        if kind == "MODIFIED" and deleting and name in victims:
            first_grace.setdefault(name, g)
    assert first_grace == {name: grace for name in victims}
    workload.wait_running()
    after = cluster_state(workload.api_client)
    assert_only_slice_pods_replaced(workload, before, after, 1, victims)


def test_evict_pods_evicts_the_slice_pods_and_only_they_are_replaced(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    workload = pathways_workload
    victims = [p.metadata.name for p in workload.worker_pods(0)]
    before = cluster_state(workload.api_client)

    lines = EvictPods(slice=0).inject(kube_target)

    assert [line.split()[2] for line in lines] == [f"{workload.namespace}/{v}" for v in victims]
    assert all(line.startswith("evicted pod ") for line in lines)
    wait_for(lambda: not {p.metadata.name for p in workload.pods()} & set(victims))
    workload.wait_running()
    assert_only_slice_pods_replaced(
        workload, before, cluster_state(workload.api_client), 0, victims
    )


def strip_cordon(node: dict[str, Any]) -> dict[str, Any]:
    copy = {**node, "metadata": {**node["metadata"]}, "spec": {**node["spec"]}}
    copy["spec"].pop("unschedulable", None)
    annotations = dict(copy["metadata"].get("annotations") or {})
    annotations.pop(CORDONED_BY_ANNOTATION, None)
    copy["metadata"]["annotations"] = annotations or None
    if not annotations:
        copy["metadata"].pop("annotations")
    return copy


def test_cordon_nodes_cordons_exactly_the_slice_nodes_and_heal_restores_them(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    workload = pathways_workload
    nodes = slice_node_names(workload, 1)
    before = cluster_state(workload.api_client)
    fault = CordonNodes(slice=1)

    assert fault.inject(kube_target) == [f"cordoned node {n}" for n in nodes]

    after = cluster_state(workload.api_client)
    diff = state_diff(before, after)
    assert diff == {"removed": set(), "added": set(), "changed": {node_key(n) for n in nodes}}
    for name in nodes:
        node = after[node_key(name)]
        assert node["spec"]["unschedulable"] is True
        assert kube_target.journal is not None
        assert node["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == kube_target.journal.run_id
        assert strip_cordon(node) == before[node_key(name)]

    healed = fault.heal(kube_target)
    assert sorted(healed) == sorted(
        f"#{seq} uncordoned node {n}" for seq, n in zip((2, 1), reversed(nodes), strict=True)
    )
    assert cluster_state(workload.api_client) == before


def test_drain_nodes_cordons_and_evicts_and_replacements_wait_until_heal(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    workload = pathways_workload
    nodes = slice_node_names(workload, 0)
    victims = [p.metadata.name for p in workload.worker_pods(0)]
    before = cluster_state(workload.api_client)

    lines = DrainNodes(slice=0).inject(kube_target)

    assert lines[: len(nodes)] == [f"cordoned node {n}" for n in nodes]
    assert sorted(line.split()[2] for line in lines[len(nodes) :]) == [
        f"{workload.namespace}/{v}" for v in victims
    ]

    def replacements_pending() -> list[Any]:
        pods = workload.worker_pods(0)
        fresh = [p for p in pods if p.metadata.name not in victims]
        return fresh if len(pods) == len(fresh) == len(victims) else []

    fresh = wait_for(replacements_pending, what="replacement Pods")
    # Every other TPU node is taken and the slice's own Nodes are cordoned: nowhere to go.
    assert [p.spec.node_name for p in fresh] == [None] * len(victims)
    diff = state_diff(before, cluster_state(workload.api_client))
    assert diff["removed"] == {pod_key(workload, v) for v in victims}
    assert diff["added"] == {pod_key(workload, p.metadata.name) for p in fresh}
    assert diff["changed"] <= {node_key(n) for n in nodes} | {
        f"Job/{workload.namespace}/{workload.worker_jobs[0]}"
    }
    assert {node_key(n) for n in nodes} <= diff["changed"]

    DrainNodes(slice=0).heal(kube_target)
    workload.wait_running()  # uncordoned, the replacements bind to the slice's Nodes again
    after = cluster_state(workload.api_client)
    for name in nodes:
        assert after[node_key(name)] == before[node_key(name)]
    assert slice_node_names(workload, 0) == nodes


@pytest.mark.parametrize(
    ("fault", "expected_taint"),
    [
        (
            TaintNode(slice=0, reason="maintenance"),
            ("cloud.google.com/active-node-maintenance", "NoSchedule"),
        ),
        (
            TaintNode(slice=1, reason="preemption", host=-1, effect="NoExecute"),
            ("cloud.google.com/impending-node-termination", "NoExecute"),
        ),
    ],
    ids=["maintenance-one-host", "preemption-all-hosts"],
)
def test_taint_node_taints_exactly_the_chosen_nodes_and_heal_removes_only_that(
    pathways_workload: PathwaysWorkload,
    kube_target: KubeTarget,
    fault: TaintNode,
    expected_taint: tuple[str, str],
) -> None:
    workload = pathways_workload
    nodes = slice_node_names(workload, fault.slice)
    touched = nodes if fault.host < 0 else [nodes[fault.host]]
    before = cluster_state(workload.api_client)

    lines = fault.inject(kube_target)

    key, effect = expected_taint
    assert lines == [f"tainted node {n} with {key}=true:{effect}" for n in touched]
    after = cluster_state(workload.api_client)
    diff = state_diff(before, after)
    assert diff == {"removed": set(), "added": set(), "changed": {node_key(n) for n in touched}}
    for name in touched:
        (taint,) = after[node_key(name)]["spec"]["taints"]
        # Our own timeAdded stamp tells this taint from an identical one GKE puts back later.
        assert taint.pop("timeAdded")
        assert taint == {"key": key, "value": "true", "effect": effect}
    fault.heal(kube_target)
    assert cluster_state(workload.api_client) == before


def test_taint_node_leaves_a_taint_someone_else_put_there(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    workload = pathways_workload
    node = slice_node_names(workload, 0)[0]
    theirs = {
        "key": "cloud.google.com/active-node-maintenance",
        "value": "theirs",
        "effect": "NoSchedule",
    }
    client.CoreV1Api(workload.api_client).patch_node(node, {"spec": {"taints": [theirs]}})
    before = cluster_state(workload.api_client)
    fault = TaintNode(slice=0, reason="maintenance", host=0)

    assert fault.inject(kube_target) == []
    assert fault.heal(kube_target) == []
    assert cluster_state(workload.api_client) == before
    assert before[node_key(node)]["spec"]["taints"] == [theirs]


def test_delete_job_removes_the_slice_job_and_its_pods_and_heal_recreates_it(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    workload = pathways_workload
    job = workload.worker_jobs[1]
    victims = [p.metadata.name for p in workload.worker_pods(1)]
    before = cluster_state(workload.api_client)

    fault = DeleteJob(slice=1)
    assert fault.inject(kube_target) == [f"deleted job {workload.namespace}/{job} and its Pods"]

    wait_for(lambda: not workload.worker_pods(1), what="the Job's Pods garbage-collected")
    diff = state_diff(before, cluster_state(workload.api_client))
    assert diff == {
        "removed": {f"Job/{workload.namespace}/{job}"} | {pod_key(workload, v) for v in victims},
        "added": set(),
        "changed": set(),
    }

    assert fault.heal(kube_target) == [f"#1 recreated job {workload.namespace}/{job}"]
    workload.wait_running()
    after = cluster_state(workload.api_client)
    recreated = after[f"Job/{workload.namespace}/{job}"]
    assert (
        recreated["metadata"]["labels"]
        == before[f"Job/{workload.namespace}/{job}"]["metadata"]["labels"]
    )
    assert len(workload.worker_pods(1)) == workload.hosts_per_slice


def test_node_faults_on_a_slice_whose_pods_are_all_pending_touch_nothing(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    """Cordoned and killed, a slice's replacements wait unbound: it has no Node to act on."""
    workload = pathways_workload
    CordonNodes(slice=0).inject(kube_target)
    victims = {p.metadata.name for p in workload.worker_pods(0)}
    KillPods(slice=0, grace=0).inject(kube_target)
    wait_for(
        lambda: (
            {p.metadata.name for p in workload.worker_pods(0)}.isdisjoint(victims)
            and len(workload.worker_pods(0)) == workload.hosts_per_slice
        ),
        what="unbound replacements",
    )
    assert all(p.spec.node_name is None for p in workload.worker_pods(0))
    batch: Any = client.BatchV1Api(workload.api_client)
    wait_for(  # the job controller counts the Pending replacements as active a moment later
        lambda: (
            batch.read_namespaced_job(workload.worker_jobs[0], workload.namespace).status.active
            == workload.hosts_per_slice
        )
    )
    wait_for(  # and the scheduler writes its "Unschedulable" verdict on each a moment later
        lambda: all(
            any(c.type == "PodScheduled" for c in p.status.conditions or [])
            for p in workload.worker_pods(0)
        ),
        what="the scheduler's verdict on the replacements",
    )
    before = cluster_state(workload.api_client)

    for fault in (CordonNodes(slice=0), DrainNodes(slice=0), TaintNode(slice=0, host=1)):
        assert fault.inject(kube_target) == []

    assert cluster_state(workload.api_client) == before
    assert "slice 0's worker Pods are all Pending: no Node to act on" in list(kube_target.echo)
