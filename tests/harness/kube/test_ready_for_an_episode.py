"""Before an episode whose faults a child acts out, the judging process waits for the JobSet:
one that is not running is one line naming it (the cluster's state, neither the loop's failure
nor a bug of the toolkit's), on the real local API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.fixtures.control_plane import wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.kube import pod_bridge
from pathways_chaos.harness.kube.kube_cluster import ClusterSpec, KubeBridgedCluster

pytestmark = pytest.mark.kube


def test_a_jobset_that_is_not_running_is_one_line_before_an_episode(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workload = pathways_workload
    core: Any = client.CoreV1Api(workload.api_client)
    (tmp_path / "j").mkdir(mode=0o700)
    target = make_kube_target(workload, armed=True, journal=RollbackJournal(tmp_path / "j" / "s"))
    spec = ClusterSpec("ctx", None, workload.namespace, workload.jobset)
    cluster = KubeBridgedCluster(
        SliceTopology(workload.slices, 1),
        target,
        workload.api_client,
        spec,
        workload.hosts_per_slice,
    )
    slice_1 = workload.node_names[workload.pool(1)]
    with cluster:
        assert cluster.ready_for_an_episode() == []  # healthy: nothing down, nothing raised
        monkeypatch.setattr(pod_bridge, "OBSERVE_TIMEOUT_S", 2.0)
        try:  # outside any journal (an admin, a node repair): slice 1 cordoned, its Pods gone
            for name in slice_1:
                core.patch_node(name, {"spec": {"unschedulable": True}})
            for pod in workload.worker_pods(1):
                core.delete_namespaced_pod(pod.metadata.name, workload.namespace)
            # the bridge's watch has seen them go (else its view still shows them running)
            gone = workload.hosts_per_slice
            wait_for(lambda: cluster.bridge.running(1) < gone, 30, what="slice 1 Pods gone")
            with pytest.raises(ChaosConfigError) as said:
                cluster.ready_for_an_episode()
            # An episode's child starts its own bridged fake on the same JobSet, whose start
            # waits for every slice the same way: the same line (logged as the setup's failure,
            # not the loop's nor ours: test_child_startup.py). Its bridge alone, as two fakes
            # cannot patch pathwaysutils in one process.
            child_side = KubeBridgedCluster(
                SliceTopology(workload.slices, 1),
                make_kube_target(workload, armed=False),
                workload.api_client,
                spec,
                workload.hosts_per_slice,
            )
            child_side.bridge.start()
            try:
                with pytest.raises(ChaosConfigError) as child_said:
                    child_side._wait_healthy(1)
            finally:
                child_side.bridge.stop()
        finally:
            for name in slice_1:
                core.patch_node(name, {"spec": {"unschedulable": False}})
    message = str(said.value)
    assert "\n" not in message
    assert message.startswith("the episode needs a healthy JobSet, but bridge: slice 1"), message
    assert f"kubectl -n {workload.namespace} get pods" in message
    child_message = str(child_said.value)
    assert "\n" not in child_message
    assert child_message.startswith("the episode needs a healthy JobSet, but"), child_message
