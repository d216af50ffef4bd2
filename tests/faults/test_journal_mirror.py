"""Cleanup from anywhere: an armed session's journal is mirrored on the cluster, signed with a
key the cluster keeps, and ``pathways-chaos rollback --cluster=...`` undoes what a session that
died with its journal file left (on the real local API server).

The broken variants must fail the same assertions: no mirror (the file was the only record),
and a mirror edited on the cluster (it must be refused whole, nothing undone).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.journal_mirror import (
    DATA_KEY,
    JOURNAL_LABEL,
    JournalMirror,
    mirror_name,
)
from pathways_chaos.faults.kubernetes import CordonNodes
from pathways_chaos.faults.lease import TargetLease
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.harness.cli.rollback import rollback_main

pytestmark = pytest.mark.kube


def _cordoned(workload: PathwaysWorkload, slice_index: int) -> list[bool]:
    core: Any = client.CoreV1Api(workload.api_client)
    names = workload.node_names[workload.pool(slice_index)]
    return [bool(core.read_node(n).spec.unschedulable) for n in names]


def _rollback(plane: Any, workload: PathwaysWorkload) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--cluster", f"{plane.kubeconfig}:{plane.context}"]
    argv += ["--namespace", workload.namespace, "--jobset", workload.jobset]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = rollback_main(argv)
    return code, out.getvalue(), err.getvalue()


def _session_that_dies(
    workload: PathwaysWorkload, make_kube_target: Any, tmp_path: Path, *, mirrored: bool = True
) -> tuple[RollbackJournal, TargetLease]:
    """An armed session cordons slice 0's Nodes, then dies: its Lease is no longer renewed
    (released here, as an expiry would) and its journal file is gone with its Pod."""
    api = workload.api_client
    folder = tmp_path / "j"
    folder.mkdir(mode=0o700)
    journal = RollbackJournal(folder / "session.jsonl")
    lease = TargetLease(api, workload.namespace, workload.jobset, journal.run_id, duration_s=30)
    lease.__enter__()
    journal.fence, journal.lease_holder = lease.check_held, lease.holder
    if mirrored:
        journal.mirror = JournalMirror(api, workload.namespace, workload.jobset, journal.run_id)
    target = make_kube_target(workload, armed=True, journal=journal)
    assert CordonNodes(slice=0).inject(target)
    assert all(_cordoned(workload, 0))
    return journal, lease


def _dies(journal: RollbackJournal, lease: TargetLease) -> None:
    lease._stop.set()
    lease.release()
    journal.path.unlink()


@pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])
def test_a_dead_sessions_cordon_is_undone_from_anywhere(
    kube_control_plane: Any,
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    tmp_path: Path,
    broken: bool,
) -> None:
    workload = pathways_workload
    journal, lease = _session_that_dies(workload, make_kube_target, tmp_path, mirrored=not broken)
    _dies(journal, lease)

    code, out, err = _rollback(kube_control_plane, workload)

    def check() -> None:
        assert code == 0, out + err
        assert "uncordon" in out, out
        assert not any(_cordoned(workload, 0))
        core: Any = client.CoreV1Api(workload.api_client)
        left = core.list_namespaced_config_map(
            workload.namespace, label_selector=f"{JOURNAL_LABEL}=true"
        )
        assert left.items == []  # everything undone: the mirror is gone

    if broken:
        with pytest.raises(AssertionError):
            check()
        journal.mirror = None  # the test's own cleanup: uncordon by hand
        for name in workload.node_names[workload.pool(0)]:
            client.CoreV1Api(workload.api_client).patch_node(
                name, {"spec": {"unschedulable": False}}
            )
    else:
        check()
        assert _rollback(kube_control_plane, workload)[0] == 0  # safe to run again


def test_a_live_sessions_mirror_is_left_to_it(
    kube_control_plane: Any,
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    tmp_path: Path,
) -> None:
    workload = pathways_workload
    journal, lease = _session_that_dies(workload, make_kube_target, tmp_path)
    try:
        code, out, _ = _rollback(kube_control_plane, workload)
        assert code == 0 and "holds the Lease and rolls it back" in out, out
        assert all(_cordoned(workload, 0))  # nothing undone behind the live session's back
    finally:
        journal.replay(workload.api_client)
        journal._drop_mirror()
        lease.__exit__(None, None, None)
    assert not any(_cordoned(workload, 0))


def test_a_mirror_edited_on_the_cluster_is_refused_whole(
    kube_control_plane: Any,
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    tmp_path: Path,
) -> None:
    """Someone who may write ConfigMaps but not read the key renames the cordoned Node to
    another (an admin's): the chain fails, and nothing of the mirror is acted on."""
    workload = pathways_workload
    journal, lease = _session_that_dies(workload, make_kube_target, tmp_path)
    _dies(journal, lease)
    core: Any = client.CoreV1Api(workload.api_client)
    name = mirror_name(journal.run_id)
    found = core.read_namespaced_config_map(name, workload.namespace)
    victim, other = (
        workload.node_names[workload.pool(0)][0],
        workload.node_names[workload.pool(1)][0],
    )
    found.data[DATA_KEY] = found.data[DATA_KEY].replace(victim, other)
    core.replace_namespaced_config_map(name, workload.namespace, found)
    try:
        code, out, err = _rollback(kube_control_plane, workload)
        assert code == 3, out + err
        assert "is not as your pathways-chaos wrote it" in err, err
        assert all(_cordoned(workload, 0))
    finally:
        for node in workload.node_names[workload.pool(0)]:
            core.patch_node(node, {"spec": {"unschedulable": False}})
        core.delete_namespaced_config_map(name, workload.namespace)
