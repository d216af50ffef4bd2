"""``--cluster`` preflight on the Jobs of a JobSet written by pathwaysutils' own generator: its
``--num_elastic_slices`` spelling, its ``pathways-worker`` replicatedJob and its proxy run as a
native sidecar, read through a real kube-apiserver (the local control plane)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pathways_chaos.harness.kube import kube_cluster
from pathways_chaos.harness.kube.kube_cluster import ClusterSpec, JobSetLayout
from pathways_chaos.harness.kube.pod_bridge import PodBridge

pytestmark = pytest.mark.kube
gke = pytest.importorskip("pathwaysutils.experimental.gke.jobset")

JOBSET_LABELS = (
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/job-index",
)


def generated(**kwargs: Any) -> dict[str, Any]:
    js = gke.PathwaysJobSet(
        name="gen",
        namespace="default",
        pathways_dir="gs://test-bucket/scratch",
        tpu_type="v5e",
        topology="2x4",
        num_slices=2,
        pathways_version="jax-0.10.1",
        **kwargs,
    )
    js.add_user_workload(image="repo/trainer:jax-0.10.1", command=["python3", "train.py"])
    return js.to_dict()


@pytest.fixture
def namespace(kube_control_plane) -> Iterator[tuple[Any, str]]:
    from kubernetes import client

    api = kube_control_plane.api_client()
    name = f"gen-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    yield api, name
    client.CoreV1Api(api).delete_namespace(name)


def create_jobs(api: Any, namespace: str, jobset: dict[str, Any]) -> None:
    """The Jobs the JobSet controller would make (no Pods: parallelism 0)."""
    from kubernetes import client

    batch = client.BatchV1Api(api)
    name = jobset["metadata"]["name"]
    for rj in jobset["spec"]["replicatedJobs"]:
        for index in range(rj["replicas"]):
            labels = dict(zip(JOBSET_LABELS, (name, rj["name"], str(index)), strict=True))
            spec = {**rj["template"]["spec"], "parallelism": 0}
            spec["template"] = {**spec["template"], "metadata": {"labels": dict(labels)}}
            batch.create_namespaced_job(
                namespace,
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": f"{name}-{rj['name']}-{index}", "labels": labels},
                    "spec": spec,
                },
            )


def elastic_line(api: Any, namespace: str, jobset: str = "gen") -> tuple[JobSetLayout, tuple]:
    spec = ClusterSpec("ctx", None, namespace, jobset)
    layout = kube_cluster.read_layout(api, spec)
    return layout, kube_cluster.preflight(api, spec, layout)[0]


def test_the_generators_jobset_passes_the_elastic_preflight(namespace):
    api, ns = namespace
    create_jobs(api, ns, generated(elastic_slices=2))
    layout, line = elastic_line(api, ns)
    assert layout.slices == 2  # the two pathways-worker Jobs, found by role
    assert line == (True, "elastic: pathways-proxy --num_elastic_slices=2 = worker slices")


def test_fewer_elastic_slices_than_slices_pass_as_the_generator_allows(namespace):
    """pathwaysutils' generator allows elastic_slices up to num_slices (google/pathways-job's
    sample runs 1 of 2): the preflight refused it ("make them equal")."""
    api, ns = namespace
    create_jobs(api, ns, generated(elastic_slices=1))
    _, line = elastic_line(api, ns)
    assert line == (True, "elastic: pathways-proxy --num_elastic_slices=1 of 2 worker slices")


def test_a_wrong_or_missing_flag_is_refused_naming_the_spelling(namespace):
    api, ns = namespace
    more = generated(elastic_slices=2)
    more["metadata"]["name"] = "more"
    for rj in more["spec"]["replicatedJobs"]:
        pod_spec = rj["template"]["spec"]["template"]["spec"]
        for c in pod_spec.get("initContainers", []) + pod_spec.get("containers", []):
            c["args"] = [
                "--num_elastic_slices=3" if a == "--num_elastic_slices=2" else a
                for a in c.get("args") or []
            ]
    create_jobs(api, ns, more)
    _, line = elastic_line(api, ns, "more")
    assert line == (
        False,
        "pathways-proxy has --num_elastic_slices=3 but the JobSet has 2 worker slices: use 1 to 2",
    )
    off = generated()
    off["metadata"]["name"] = "off"
    create_jobs(api, ns, off)
    _, line = elastic_line(api, ns, "off")
    assert line == (
        False,
        "pathways-proxy has neither --num_elastic_instances nor --num_elastic_slices: elastic "
        "training is off; add --num_elastic_instances=2 to its args",
    )
    both = generated(
        elastic_slices=2, proxy_container_kwargs={"args": ["--num_elastic_instances=3"]}
    )
    both["metadata"]["name"] = "both"
    create_jobs(api, ns, both)
    _, line = elastic_line(api, ns, "both")
    assert line == (
        False,
        "pathways-proxy has --num_elastic_instances=3 and --num_elastic_slices=2: they "
        "disagree; keep one",
    )


def test_the_pod_bridge_watches_pathways_worker_pods(namespace):
    from kubernetes import client

    api, ns = namespace
    core = client.CoreV1Api(api)
    labels = dict(zip(JOBSET_LABELS, ("gen", "pathways-worker", "1"), strict=True))
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "gen-worker-1-0", "labels": labels},
            "spec": {"containers": [{"name": "pathways-worker", "image": "server"}]},
        },
    )
    core.patch_namespaced_pod_status("gen-worker-1-0", ns, {"status": {"phase": "Running"}})
    bridge = PodBridge(api, ClusterSpec("ctx", None, ns, "gen"), on_lost=print)
    bridge.start()
    try:
        bridge.wait(lambda: bridge.running(1) == 1, "the pathways-worker Pod running")
        assert bridge.running_names(1) == {"gen-worker-1-0"}
    finally:
        bridge.stop()


def test_the_elastic_flag_is_read_in_either_spelling_and_form():
    """The layout's parsing alone (no API): both spellings, ``=N`` or a separate word."""

    def layout(*args: str) -> JobSetLayout:
        return JobSetLayout(2, 4, list(args), True)

    assert layout("--num_elastic_slices", "2").elastic_flag == ("--num_elastic_slices", "2")
    assert layout("--num_elastic_instances=2").elastic_instances == 2
    both = layout("--num_elastic_slices=2", "--num_elastic_instances=2")
    assert both.elastic_flag == ("--num_elastic_instances", "2")  # the guide's spelling first
    assert layout("--num_elastic_slices=two").elastic_instances is None
    assert layout("--server_port=29000").elastic_flag is None
