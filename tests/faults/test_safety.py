"""Dry run, allowlist, opt-in label, arming, retries and the text form of the Kubernetes faults."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import (
    KUBERNETES_FAULTS,
    CordonNodes,
    DeleteJob,
    DrainNodes,
    EvictPods,
    KillPods,
    KubeTarget,
    TaintNode,
    TargetNotFound,
)
from pathways_chaos.faults.model import Fault, FaultSpecError, parse_fault
from pathways_chaos.faults.safety import OPT_IN_LABEL, ChaosRefused, call_with_retries
from pathways_chaos.fixtures.control_plane import LocalControlPlane
from pathways_chaos.fixtures.kubernetes.pathways_jobset import (
    PathwaysWorkload,
    pathways_workload_in,
)
from pathways_chaos.fixtures.kubernetes.state import cluster_state
from pathways_chaos.fixtures.kubernetes.targets import kube_target_for

pytestmark = pytest.mark.kube

EVERY_FAULT: list[Fault[KubeTarget]] = [
    KillPods(slice=0, grace=0),
    KillPods(slice=1),
    EvictPods(slice=1),
    CordonNodes(slice=0),
    DrainNodes(slice=1),
    TaintNode(slice=0, reason="maintenance"),
    TaintNode(slice=1, reason="preemption", host=-1, effect="NoExecute"),
    DeleteJob(slice=0),
]
IDS = [f.kind + "-" + str(i) for i, f in enumerate(EVERY_FAULT)]


@pytest.fixture(scope="module")
def untouched_workload(kube_control_plane: LocalControlPlane) -> Iterator[PathwaysWorkload]:
    """One workload for the tests that must change nothing (so they can share it)."""
    with pathways_workload_in(kube_control_plane) as workload:
        yield workload


def test_every_kubernetes_fault_kind_is_covered_here() -> None:
    assert {type(f) for f in EVERY_FAULT} == set(KUBERNETES_FAULTS)


@pytest.mark.parametrize("fault", EVERY_FAULT, ids=IDS)
def test_dry_run_reports_what_it_would_do_and_changes_nothing(
    untouched_workload: PathwaysWorkload,
    make_kube_target: Callable[..., KubeTarget],
    fault: Fault[KubeTarget],
) -> None:
    dry_target = make_kube_target(untouched_workload, armed=False)
    before = cluster_state(untouched_workload.api_client)

    lines = fault.inject(dry_target)

    assert lines and all(line.startswith("DRY RUN: would ") for line in lines)
    assert list(dry_target.echo) == lines
    time.sleep(0.3)  # armed, these changes are visible in milliseconds (see test_faults)
    assert cluster_state(untouched_workload.api_client) == before


@pytest.mark.parametrize("fault", EVERY_FAULT, ids=IDS)
def test_namespace_outside_the_allowlist_is_refused_before_anything_is_read(
    untouched_workload: PathwaysWorkload, tmp_path: Path, fault: Fault[KubeTarget]
) -> None:
    pathways_workload = untouched_workload
    journal = RollbackJournal(tmp_path / "j.jsonl")
    target = KubeTarget(
        api_client=pathways_workload.api_client,
        namespace=pathways_workload.namespace,
        jobset=pathways_workload.jobset,
        armed=True,
        allowed_namespaces=frozenset({"training-prod"}),
        journal=journal,
    )
    before = cluster_state(pathways_workload.api_client)
    with pytest.raises(ChaosRefused, match=r"^refused: namespace 'pc-\w+' is not in the allowed"):
        fault.inject(target)
    assert cluster_state(pathways_workload.api_client) == before
    assert journal.entries() == []


def test_a_pod_without_the_opt_in_label_stops_the_whole_fault(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    unlabelled = pathways_workload.worker_pods(0)[-1].metadata.name
    core.patch_namespaced_pod(
        unlabelled, pathways_workload.namespace, {"metadata": {"labels": {OPT_IN_LABEL: None}}}
    )
    before = cluster_state(pathways_workload.api_client)
    with pytest.raises(ChaosRefused, match=f"Pod '.*{unlabelled}' has no opt-in label"):
        KillPods(slice=0, grace=0).inject(kube_target)
    assert cluster_state(pathways_workload.api_client) == before  # not even the labelled one
    assert kube_target.journal is not None and kube_target.journal.entries() == []


def test_a_node_without_the_opt_in_label_is_refused(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    node = pathways_workload.worker_pods(1)[0].spec.node_name
    core.patch_node(node, {"metadata": {"labels": {OPT_IN_LABEL: None}}})
    before = cluster_state(pathways_workload.api_client)
    for fault in (CordonNodes(slice=1), DrainNodes(slice=1), TaintNode(slice=1, host=-1)):
        with pytest.raises(ChaosRefused, match=f"Node '{node}' has no opt-in label"):
            fault.inject(kube_target)
    assert cluster_state(pathways_workload.api_client) == before


def test_armed_without_a_journal_is_refused(pathways_workload: PathwaysWorkload) -> None:
    target = KubeTarget(
        api_client=pathways_workload.api_client,
        namespace=pathways_workload.namespace,
        jobset=pathways_workload.jobset,
        armed=True,
        allowed_namespaces=frozenset({pathways_workload.namespace}),
    )
    with pytest.raises(ChaosRefused, match="needs a RollbackJournal"):
        KillPods(slice=0).inject(target)


def test_a_slice_that_does_not_exist_is_a_clear_error(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    with pytest.raises(TargetNotFound, match="no live worker Pods for slice 7 of JobSet 'train'"):
        KillPods(slice=7).inject(kube_target)
    with pytest.raises(TargetNotFound, match="expected one worker Job for slice 7"):
        DeleteJob(slice=7).inject(kube_target)


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("kill_pods@step=3:slice=1:grace=0", KillPods(slice=1, grace=0)),
        ("kill_pods@step=3:slice=1:grace=-1", KillPods(slice=1)),
        ("evict_pods@time=2.5:slice=0", EvictPods(slice=0)),
        ("cordon_nodes@step=4:slice=2", CordonNodes(slice=2)),
        ("drain_nodes@step=4:slice=2", DrainNodes(slice=2)),
        (
            "taint_node@step=9:slice=1:reason=preemption:host=-1:effect=NoExecute:key=",
            TaintNode(slice=1, reason="preemption", host=-1, effect="NoExecute"),
        ),
        ("delete_job@step=1:slice=3", DeleteJob(slice=3)),
    ],
)
def test_text_form_parses_and_round_trips(text: str, fault: Fault[KubeTarget]) -> None:
    scheduled = parse_fault(text)
    assert scheduled.fault == fault
    assert parse_fault(scheduled.to_text()) == scheduled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("taint_node@step=1:slice=0:reason=lunch", "reason='lunch'"),
        ("taint_node@step=1:slice=0:effect=Sometimes", "effect='Sometimes'"),
        ("kill_pods@step=1:slice=0:grace=-5", "grace=-5"),
        ("kill_pods@step=1:slice=0:force=1", "unknown parameter"),
    ],
)
def test_bad_fault_text_is_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message):
        parse_fault(text)


def api_error(status: int, retry_after: str | None = None) -> ApiException:
    error = ApiException(status=status, reason="test")
    error.headers = {"Retry-After": retry_after} if retry_after else {}
    return error


def test_retryable_answers_are_retried_with_growing_backoff_then_succeed() -> None:
    answers: list[Any] = [api_error(503), api_error(409), api_error(429), "done"]
    sleeps: list[float] = []

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    assert call_with_retries(call, sleep=sleeps.append) == "done"
    assert sleeps == [0.05, 0.1, 0.2]


def test_retries_are_bounded_and_honour_retry_after() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def call() -> None:
        calls.append(1)
        raise api_error(429, retry_after="1")

    with pytest.raises(ApiException) as raised:
        call_with_retries(call, attempts=4, sleep=sleeps.append)
    assert raised.value.status == 429
    assert len(calls) == 4
    assert sleeps == [1.0, 1.0, 1.0]


def test_a_forbidden_answer_is_not_retried() -> None:
    calls = []

    def call() -> None:
        calls.append(1)
        raise api_error(403)

    with pytest.raises(ApiException):
        call_with_retries(call, sleep=lambda _: None)
    assert len(calls) == 1


def test_against_a_cluster_only_chaos_arm_arms_the_target(
    request: pytest.FixtureRequest, untouched_workload: PathwaysWorkload, tmp_path: Path
) -> None:
    target = kube_target_for(
        request.config,
        untouched_workload.api_client,
        namespace=untouched_workload.namespace,
        jobset=untouched_workload.jobset,
        journal_path=tmp_path / "j.jsonl",
    )
    assert target.armed is bool(request.config.getoption("chaos_arm", default=False))
    assert target.allowed_namespaces == {untouched_workload.namespace}
    if not target.armed:
        before = cluster_state(untouched_workload.api_client)
        target.echo = lambda line: None
        assert KillPods(slice=0).inject(target)[0].startswith("DRY RUN: would delete pod")
        assert cluster_state(untouched_workload.api_client) == before
