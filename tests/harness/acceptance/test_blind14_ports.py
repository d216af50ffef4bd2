"""A blind tester's ports (``data/blind14``), each held to the rows it must fail: the correct
ones fail none (c03 excepted, below), the broken ones the row of their one mistake. Before the
fixes, c02 failed process-index (an ``is_chief()`` helper), and b01, b07 and b08 passed every
row."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance.manifest_checks import run_manifest_checks
from pathways_chaos.harness.acceptance.static_checks import run_static_checks

PORTS = Path(__file__).parent / "data" / "blind14"

# port -> (source folder or None, manifest path or None, params, the rows that must fail)
CASES = {
    "c02_mentions_only": ("pkg", "k8s/jobset.yaml", 8e9, set()),
    "c06_native_sidecars_list_rank_alias": ("src", "deploy", 47e9, set()),
    # Elastic with the workers' backoffLimit: 0 and maxRestarts: 3 (c02, b01 too): a lost worker
    # restarts the whole JobSet; it recovers, not elastically, and the row's reason says so.
    "c03_mtc_anchors_digest": ("src", "deploy", 8e9, set()),
    # A legacy path behind a run-time flag: found, with the branch and the ignore mark named.
    "c04_legacy_flag_dead_branch": ("src", None, None, {"process-index", "distributed-initialize"}),
    "b01_distributed_init": ("src", "deploy", 8e9, {"distributed-initialize"}),
    "b07_failurepolicy_no_restart": (None, "deploy", None, {"worker-restarts"}),
    "b08_mesh_from_devices_in_helper": ("src", None, None, {"mesh-from-jax-devices"}),
}


@pytest.mark.parametrize("port", sorted(CASES))
def test_each_port_fails_exactly_the_rows_of_its_mistakes(port):
    source, manifest, params, must_fail = CASES[port]
    rows = []
    if source:
        rows += run_static_checks([PORTS / port / source])
    if manifest:
        rows += run_manifest_checks(PORTS / port / manifest, params)
    failed = {r.check for r in rows if r.status == "FAIL"}
    assert failed == must_fail, [r.failure_message() for r in rows if r.status == "FAIL"]


def test_the_legacy_branch_findings_say_how_to_mark_them():
    rows = run_static_checks([PORTS / "c04_legacy_flag_dead_branch" / "src"])
    for row in (r for r in rows if r.status == "FAIL"):
        for finding in row.findings:
            assert "in the branch taken when" in finding.message, finding
            assert "# pathways-chaos: ignore" in finding.message, finding
