"""Under the least-privilege Role in ci/rbac/role.yaml the faults work and everything else is 403.

The test authenticates as the manifest's ServiceAccount with a real token from the TokenRequest
API, so the apiserver's own RBAC authorizer decides every answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import (
    CordonNodes,
    DeleteJob,
    DrainNodes,
    EvictPods,
    KillPods,
    KubeTarget,
    TaintNode,
)
from pathways_chaos.fixtures.control_plane import LocalControlPlane
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.fixtures.kubernetes.rbac import apply_rbac, delete_cluster_scoped
from pathways_chaos.fixtures.kubernetes.state import cluster_state

pytestmark = pytest.mark.kube

MANIFEST = Path(__file__).resolve().parents[2] / "ci" / "rbac" / "role.yaml"


def apply_manifest(api: Any, namespace: str) -> list[tuple[str, str]]:
    """Creates the manifest's objects for ``namespace``; returns cluster-scoped ones to delete."""
    docs = list(yaml.safe_load_all(MANIFEST.read_text().replace("NAMESPACE", namespace)))
    return apply_rbac(api, docs, namespace)


@pytest.fixture
def injector_api(
    pathways_workload: PathwaysWorkload, kube_control_plane: LocalControlPlane
) -> Iterator[Any]:
    """An ApiClient authenticated as the manifest's ServiceAccount, and nothing more."""
    admin = pathways_workload.api_client
    cluster_scoped = apply_manifest(admin, pathways_workload.namespace)
    core: Any = client.CoreV1Api(admin)
    token = core.create_namespaced_service_account_token(
        "pathways-chaos-injector",
        pathways_workload.namespace,
        {"spec": {"expirationSeconds": 3600}},
    ).status.token
    api = kube_control_plane.client_for_token(token)
    try:
        yield api
    finally:
        delete_cluster_scoped(admin, cluster_scoped)


def test_every_fault_and_its_rollback_work_under_the_role(
    pathways_workload: PathwaysWorkload, injector_api: Any, tmp_path: Path
) -> None:
    workload = pathways_workload
    journal = RollbackJournal(tmp_path / "j.jsonl")
    target = KubeTarget(
        api_client=injector_api,
        namespace=workload.namespace,
        jobset=workload.jobset,
        armed=True,
        allowed_namespaces=frozenset({workload.namespace}),
        journal=journal,
    )
    nodes_before = {
        k: v for k, v in cluster_state(workload.api_client).items() if k.startswith("Node/")
    }

    assert KillPods(slice=0, grace=0).inject(target)
    workload.wait_running()
    assert EvictPods(slice=1).inject(target)
    workload.wait_running()
    assert CordonNodes(slice=0).inject(target)
    assert TaintNode(slice=1, reason="preemption", host=-1).inject(target)
    assert DrainNodes(slice=1).inject(target)
    assert DeleteJob(slice=0).inject(target)

    result = journal.replay(injector_api)  # rollback under the same Role
    assert result.ok, result.errors
    workload.wait_running()
    nodes_after = {
        k: v for k, v in cluster_state(workload.api_client).items() if k.startswith("Node/")
    }
    assert nodes_after == nodes_before


def forbidden_calls(namespace: str, node: str, pod: str) -> dict[str, Callable[[Any], Any]]:
    """Things the injector must not be able to do (each is one API call)."""

    def core(api: Any) -> Any:
        return client.CoreV1Api(api)

    def scheduling(api: Any) -> Any:
        return client.SchedulingV1Api(api)

    def rbac(api: Any) -> Any:
        return client.RbacAuthorizationV1Api(api)

    pod_body = {
        "metadata": {"name": "intruder"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    return {
        "delete a Node": lambda api: core(api).delete_node(node),
        "update Node status": lambda api: core(api).patch_node_status(
            node, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        ),
        "create a Pod": lambda api: core(api).create_namespaced_pod(namespace, pod_body),
        "patch a Pod": lambda api: core(api).patch_namespaced_pod(
            pod, namespace, {"metadata": {"labels": {"x": "y"}}}
        ),
        "read Secrets": lambda api: core(api).list_namespaced_secret(namespace),
        "list Pods in kube-system": lambda api: core(api).list_namespaced_pod("kube-system"),
        "delete Pods in default": lambda api: core(api).delete_collection_namespaced_pod("default"),
        "list Pods cluster-wide": lambda api: core(api).list_pod_for_all_namespaces(),
        "read a Namespace but kube-system": lambda api: core(api).read_namespace("default"),
        "create a Namespace": lambda api: core(api).create_namespace({"metadata": {"name": "x"}}),
        "delete its Namespace": lambda api: core(api).delete_namespace(namespace),
        "patch a Job": lambda api: client.BatchV1Api(api).patch_namespaced_job(
            "train-worker-0", namespace, {"spec": {"parallelism": 0}}
        ),
        "create a PriorityClass": lambda api: scheduling(api).create_priority_class(
            {"metadata": {"name": "x"}, "value": 10**6}
        ),
        "bind itself a ClusterRole": lambda api: rbac(api).create_cluster_role_binding(
            {
                "metadata": {"name": "x"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "pathways-chaos-injector",
                        "namespace": namespace,
                    }
                ],
            }
        ),
    }


def test_everything_else_answers_403(
    pathways_workload: PathwaysWorkload, injector_api: Any
) -> None:
    node = pathways_workload.all_node_names()[0]
    pod = pathways_workload.worker_pods(0)[0].metadata.name
    before = cluster_state(pathways_workload.api_client)
    answers = {}
    for what, call in forbidden_calls(pathways_workload.namespace, node, pod).items():
        try:
            call(injector_api)
            answers[what] = 200
        except ApiException as error:
            answers[what] = error.status
    assert answers == dict.fromkeys(answers, 403)
    assert cluster_state(pathways_workload.api_client) == before


def test_the_journal_entry_is_on_disk_before_the_change_is_attempted(
    pathways_workload: PathwaysWorkload, kube_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    """An identity that may read Pods and Jobs but not delete: the entry exists, the Pod too.

    (It reads the slice's Job because a Pod is a target only if that Job owns it.)
    """
    admin = pathways_workload.api_client
    ns = pathways_workload.namespace
    core: Any = client.CoreV1Api(admin)
    rbac: Any = client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        },
    )
    token = core.create_namespaced_service_account_token(
        "reader", ns, {"spec": {"expirationSeconds": 600}}
    ).status.token
    journal = RollbackJournal(tmp_path / "j.jsonl")
    journal.bind(admin)  # the reader may not read kube-system: the admin names the cluster
    target = KubeTarget(
        api_client=kube_control_plane.client_for_token(token),
        namespace=ns,
        jobset=pathways_workload.jobset,
        armed=True,
        allowed_namespaces=frozenset({ns}),
        journal=journal,
    )
    victim = pathways_workload.worker_pods(0)[0]

    with pytest.raises(ApiException) as raised:
        KillPods(slice=0, grace=0).inject(target)

    assert raised.value.status == 403
    [entry] = journal.entries()
    assert (entry["action"], entry["name"], entry["uid"]) == (
        "delete_pod",
        victim.metadata.name,
        victim.metadata.uid,
    )
    assert core.read_namespaced_pod(victim.metadata.name, ns).metadata.uid == victim.metadata.uid
