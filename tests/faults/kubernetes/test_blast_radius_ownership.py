"""Targets resolved through ownership and node pool, not labels alone (issue 25), on the real
local API server. Each case also runs against a broken variant (the ownership or opt-in check
switched off) in which the same assertions must fail: the look-alike is then acted on."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults import kube_target as kube_faults
from pathways_chaos.faults.jobset import JOB_INDEX_LABEL, JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL
from pathways_chaos.faults.kube_target import NODEPOOL_LABEL, check_one_pool
from pathways_chaos.faults.kubernetes import CordonNodes, DeleteJob, KubeTarget
from pathways_chaos.faults.safety import OPT_IN_LABEL, OPT_IN_VALUE, ChaosRefused
from pathways_chaos.fixtures.control_plane import wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload

pytestmark = pytest.mark.kube

BROKEN = pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])


def expect(broken: bool, check: Callable[[], None]) -> None:
    """Shipped: ``check`` holds. Broken variant: it must fail (the look-alike was acted on)."""
    if broken:
        with pytest.raises(AssertionError):
            check()
    else:
        check()


def impostor(workload: PathwaysWorkload, node: str) -> str:
    """An ownerless Pod with slice 0's worker labels and the opt-in, on another pool's Node."""
    core: Any = client.CoreV1Api(workload.api_client)
    labels = {
        JOBSET_NAME_LABEL: workload.jobset,
        REPLICATED_JOB_LABEL: "worker",
        JOB_INDEX_LABEL: "0",
        OPT_IN_LABEL: OPT_IN_VALUE,
    }
    core.create_namespaced_pod(
        workload.namespace,
        {
            "metadata": {"name": "look-alike", "labels": labels},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "pathways-chaos/fake:1"}],
            },
        },
    )
    wait_for(lambda: core.read_namespaced_pod("look-alike", workload.namespace).spec.node_name)
    return "look-alike"


@BROKEN
def test_a_look_alike_pod_on_another_pool_never_brings_its_node_into_a_fault(
    pathways_workload: PathwaysWorkload,
    kube_target: KubeTarget,
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    workload = pathways_workload
    core: Any = client.CoreV1Api(workload.api_client)
    other_node = workload.node_names[workload.pool(1)][0]  # slice 1's pool, not slice 0's
    impostor(workload, other_node)
    if broken:
        monkeypatch.setattr(kube_faults, "check_owned_by", lambda *args: None)
        monkeypatch.setattr(kube_faults, "check_one_pool", lambda *args: None)

    refusal: list[str] = []
    try:
        CordonNodes(slice=0).inject(kube_target)
    except ChaosRefused as error:
        refusal.append(str(error))

    def check() -> None:
        assert refusal and "look-alike" in refusal[0] and "no controller" in refusal[0]
        assert not core.read_node(other_node).spec.unschedulable
        for name in workload.node_names[workload.pool(0)]:
            assert not core.read_node(name).spec.unschedulable  # refused whole, nothing done

    expect(broken, check)


@BROKEN
def test_delete_job_honours_the_opt_in_of_every_pod_it_takes_with_it(
    pathways_workload: PathwaysWorkload,
    kube_target: KubeTarget,
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    workload = pathways_workload
    core: Any = client.CoreV1Api(workload.api_client)
    batch: Any = client.BatchV1Api(workload.api_client)
    pod = workload.worker_pods(1)[0]
    core.patch_namespaced_pod(
        pod.metadata.name, workload.namespace, {"metadata": {"labels": {OPT_IN_LABEL: None}}}
    )
    if broken:
        monkeypatch.setattr(KubeTarget, "job_pods", lambda self, job: [])

    refusal: list[str] = []
    try:
        DeleteJob(slice=1).inject(kube_target)
    except ChaosRefused as error:
        refusal.append(str(error))

    def check() -> None:
        assert refusal and pod.metadata.name in refusal[0] and "opt-in" in refusal[0]
        job = batch.read_namespaced_job(workload.worker_jobs[1], workload.namespace)
        assert job.metadata.deletion_timestamp is None

    expect(broken, check)


def node(name: str, pool: str | None) -> Any:
    labels = {NODEPOOL_LABEL: pool} if pool else {}
    return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels))


def test_a_slice_on_nodes_of_two_pools_is_refused_and_one_pool_passes() -> None:
    check_one_pool(0, [node("a", "pool-0"), node("b", "pool-0")])
    check_one_pool(0, [node("a", None), node("b", None)])  # not GKE: no pool to compare
    with pytest.raises(ChaosRefused, match=r"several node pools \(pool-0, pool-9\)"):
        check_one_pool(0, [node("a", "pool-0"), node("b", "pool-9")])
