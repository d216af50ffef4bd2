"""Hot-swap: a failed high-priority slice takes over a spare slice held by a low-priority job.

As the Pathways guide describes it: the slice's Nodes fail (tainted here, as GKE does before a
preemption), its worker Pods are killed, the Job recreates them, and the scheduler preempts the
lower-priority spare workload through PriorityClass preemption. The time to rebind is recorded
(``record_property``), never asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pathways_chaos.faults.kubernetes import KillPods, KubeTarget, TaintNode
from pathways_chaos.fixtures.control_plane import wait_for
from pathways_chaos.fixtures.kubernetes.objects import SPARE_LABEL
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload

pytestmark = pytest.mark.kube


@pytest.mark.parametrize(
    "pathways_workload",
    [{"slices": 2, "hosts_per_slice": 2, "spare_slices": 1, "priority": True}],
    indirect=True,
)
def test_killed_slice_is_rescheduled_onto_the_spare_slice_by_preemption(
    pathways_workload: PathwaysWorkload,
    kube_chaos_target: KubeTarget,
    record_property: Callable[[str, object], None],
) -> None:
    workload = pathways_workload
    spare_nodes = set(workload.node_names[workload.spare_pool(0)])
    failed_nodes = set(workload.node_names[workload.pool(1)])
    assert {p.spec.node_name for p in workload.worker_pods(1)} == failed_nodes
    spare_victims = {p.metadata.name for p in workload.pods(f"{SPARE_LABEL}=0")}
    assert {p.spec.node_name for p in workload.pods(f"{SPARE_LABEL}=0")} == spare_nodes
    old_workers = {p.metadata.name for p in workload.worker_pods(1)}

    TaintNode(slice=1, reason="maintenance", host=-1).inject(kube_chaos_target)
    started = time.monotonic()
    KillPods(slice=1, grace=0).inject(kube_chaos_target)

    def rebound() -> bool:
        pods = [p for p in workload.worker_pods(1) if p.metadata.name not in old_workers]
        return len(pods) == workload.hosts_per_slice and all(
            p.spec.node_name in spare_nodes and p.status.phase == "Running" for p in pods
        )

    wait_for(rebound, timeout=30, interval=0.005, what="slice 1 rebound onto the spare slice")
    rebind_seconds = time.monotonic() - started
    record_property("hot_swap_rebind_seconds", round(rebind_seconds, 4))
    print(f"hot-swap rebind: {rebind_seconds * 1000:.0f} ms")

    # The spare workload's Pods were preempted; its Job's replacements wait (nowhere to go).
    spare_now = workload.pods(f"{SPARE_LABEL}=0")
    assert not {p.metadata.name for p in spare_now} & spare_victims
    assert all(p.spec.node_name is None for p in spare_now)
    # The high-priority slice 0 was not disturbed, and slice 1 did not go back to failed Nodes.
    assert {p.spec.node_name for p in workload.worker_pods(0)} == set(
        workload.node_names[workload.pool(0)]
    )
    assert not {p.spec.node_name for p in workload.worker_pods(1)} & failed_nodes
