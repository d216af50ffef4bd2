"""Every Kubernetes fault and its undo, with the first write answered badly by the error proxy.

Shared by the regression test and bench/bench_shared_cluster.py: one row per (fault, phase,
mode), saying whether the fault reported what it did and whether the cluster was left changed
after the journal's replay (the figure whose target is 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import (
    CordonNodes,
    DeleteJob,
    DrainNodes,
    EvictPods,
    KillPods,
    KubeTarget,
    TaintNode,
)
from pathways_chaos.faults.model import Fault
from pathways_chaos.faults.safety import RECREATED_BY_ANNOTATION
from pathways_chaos.fixtures.control_plane import LocalControlPlane
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.fixtures.kubernetes.state import cluster_state
from tests.faults.kubernetes.error_proxy import MODES, ErrorProxy, client_through

#: fault name -> (the fault on slice 0, lines it must report on a 2-host slice, reversible)
FAULTS: dict[str, tuple[Callable[[], Fault[Any]], int, bool]] = {
    "cordon_nodes": (lambda: CordonNodes(slice=0), 2, True),
    "taint_node": (lambda: TaintNode(slice=0, host=-1), 2, True),
    "drain_nodes": (lambda: DrainNodes(slice=0), 4, True),
    "kill_pods": (lambda: KillPods(slice=0, grace=0), 2, False),
    "evict_pods": (lambda: EvictPods(slice=0), 2, False),
    "delete_job": (lambda: DeleteJob(slice=0), 1, True),
}


@dataclasses.dataclass
class Case:
    fault: str
    phase: str  # "fault": the fault's first write is disturbed; "undo": the undo's
    mode: str
    reported: list[str]
    expected_lines: int
    replay_errors: list[str]
    left_changed: list[str]

    @property
    def ok(self) -> bool:
        return (
            len(self.reported) == self.expected_lines
            and not self.replay_errors
            and not self.left_changed
        )

    def describe(self) -> str:
        return (
            f"{self.fault} ({self.mode} on the {self.phase}'s first write): reported "
            f"{self.reported}, want {self.expected_lines} lines; replay errors "
            f"{self.replay_errors}; left changed {self.left_changed}"
        )


def stable_state(workload: PathwaysWorkload) -> dict[str, Any]:
    """Nodes exactly; Jobs by what they run (a re-created Job is a new object of the same spec)."""
    state = cluster_state(workload.api_client)
    out: dict[str, Any] = {k: v for k, v in state.items() if k.startswith("Node/")}
    prefix = f"Job/{workload.namespace}/"
    for key, job in state.items():
        if not key.startswith(prefix):
            continue
        meta = job["metadata"]
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if k != RECREATED_BY_ANNOTATION
        }
        template = job["spec"]["template"]
        labels = {
            k: v
            for k, v in (template.get("metadata", {}).get("labels") or {}).items()
            if k not in ("controller-uid", "job-name")
        }
        out[key] = {
            "labels": {
                k: v for k, v in (meta.get("labels") or {}).items() if k != "controller-uid"
            },
            "annotations": annotations,
            "parallelism": job["spec"].get("parallelism"),
            "template_labels": labels,
            "template_spec": template.get("spec"),
        }
    return out


def run_case(
    plane: LocalControlPlane,
    workload: PathwaysWorkload,
    proxy: ErrorProxy,
    folder: Path,
    fault_name: str,
    phase: str,
    mode: str,
) -> Case:
    make, expected, _ = FAULTS[fault_name]
    before = stable_state(workload)
    api = client_through(proxy, plane.token)
    journal = RollbackJournal(folder / f"{fault_name}-{phase}-{mode}.jsonl")
    echoed: list[str] = []
    target = KubeTarget(
        api_client=api,
        namespace=workload.namespace,
        jobset=workload.jobset,
        armed=True,
        allowed_namespaces=frozenset({workload.namespace}),
        journal=journal,
        echo=echoed.append,
    )
    target.check()  # binds the journal (a read) before any error is armed
    fault = make()
    try:
        if phase == "fault":
            proxy.arm(mode)
        reported = fault.inject(target)
    finally:
        proxy.disarm()
    try:
        if phase == "undo":
            proxy.arm(mode)
        result = journal.replay(api)
    finally:
        proxy.disarm()
    workload.wait_running(timeout=60)
    after = stable_state(workload)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return Case(fault_name, phase, mode, reported, expected, result.errors, changed)


def run_matrix(
    plane: LocalControlPlane,
    workload: PathwaysWorkload,
    proxy: ErrorProxy,
    folder: Path,
    faults: list[str] | None = None,
    modes: tuple[str, ...] = MODES,
) -> list[Case]:
    cases = []
    for name in faults or list(FAULTS):
        phases = ("fault", "undo") if FAULTS[name][2] else ("fault",)
        for phase in phases:
            for mode in modes:
                cases.append(run_case(plane, workload, proxy, folder, name, phase, mode))
    return cases
