"""`pytest -m chaos --cluster=...` against the local kube-apiserver: the same chaos suite, with
every slice fault acted out through the API, preflight first, a dry run that changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.kube


@pytest.fixture
def workload(kube_control_plane):
    from pathways_chaos.fixtures.workload import pathways_workload_in

    with pathways_workload_in(kube_control_plane, slices=4, hosts_per_slice=2) as w:
        yield w


def _run_chaos(*args: str) -> subprocess.CompletedProcess[str]:
    """The chaos suite in a new pytest process (its JAX and plugin start fresh)."""
    command = [sys.executable, "-m", "pytest", str(ROOT / "suites/chaos"), "-m", "chaos"]
    journals = tempfile.mkdtemp(prefix="pathways-chaos-journals-")  # not the user's state dir
    return subprocess.run(
        [*command, "-p", "no:cacheprovider", "-q", "-rs", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "PATHWAYS_CHAOS_JOURNAL_DIR": journals},
    )


def _pytest(plane, workload, *extra: str, jobset: str | None = None):
    return _run_chaos(
        f"--cluster={plane.kubeconfig}:{plane.context}",
        f"--namespace={workload.namespace}",
        f"--jobset={jobset or workload.jobset}",
        *extra,
    )


def _nodes_and_jobs(workload):
    from pathways_chaos.fixtures.workload import cluster_state

    state = cluster_state(workload.api_client)
    return {k: v for k, v in state.items() if k.startswith(("Node/", "Job/"))}


def test_the_chaos_suite_passes_with_faults_through_the_api(kube_control_plane, workload):
    before = _nodes_and_jobs(workload)
    pods_before = {p.metadata.uid for p in workload.worker_pods(2)}
    out = _pytest(kube_control_plane, workload, "--chaos-arm")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
    assert "preflight ok   elastic:" in out.stdout
    # Pods of slice 2 were really killed and replaced through the API ...
    workload.wait_running()
    assert pods_before.isdisjoint({p.metadata.uid for p in workload.worker_pods(2)})
    # ... and every Node and Job is back as it was (cordons undone by the rollback journal).
    assert _nodes_and_jobs(workload) == before


def test_without_arming_nothing_changes_and_the_dry_run_says_what_it_would_do(
    kube_control_plane, workload
):
    from pathways_chaos.fixtures.workload import cluster_state

    before = cluster_state(workload.api_client)
    out = _pytest(kube_control_plane, workload, "-k", "replica_resize")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "1 skipped" in out.stdout
    assert "dry run (pass --chaos-arm to inject)" in out.stdout
    assert "cordon node" in out.stdout and "delete pod" in out.stdout
    assert cluster_state(workload.api_client) == before


def test_an_unarmed_loop_scenario_is_a_dry_run_not_a_wait_and_a_failure(
    kube_control_plane, workload
):
    from pathways_chaos.fixtures.workload import cluster_state

    before = cluster_state(workload.api_client)
    out = _pytest(
        kube_control_plane,
        workload,
        "--chaos-loop=pathways_chaos.harness.reference.user_loop:main",
        "-k",
        "test_slice_lost_during_a_save",
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "1 skipped" in out.stdout
    assert "dry run (pass --chaos-arm to inject)" in out.stdout
    assert cluster_state(workload.api_client) == before


def test_unknown_context_is_one_line(kube_control_plane, workload):
    out = _run_chaos(
        f"--cluster={kube_control_plane.kubeconfig}:nope", "--namespace=x", "--jobset=y"
    )
    assert out.returncode == 4
    assert (
        f"unknown context 'nope'; the kubeconfig has {kube_control_plane.context}"
        in out.stdout + out.stderr
    )


def test_missing_jobset_is_one_line(kube_control_plane, workload):
    out = _pytest(kube_control_plane, workload, jobset="absent")
    assert out.returncode == 4
    assert "--jobset='absent': no Jobs of that JobSet" in out.stdout + out.stderr


def test_unreachable_api_server_is_one_line(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    out = _run_chaos(f"--cluster={kubeconfig}:c", "--namespace=x", "--jobset=y")
    assert out.returncode == 4
    assert "the API server of 'c' at https://127.0.0.1:9 is unreachable" in out.stdout + out.stderr


def test_a_failed_preflight_injects_nothing(kube_control_plane, workload):
    from kubernetes import client

    from pathways_chaos.fixtures.workload import cluster_state

    batch = client.BatchV1Api(workload.api_client)
    head = batch.read_namespaced_job(workload.head_job, workload.namespace)
    proxy = next(c for c in head.spec.template.spec.containers if c.name == "pathways-proxy")
    assert any(a.startswith("--num_elastic_instances=") for a in proxy.args)
    # The same JobSet, but its proxy believes in 3 elastic slices: refused before any fault.
    job = client.V1Job(
        metadata=client.V1ObjectMeta(
            name="other-head",
            labels={**head.metadata.labels, "jobset.sigs.k8s.io/jobset-name": "other"},
        ),
        spec=client.V1JobSpec(template=head.spec.template, parallelism=0, completions=1),
    )
    job.spec.template.metadata.labels = {}
    for c in job.spec.template.spec.containers:
        if c.name == "pathways-proxy":
            c.args = [a for a in c.args if "elastic" not in a] + ["--num_elastic_instances=3"]
    batch.create_namespaced_job(workload.namespace, job)
    worker = batch.read_namespaced_job(workload.worker_jobs[0], workload.namespace)
    worker_copy = client.V1Job(
        metadata=client.V1ObjectMeta(
            name="other-worker-0",
            labels={**worker.metadata.labels, "jobset.sigs.k8s.io/jobset-name": "other"},
        ),
        spec=client.V1JobSpec(template=worker.spec.template, parallelism=0, completions=1),
    )
    worker_copy.spec.template.metadata.labels = {}
    batch.create_namespaced_job(workload.namespace, worker_copy)
    before = cluster_state(workload.api_client)
    out = _pytest(kube_control_plane, workload, "--chaos-arm", jobset="other")
    text = out.stdout + out.stderr
    assert out.returncode == 4, text[-2000:]
    assert (
        "preflight FAIL pathways-proxy has --num_elastic_instances=3 but the JobSet has 1" in text
    )
    assert "preflight failed, nothing injected" in text
    assert cluster_state(workload.api_client) == before


def test_a_failed_chaos_test_reports_the_logs_of_the_head_and_the_affected_slice(
    kube_control_plane, workload, tmp_path
):
    report = tmp_path / "report.html"
    mutant = "pathways_chaos.harness.reference.mutants:IteratorRestoredFromCurrentPosition"
    out = _pytest(
        kube_control_plane,
        workload,
        "--chaos-arm",
        "-k",
        "replica_resize",
        f"--chaos-trainer={mutant}",
        f"--chaos-report={report}",
    )
    assert out.returncode == 1 and "1 failed" in out.stdout
    assert "pathways-chaos pod logs" in out.stdout
    page = report.read_text()
    head = f"{workload.head_job}"
    assert page.count("class='pod-log'") >= 4  # head (2 containers) + slice 2's two hosts
    assert head in page and "pathways-proxy" in page
    assert f"{workload.jobset}-worker-2" in page and f"{workload.jobset}-worker-1" not in page
    assert "log unavailable" in page  # no kubelet serves logs on the local control plane
