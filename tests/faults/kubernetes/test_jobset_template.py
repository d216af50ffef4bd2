"""A deleted Job is recreated only from its live JobSet's own template (issue 25).

On the real local API server, with a JobSet custom resource (the CRD registered for the test,
schema left open: 1.20 does not validate it) that owns the worker Jobs as a JobSet controller
does. The broken variant (the live-template check switched off) must fail the assertions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pathways_chaos.faults import undo as journal_module
from pathways_chaos.faults.kubernetes import DeleteJob, KubeTarget
from pathways_chaos.fixtures.control_plane import wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload

pytestmark = pytest.mark.kube

GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"jobsets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "jobsets", "singular": "jobset", "kind": "JobSet"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def jobset_crd(pathways_workload: PathwaysWorkload) -> Iterator[None]:
    api = pathways_workload.api_client
    ext: Any = client.ApiextensionsV1Api(api)
    made = False
    with contextlib.suppress(ApiException):
        ext.create_custom_resource_definition(CRD)
        made = True
    custom: Any = client.CustomObjectsApi(api)

    def served() -> bool:
        try:
            custom.list_namespaced_custom_object(
                GROUP, VERSION, pathways_workload.namespace, "jobsets"
            )
            return True
        except ApiException:
            return False

    wait_for(served, timeout=30, what="the JobSet CRD served")
    yield
    if made:
        with contextlib.suppress(ApiException):
            ext.delete_custom_resource_definition(CRD["metadata"]["name"])


def own_worker_job_by_a_jobset(workload: PathwaysWorkload, index: int) -> dict[str, Any]:
    """A JobSet object whose worker template is the live Job's, and the Job owned by it."""
    api = workload.api_client
    batch: Any = client.BatchV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    job = batch.read_namespaced_job(workload.worker_jobs[index], workload.namespace)
    template = api.sanitize_for_serialization(job.spec.template)
    jobset = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        workload.namespace,
        "jobsets",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "JobSet",
            "metadata": {"name": workload.jobset},
            "spec": {
                "replicatedJobs": [{"name": "worker", "template": {"spec": {"template": template}}}]
            },
        },
    )
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "name": workload.jobset,
        "uid": jobset["metadata"]["uid"],
        "controller": True,
    }
    batch.patch_namespaced_job(
        job.metadata.name, workload.namespace, {"metadata": {"ownerReferences": [owner]}}
    )
    return dict(jobset)


def job_exists(workload: PathwaysWorkload, name: str) -> bool:
    batch: Any = client.BatchV1Api(workload.api_client)
    try:
        job = batch.read_namespaced_job(name, workload.namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return job.metadata.deletion_timestamp is None


def test_a_job_of_a_live_jobset_is_recreated_from_its_template(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget, jobset_crd: None
) -> None:
    own_worker_job_by_a_jobset(pathways_workload, 1)
    DeleteJob(slice=1).inject(kube_target)
    assert kube_target.journal is not None
    result = kube_target.journal.replay(pathways_workload.api_client)
    assert result.ok and any("recreated job" in line for line in result.lines), result
    assert job_exists(pathways_workload, pathways_workload.worker_jobs[1])


@pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])
@pytest.mark.parametrize("change", ["template-changed", "jobset-gone"])
def test_a_job_is_never_recreated_from_a_template_its_jobset_no_longer_has(
    pathways_workload: PathwaysWorkload,
    kube_target: KubeTarget,
    jobset_crd: None,
    monkeypatch: pytest.MonkeyPatch,
    change: str,
    broken: bool,
) -> None:
    workload = pathways_workload
    custom: Any = client.CustomObjectsApi(workload.api_client)
    jobset = own_worker_job_by_a_jobset(workload, 1)
    DeleteJob(slice=1).inject(kube_target)
    name = workload.worker_jobs[1]
    wait_for(lambda: not job_exists(workload, name), timeout=30, what="the Job deleted")
    if change == "template-changed":  # e.g. a new image rolled out since the fault
        worker = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        worker["spec"]["containers"][0]["image"] = "pathways-chaos/fake:2"
        custom.replace_namespaced_custom_object(
            GROUP, VERSION, workload.namespace, "jobsets", workload.jobset, jobset
        )
    else:
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, workload.namespace, "jobsets", workload.jobset
        )
    if broken:
        monkeypatch.setattr(journal_module, "_check_live_jobset", lambda *args: None)
    assert kube_target.journal is not None

    result = kube_target.journal.replay(workload.api_client)

    def check() -> None:
        says = "not JobSet" if change == "template-changed" else "is gone; left alone"
        assert any(says in line for line in result.lines), result.lines
        assert not job_exists(workload, name)

    if broken:
        with pytest.raises(AssertionError):
            check()
    else:
        check()
