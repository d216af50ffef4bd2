"""Every Kubernetes fault and its undo through an error-injecting proxy: a change the API made
and then answered 500 for is still reported and journalled as ours; a 409, 429 or 5xx before
the change is retried; a re-created Job is verified. Nothing is left changed after rollback."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.fixtures.control_plane import LocalControlPlane
from pathways_chaos.fixtures.kubernetes.pathways_jobset import pathways_workload_in
from tests.faults.kubernetes.error_proxy import MODES, error_proxy
from tests.faults.kubernetes.proxy_matrix import FAULTS, run_matrix

pytestmark = [pytest.mark.kube, pytest.mark.slow]


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_and_undo_under_lost_answers_409_429_and_5xx_leave_nothing_changed(
    kube_control_plane: LocalControlPlane, tmp_path: Path, fault: str
) -> None:
    with (
        pathways_workload_in(kube_control_plane) as workload,
        error_proxy(kube_control_plane.server, str(kube_control_plane.ca_file)) as proxy,
    ):
        cases = run_matrix(kube_control_plane, workload, proxy, tmp_path, faults=[fault])
    assert {c.mode for c in cases} == set(MODES)
    assert len(proxy.injected) == len(cases)  # every case really met its error
    failed = [c.describe() for c in cases if not c.ok]
    assert not failed, "\n".join(failed)
