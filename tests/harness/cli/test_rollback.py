"""The rollback journal: every Node restored exactly, idempotent, and replayable after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import (
    CordonNodes,
    DrainNodes,
    KillPods,
    KubeTarget,
    TaintNode,
    _delete_pod,
)
from pathways_chaos.faults.safety import CORDONED_BY_ANNOTATION
from pathways_chaos.faults.undo import undo_entry
from pathways_chaos.fixtures.control_plane import LocalControlPlane, wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.fixtures.kubernetes.state import cluster_state
from pathways_chaos.harness.cli.rollback import rollback_main

pytestmark = pytest.mark.kube


def nodes_of(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k.startswith("Node/")}


def test_replay_restores_every_node_exactly_and_a_second_replay_changes_nothing(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    api = pathways_workload.api_client
    before = nodes_of(cluster_state(api))
    CordonNodes(slice=0).inject(kube_target)
    TaintNode(slice=0, reason="maintenance", host=-1).inject(kube_target)
    TaintNode(slice=1, reason="preemption", host=1, effect="NoExecute").inject(kube_target)
    DrainNodes(slice=1).inject(kube_target)
    changed = nodes_of(cluster_state(api))
    assert {k for k in before if before[k] != changed[k]} == {
        f"Node//{n}"
        for pool in (0, 1)
        for n in pathways_workload.node_names[pathways_workload.pool(pool)]
    }
    journal = kube_target.journal
    assert journal is not None

    result = journal.replay(api)

    assert result.ok, result.errors
    assert nodes_of(cluster_state(api)) == before
    assert journal.pending() == []
    # Undo is idempotent on its own too: run every entry's undo again; nothing moves.
    for entry in journal.entries():
        undo_entry(api, entry)
    assert nodes_of(cluster_state(api)) == before
    assert journal.replay(api).lines == []


def test_a_node_someone_else_cordoned_is_never_uncordoned(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    api = pathways_workload.api_client
    core: Any = client.CoreV1Api(api)
    theirs, ours = sorted({p.spec.node_name for p in pathways_workload.worker_pods(0)})
    core.patch_node(theirs, {"spec": {"unschedulable": True}})  # an operator's cordon

    assert CordonNodes(slice=0).inject(kube_target) == [f"cordoned node {ours}"]
    assert kube_target.journal is not None
    kube_target.journal.replay(api)

    assert core.read_node(theirs).spec.unschedulable is True
    assert not core.read_node(ours).spec.unschedulable
    assert CORDONED_BY_ANNOTATION not in (core.read_node(ours).metadata.annotations or {})


def test_an_entry_whose_change_never_happened_undoes_to_nothing(
    pathways_workload: PathwaysWorkload, tmp_path: Path
) -> None:
    """A crash between the fsync and the API call leaves an entry for a change never made."""
    api = pathways_workload.api_client
    node: Any = client.CoreV1Api(api).read_node(pathways_workload.all_node_names()[0])
    journal = RollbackJournal(tmp_path / "j.jsonl")
    journal.bind(api)
    journal.record("cordon", node=node.metadata.name, uid=node.metadata.uid)
    taint = {
        "key": "cloud.google.com/active-node-maintenance",
        "value": "true",
        "effect": "NoSchedule",
    }
    journal.record("taint", node=node.metadata.name, uid=node.metadata.uid, taint=taint)
    with (tmp_path / "j.jsonl").open("a") as f:
        f.write('{"seq": 3, "action": "cordon", "no')  # torn by a kill mid-write
    before = cluster_state(api)

    result = journal.replay(api)

    assert result.ok
    assert [line.split(": ", 1)[1] for line in result.lines] == [
        "taint not present, nothing to undo",
        "not cordoned (not this run's cordon), left alone",
    ]
    assert cluster_state(api) == before


def test_a_pod_already_gone_is_fine(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    pod = pathways_workload.worker_pods(0)[0]
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    core.delete_namespaced_pod(
        pod.metadata.name, pathways_workload.namespace, grace_period_seconds=0
    )
    assert _delete_pod(kube_target, pod, 0, KillPods(slice=0)) is None
    assert f"pod {pathways_workload.namespace}/{pod.metadata.name} already gone" in list(
        kube_target.echo
    )


CHILD_TEST = """
import os, pathlib, time
from kubernetes import config
from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import CordonNodes, DeleteJob, KubeTarget, TaintNode

def test_interrupted_mid_fault():
    api = config.new_client_from_config(os.environ["KC"], context=os.environ["CTX"])
    journal = RollbackJournal(os.environ["JOURNAL"])
    ns = os.environ["NS"]
    target = KubeTarget(api, ns, "train", armed=True, allowed_namespaces=frozenset({ns}),
                        journal=journal)
    with journal.guard(api):
        CordonNodes(slice=0).inject(target)
        TaintNode(slice=1, reason="preemption", host=-1).inject(target)
        DeleteJob(slice=1).inject(target)
        pathlib.Path(os.environ["READY"]).write_text("injected")
        time.sleep(120)
"""


def run_child_until_injected(
    tmp_path: Path, plane: LocalControlPlane, workload: PathwaysWorkload
) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "test_child.py").write_text(textwrap.dedent(CHILD_TEST))
    journal, ready = tmp_path / "rollback.jsonl", tmp_path / "ready"
    env = {
        **os.environ,
        "KC": str(plane.kubeconfig),
        "CTX": plane.context,
        "JOURNAL": str(journal),
        "READY": str(ready),
        "NS": workload.namespace,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # a bare pytest: only the child test runs
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_child.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: ready.exists() or child.poll() is not None, timeout=60, interval=0.05)
    except TimeoutError:
        child.kill()
        raise
    if child.poll() is not None:
        out = child.stdout.read().decode() if child.stdout else ""
        pytest.fail(f"child pytest ended before injecting:\n{out}")
    return child, journal


def without_uid(template: dict[str, Any]) -> dict[str, Any]:
    labels = dict(template["metadata"]["labels"])
    labels.pop("controller-uid")
    return {**template, "metadata": {**template["metadata"], "labels": labels}}


def assert_faults_in_place(api: Any, workload: PathwaysWorkload) -> None:
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    for name in workload.node_names[workload.pool(0)]:
        assert core.read_node(name).spec.unschedulable is True
    for name in workload.node_names[workload.pool(1)]:
        assert core.read_node(name).spec.taints
    names = {j.metadata.name for j in batch.list_namespaced_job(workload.namespace).items}
    assert workload.worker_jobs[1] not in names


def test_a_pytest_run_killed_with_sigkill_leaves_a_journal_that_rollback_undoes(
    pathways_workload: PathwaysWorkload,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = pathways_workload.api_client
    before = cluster_state(api)
    child, journal = run_child_until_injected(tmp_path, kube_control_plane, pathways_workload)

    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    assert_faults_in_place(api, pathways_workload)  # nothing ran at teardown: it was SIGKILL

    argv = [
        str(journal),
        "--kubeconfig",
        str(kube_control_plane.kubeconfig),
        "--context",
        kube_control_plane.context,
    ]
    assert rollback_main(argv) == 0
    printed = capsys.readouterr().out
    assert (
        "recreated job" in printed and "uncordoned node" in printed and "removed taint" in printed
    )

    pathways_workload.wait_running()
    after = cluster_state(api)
    assert nodes_of(after) == nodes_of(before)
    job_key = f"Job/{pathways_workload.namespace}/{pathways_workload.worker_jobs[1]}"
    # The same Job again, but a new object: only its generated uid label differs.
    assert without_uid(after[job_key]["spec"]["template"]) == without_uid(
        before[job_key]["spec"]["template"]
    )
    assert after[job_key]["metadata"]["uid"] != before[job_key]["metadata"]["uid"]
    # A second rollback finds nothing left to do.
    assert rollback_main(argv) == 0
    assert "nothing to undo" in capsys.readouterr().out


def test_sigterm_unwinds_the_run_and_the_guard_rolls_back_by_itself(
    pathways_workload: PathwaysWorkload, kube_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    api = pathways_workload.api_client
    before = nodes_of(cluster_state(api))
    child, journal = run_child_until_injected(tmp_path, kube_control_plane, pathways_workload)
    assert_faults_in_place(api, pathways_workload)

    os.kill(child.pid, signal.SIGTERM)
    child.wait(30)

    assert nodes_of(cluster_state(api)) == before
    assert RollbackJournal(journal).pending() == []
    batch: Any = client.BatchV1Api(api)
    wait_for(
        lambda: batch.read_namespaced_job(
            pathways_workload.worker_jobs[1], pathways_workload.namespace
        )
    )


def test_rollback_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rollback_main(["/nonexistent/journal.jsonl"]) == 2
    with pytest.raises(SystemExit):
        rollback_main([])
    # Another file given as the journal: one line (it was a SKIPPED line per line of it).
    other = tmp_path / "passwd"
    other.write_text("".join(f"user{i}:x:{i}:{i}::/home:/bin/sh\n" for i in range(20)))
    os.chmod(other, 0o600)
    capsys.readouterr()
    assert rollback_main([str(other), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a rollback journal (none of its 20 lines" in err, err
    assert other.read_text().startswith("user0:")


@pytest.mark.parametrize("ending", [AssertionError, KeyboardInterrupt])
def test_the_guard_rolls_back_when_the_block_fails_or_is_interrupted(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    tmp_path: Path,
    ending: type[BaseException],
) -> None:
    api = pathways_workload.api_client
    before = nodes_of(cluster_state(api))
    journal = RollbackJournal(tmp_path / "j.jsonl")
    target = make_kube_target(pathways_workload, armed=True, journal=journal)

    with pytest.raises(ending), journal.guard(api):
        CordonNodes(slice=0).inject(target)
        TaintNode(slice=1, host=-1).inject(target)
        assert nodes_of(cluster_state(api)) != before
        raise ending("the test body failed")

    assert nodes_of(cluster_state(api)) == before
    assert journal.pending() == []
