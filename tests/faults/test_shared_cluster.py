"""Safe on a shared cluster: rollback never undoes someone else's change, and knows its cluster.

Each test here failed before the fix it names: a journal replayed against another cluster
acted there; an old journal removed an admin's later cordon or GKE's identical taint; one
malformed line stopped the whole rollback (or a cut-off one was skipped with exit 0); a drain
evicted a Pod nothing recreates; a Job still terminating was taken for someone else's; answers
lost after the change was applied were misread (the error-proxy matrix); two armed sessions ran
on one JobSet at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults import journal as journal_module
from pathways_chaos.faults.journal import RollbackJournal, read_journal
from pathways_chaos.faults.journal_trust import holder_of
from pathways_chaos.faults.kubernetes import (
    CordonNodes,
    DeleteJob,
    DrainNodes,
    KubeTarget,
    TaintNode,
)
from pathways_chaos.faults.lease import LeaseHeld, TargetLease
from pathways_chaos.faults.safety import CORDONED_BY_ANNOTATION, OPT_IN_LABEL, OPT_IN_VALUE
from pathways_chaos.faults.undo import undo_entry
from pathways_chaos.fixtures.control_plane import LocalControlPlane, wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.fixtures.kubernetes.state import cluster_state
from pathways_chaos.harness.cli.rollback import rollback_main

pytestmark = pytest.mark.kube
ROOT = Path(__file__).parents[2]


def nodes_of(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k.startswith("Node/")}


def cli(plane: LocalControlPlane, *argv: str) -> list[str]:
    return [*argv, "--kubeconfig", str(plane.kubeconfig), "--context", plane.context]


# -- journal identity -----------------------------------------------------------------------


def test_a_journal_replayed_against_another_control_plane_changes_nothing_there(
    pathways_workload: PathwaysWorkload,
    kube_control_plane: LocalControlPlane,
    kube_target: KubeTarget,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = pathways_workload.api_client
    before_here = cluster_state(api)
    CordonNodes(slice=0).inject(kube_target)
    DeleteJob(slice=1).inject(kube_target)
    assert kube_target.journal is not None
    journal = kube_target.journal.path
    with LocalControlPlane(
        workdir=tmp_path / "other", controller_manager=False, scheduler=False
    ) as other:
        # The other cluster has what the journal names: the namespace and same-named Nodes.
        other_api = other.api_client()
        core: Any = client.CoreV1Api(other_api)
        core.create_namespace({"metadata": {"name": pathways_workload.namespace}})
        for name in pathways_workload.node_names[pathways_workload.pool(0)]:
            core.create_node({"metadata": {"name": name}})
        before_there = cluster_state(other_api)

        code = rollback_main(cli(other, str(journal)))

        err = capsys.readouterr().err.strip()
        assert code == 3
        assert err.count("\n") == 0 and "belongs to cluster" in err and "refused" in err
        assert cluster_state(other_api) == before_there
    # Nothing was marked undone: the right cluster is still restored afterwards.
    assert len(RollbackJournal(journal).pending()) == 3  # two cordons and the Job
    assert rollback_main(cli(kube_control_plane, str(journal))) == 0
    pathways_workload.wait_running(timeout=60)
    assert nodes_of(cluster_state(api)) == nodes_of(before_here)


def test_the_journal_header_names_the_api_server_the_cluster_and_the_run(
    kube_target: KubeTarget, kube_control_plane: LocalControlPlane
) -> None:
    CordonNodes(slice=0).inject(kube_target)
    assert kube_target.journal is not None
    header = read_journal(kube_target.journal.path).header
    assert header is not None
    kube_system: Any = client.CoreV1Api(kube_target.api_client).read_namespace("kube-system")
    assert header["cluster_uid"] == kube_system.metadata.uid
    assert header["server"] == kube_control_plane.server
    assert header["run"] == kube_target.journal.run_id
    entry = kube_target.journal.entries()[0]
    assert entry["uid"] and entry["set"]["spec.unschedulable"] is True


# -- ownership: only what this run left ----------------------------------------------------


def test_an_old_journal_leaves_a_re_cordoned_node_cordoned(
    pathways_workload: PathwaysWorkload,
    kube_target: KubeTarget,
    kube_control_plane: LocalControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    node = sorted({p.spec.node_name for p in pathways_workload.worker_pods(0)})[0]
    assert kube_target.journal is not None
    CordonNodes(slice=0).inject(kube_target)
    # A person uncordons (kubectl uncordon leaves annotations alone), an admin re-cordons.
    core.patch_node(node, {"spec": {"unschedulable": None}}, field_manager="kubectl-uncordon")
    core.patch_node(node, {"spec": {"unschedulable": True}}, field_manager="kubectl-cordon")
    assert core.read_node(node).metadata.annotations[CORDONED_BY_ANNOTATION]  # still "ours"

    code = rollback_main(cli(kube_control_plane, str(kube_target.journal.path)))

    out = capsys.readouterr().out
    assert code == 0
    assert core.read_node(node).spec.unschedulable is True  # the admin's cordon stays
    assert f"uncordon node {node}: cordoned again since by kubectl-cordon" in out
    core.patch_node(node, {"spec": {"unschedulable": None}})  # the admin's, undone by hand


def test_an_identical_maintenance_taint_put_back_later_is_left_alone(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    fault = TaintNode(slice=0, reason="maintenance", host=0)
    (line,) = fault.inject(kube_target)
    node = line.split()[2]
    ours = core.read_node(node).spec.taints
    # Someone removes our taint; GKE puts its own identical maintenance taint back.
    core.patch_node(node, {"spec": {"taints": None}})
    gke = {"key": ours[0].key, "value": ours[0].value, "effect": ours[0].effect}
    core.patch_node(node, {"spec": {"taints": [gke]}})
    assert kube_target.journal is not None

    result = kube_target.journal.replay(kube_target.api_client)

    assert result.ok
    assert [(t.key, t.value, t.effect) for t in core.read_node(node).spec.taints] == [
        (gke["key"], gke["value"], gke["effect"])
    ]
    assert "set by someone else since, left alone" in result.lines[0]
    core.patch_node(node, {"spec": {"taints": None}})


def test_malformed_lines_are_reported_by_number_and_every_other_entry_is_undone(
    pathways_workload: PathwaysWorkload,
    kube_target: KubeTarget,
    kube_control_plane: LocalControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = pathways_workload.api_client
    before = nodes_of(cluster_state(api))
    CordonNodes(slice=0).inject(kube_target)
    assert kube_target.journal is not None
    path = kube_target.journal.path
    lines = path.read_text().splitlines()
    # Lines that are not JSON objects carry no instruction: reported and skipped. (A JSON object
    # without its MAC refuses the whole journal: tests/faults/test_journal_attacks.py.)
    corrupt = [lines[0], "42", "null", lines[1][:25], *lines[1:]]
    path.write_text("\n".join(corrupt) + "\n")
    TaintNode(slice=1, host=-1).inject(kube_target)  # appended after the damage

    code = rollback_main(cli(kube_control_plane, str(path)))

    captured = capsys.readouterr()
    assert code == 1  # something was skipped, and the exit code says so
    for number, why in (
        (2, "not a journal record (int 42)"),
        (3, "not a journal record (NoneType null)"),
        (4, "not JSON"),
    ):
        assert f"line {number}: {why}" in captured.err
    assert "Traceback" not in captured.err
    assert nodes_of(cluster_state(api)) == before  # every well-formed entry was undone


# -- drain like kubectl; a terminating Job is waited for --------------------------------------


def _bare_pod(workload: PathwaysWorkload, node: str) -> str:
    core: Any = client.CoreV1Api(workload.api_client)
    name = "hand-made"
    core.create_namespaced_pod(
        workload.namespace,
        {
            "metadata": {"name": name, "labels": {OPT_IN_LABEL: OPT_IN_VALUE}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "pathways-chaos/fake:1"}],
            },
        },
    )
    wait_for(lambda: core.read_namespaced_pod(name, workload.namespace).status.phase == "Running")
    return name


def test_drain_leaves_a_pod_no_controller_owns_unless_forced(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget, make_kube_target: Any
) -> None:
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    node = sorted({p.spec.node_name for p in pathways_workload.worker_pods(0)})[0]
    bare = _bare_pod(pathways_workload, node)

    lines = DrainNodes(slice=0).inject(kube_target)

    assert not any(bare in line for line in lines)
    assert (
        core.read_namespaced_pod(bare, pathways_workload.namespace).metadata.deletion_timestamp
        is None
    )
    assert any(f"{bare} left alone: no controller owns it" in e for e in kube_target.echo)  # type: ignore[attr-defined]

    assert kube_target.journal is not None
    assert not [e for e in kube_target.journal.entries() if e.get("name") == bare]

    dry = make_kube_target(pathways_workload, armed=False)
    plan = DrainNodes(slice=1, force=True).inject(dry)  # slice 1's Nodes are not cordoned
    assert not any(bare in line for line in plan)  # not on slice 1's Nodes
    undo = undo_entry(
        pathways_workload.api_client,
        {
            "action": "evict_pod",
            "namespace": pathways_workload.namespace,
            "name": bare,
            "owner": None,
        },
    )
    assert undo.endswith("nothing to undo, and nothing recreates it (no controller)")


def test_a_forced_drain_evicts_a_pod_no_controller_owns(
    pathways_workload: PathwaysWorkload, make_kube_target: Any
) -> None:
    node = sorted({p.spec.node_name for p in pathways_workload.worker_pods(0)})[0]
    bare = _bare_pod(pathways_workload, node)
    dry = make_kube_target(pathways_workload, armed=False)
    plan = DrainNodes(slice=0, force=True).inject(dry)
    assert f"DRY RUN: would evict pod {pathways_workload.namespace}/{bare}" in plan


def test_a_job_still_terminating_is_waited_for_then_recreated_and_verified(
    pathways_workload: PathwaysWorkload, kube_target: KubeTarget
) -> None:
    batch: Any = client.BatchV1Api(pathways_workload.api_client)
    ns, name = pathways_workload.namespace, pathways_workload.worker_jobs[1]
    batch.patch_namespaced_job(name, ns, {"metadata": {"finalizers": ["pathways-chaos.test/hold"]}})
    old_uid = batch.read_namespaced_job(name, ns).metadata.uid
    DeleteJob(slice=1).inject(kube_target)
    assert batch.read_namespaced_job(name, ns).metadata.deletion_timestamp is not None

    def release() -> None:  # the finalizer's owner finishes a moment later
        time.sleep(1.5)
        batch.patch_namespaced_job(name, ns, {"metadata": {"finalizers": None}})

    releaser = threading.Thread(target=release)
    releaser.start()
    assert kube_target.journal is not None
    result = kube_target.journal.replay(kube_target.api_client)
    releaser.join()

    assert result.ok, result.errors
    assert result.lines[0].endswith(f"recreated job {ns}/{name}")
    job = batch.read_namespaced_job(name, ns)
    assert job.metadata.uid != old_uid and job.metadata.deletion_timestamp is None
    pathways_workload.wait_running(timeout=60)


# -- one armed session per target -----------------------------------------------------------


def test_a_second_armed_session_is_refused_naming_the_holder_and_a_dead_holder_expires(
    pathways_workload: PathwaysWorkload,
) -> None:
    api, ns, js = (
        pathways_workload.api_client,
        pathways_workload.namespace,
        pathways_workload.jobset,
    )
    with TargetLease(api, ns, js, "first", duration_s=30) as first:
        with pytest.raises(LeaseHeld) as refused:
            TargetLease(api, ns, js, "second").acquire()
        message = str(refused.value)
        assert "\n" not in message and first.holder in message and message.startswith("refused:")
    TargetLease(api, ns, js, "second").acquire()  # released at exit: free again
    client.CoordinationV1Api(api).delete_namespaced_lease(f"pathways-chaos-{js}", ns)

    with TargetLease(api, ns, js, "renewing", duration_s=3) as held:
        time.sleep(3.5)  # longer than the lease: only its renewals keep it
        assert held.renewals >= 1 and held.lost is None
        with pytest.raises(LeaseHeld):
            TargetLease(api, ns, js, "other").acquire()

    dead = TargetLease(api, ns, js, "dead", duration_s=1)  # the renewing one released it
    dead.acquire()  # ... and the process dies: no renewals, no release
    with pytest.raises(LeaseHeld):
        TargetLease(api, ns, js, "early").acquire()
    time.sleep(1.5)
    TargetLease(api, ns, js, "after").acquire()  # expired: taken over


HOLDER_TEST = """
import os, pathlib, time

def test_hold(cluster):
    pathlib.Path(os.environ["READY"]).write_text("armed")
    deadline = time.monotonic() + 120
    while not pathlib.Path(os.environ["RELEASE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


def test_two_concurrent_armed_sessions_the_second_refuses_in_one_line(
    pathways_workload: PathwaysWorkload, kube_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "test_hold.py").write_text(textwrap.dedent(HOLDER_TEST))
    ready, release = tmp_path / "ready", tmp_path / "release"
    env = {
        **os.environ,
        "READY": str(ready),
        "RELEASE": str(release),
        "PATHWAYS_CHAOS_JOURNAL_DIR": str(tmp_path / "journals"),
    }
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "test_hold.py",
        f"--cluster={kube_control_plane.kubeconfig}:{kube_control_plane.context}",
        f"--namespace={pathways_workload.namespace}",
        f"--jobset={pathways_workload.jobset}",
        "--chaos-arm",
    ]  # fmt: skip
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ready.exists() or first.poll() is not None, timeout=180, interval=0.1)
        assert ready.exists(), first.communicate()[0][-3000:]
        second = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        release.write_text("done")
        out_first = first.communicate(timeout=120)[0]
    assert first.returncode == 0, out_first[-3000:]
    assert "rollback journal" in out_first and str(tmp_path / "journals") in out_first
    assert second.returncode == 3, second.stdout[-3000:] + second.stderr[-2000:]
    refusal = [
        line for line in second.stdout.splitlines() if "held by another armed session" in line
    ]
    assert len(refusal) == 1 and "run " in refusal[0]
    assert "Traceback" not in second.stdout + second.stderr


def test_the_allowlist_option_refuses_a_namespace_outside_it_once(
    pathways_workload: PathwaysWorkload, kube_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "test_hold.py").write_text(textwrap.dedent(HOLDER_TEST))
    (tmp_path / "release").write_text("at once")
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "test_hold.py",
        f"--cluster={kube_control_plane.kubeconfig}:{kube_control_plane.context}",
        f"--namespace={pathways_workload.namespace}",
        f"--jobset={pathways_workload.jobset}",
        "--chaos-allow-namespace=training-a", "--chaos-allow-namespace=training-b",
    ]  # fmt: skip
    env = {**os.environ, "READY": str(tmp_path / "ready"), "RELEASE": str(tmp_path / "release")}
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if "is not among the allowed" in line]
    assert len(lines) == 1 and "training-a, training-b" in lines[0]
    assert not (tmp_path / "ready").exists()  # refused before any test ran


def test_a_fake_smaller_than_the_jobset_stops_the_session_once(
    pathways_workload: PathwaysWorkload, kube_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "test_two.py").write_text(
        "def test_a(cluster):\n    pass\n\n\ndef test_b(cluster):\n    pass\n"
    )
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "test_two.py",
        f"--cluster={kube_control_plane.kubeconfig}:{kube_control_plane.context}",
        f"--namespace={pathways_workload.namespace}",
        f"--jobset={pathways_workload.jobset}",
        "--fake-slices=1",
    ]  # fmt: skip
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if "pass --fake-slices=2" in line]
    assert len(lines) == 1 and "Traceback" not in out.stdout + out.stderr


def test_rollback_pending_undoes_this_clusters_unfinished_journals_only(
    pathways_workload: PathwaysWorkload,
    kube_control_plane: LocalControlPlane,
    make_kube_target: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = pathways_workload.api_client
    before = nodes_of(cluster_state(api))
    folder = tmp_path / "journals"
    crashed = RollbackJournal(folder / "20260101T000000Z-crashed.jsonl")
    CordonNodes(slice=0).inject(make_kube_target(pathways_workload, armed=True, journal=crashed))
    # Another cluster's journal, and one a live session (another process) still holds.
    other = folder / "20260101T000001Z-other.jsonl"
    other_journal = RollbackJournal(other)
    other_journal._append(
        {"journal": 2, "run": "o", "cluster_uid": "another-cluster", "server": "https://x"}
    )
    other_journal._append({"seq": 1, "run": "o", "action": "cordon", "node": "n1", "uid": "u"})
    live_process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = RollbackJournal(folder / "20260101T000002Z-live.jsonl")
        # The live journal's header names the other process as its writer (a session there).
        with monkeypatch.context() as patch:
            patch.setattr(journal_module, "holder_of", lambda: holder_of(live_process.pid))
            TaintNode(slice=1, host=0).inject(
                make_kube_target(pathways_workload, armed=True, journal=live)
            )

        code = rollback_main(cli(kube_control_plane, "--pending", "--journal-dir", str(folder)))

        out = capsys.readouterr().out
        assert code == 0
        assert f"{live.path}: skipped, in use by pid {live_process.pid}" in out
        assert "uncordoned node" in out and str(other) not in out
        assert crashed.pending() == [] and len(live.pending()) == 1
        assert len(RollbackJournal(other).pending()) == 1
    finally:
        live_process.kill()
        live_process.wait()
    assert rollback_main(cli(kube_control_plane, "--pending", "--journal-dir", str(folder))) == 0
    assert nodes_of(cluster_state(api)) == before
