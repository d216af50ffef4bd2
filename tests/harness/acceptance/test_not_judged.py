"""After a root failure, the rows that read the same run are NOT JUDGED and name that row,
instead of printing fixes for something else."""

from __future__ import annotations

import dataclasses
from typing import Any

from pathways_chaos.harness.acceptance.adapter import reference_adapter
from pathways_chaos.harness.acceptance.runtime import RuntimeRuns
from pathways_chaos.harness.acceptance.runtime_checks import RUNTIME_CHECKS


def full_allocation_mesh(manager: Any) -> Any:
    """A mesh builder that only knows the full allocation: after a lost slice the reshape
    raises ValueError, which is no slice-down error, so elastic_retry never retries."""
    import jax
    import numpy as np

    devices = np.asarray(manager.active_devices, dtype=object)
    return jax.sharding.Mesh(devices.reshape(manager.total_slice_count, -1), ("replica", "data"))


def test_no_retry_is_the_interruption_rows_finding(tmp_path):
    adapter = dataclasses.replace(reference_adapter("resize"), build_mesh=full_allocation_mesh)
    runs = RuntimeRuns(adapter, workdir=tmp_path)
    rows = {
        c: RUNTIME_CHECKS[c](runs)
        for c in ("interruption", "snapshot-restore", "recovery-time", "live-arrays")
    }
    assert rows["interruption"].status == "FAIL"
    assert "did not complete: ValueError" in rows["interruption"].reason
    for check in ("snapshot-restore", "recovery-time", "live-arrays"):
        assert rows[check].status == "NOT JUDGED", rows[check].reason
        assert rows[check].reason.startswith("depends on interruption, which failed")
        assert "iterator" not in rows[check].reason  # no fix for a habit nobody showed
    assert "1 attempt(s) got ready, no retry" in rows["live-arrays"].reason


def test_a_judged_row_stays_judged(tmp_path):
    """The known-good side: the reference adapter retries, and every row is judged."""
    runs = RuntimeRuns(reference_adapter("resize"), workdir=tmp_path)
    for check in ("interruption", "snapshot-restore", "recovery-time", "live-arrays"):
        assert RUNTIME_CHECKS[check](runs).status == "PASS"
