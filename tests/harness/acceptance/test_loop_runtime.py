"""The acceptance runtime rows on the team's own loop (``--chaos-loop``): the sample loop
passes them with its own recovery code; a loop that crashes on a lost slice fails the
interruption row with the exception and the line, and the rows that need a recovery say
"not judged"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance.loop_runtime import LOOP_RUNTIME_CHECKS, LoopRuns
from pathways_chaos.harness.acceptance.runtime_checks import RUNTIME_CHECKS
from pathways_chaos.harness.acceptance.table import NOT_JUDGED, PASS
from pathways_chaos.harness.episodes.loop_episode import load_loop

ROOT = Path(__file__).parents[3]
CRASHING = Path(__file__).parent / "loops" / "no_retry_loop.py"


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory):
    runs = LoopRuns(
        load_loop("pathways_chaos.harness.reference.user_loop:main"),
        workdir=tmp_path_factory.mktemp("sample-loop"),
    )
    yield runs
    runs.close()


@pytest.fixture(scope="module")
def crashing_runs(tmp_path_factory):
    runs = LoopRuns(load_loop(f"{CRASHING}:main"), workdir=tmp_path_factory.mktemp("crashing"))
    yield runs
    runs.close()


@pytest.mark.parametrize(
    "check", ["data-order", "snapshot-restore", "interruption", "recovery-time", "live-arrays"]
)
def test_the_sample_loop_passes_with_its_own_recovery_code(sample_runs, check):
    result = RUNTIME_CHECKS[check](sample_runs)  # dispatched to the loop, not an adapter
    assert result.status == PASS, result.failure_message()


def test_the_interruption_is_judged_on_the_loops_own_attempts(sample_runs):
    RUNTIME_CHECKS["interruption"](sample_runs)
    events = sample_runs.interrupted.events
    assert [e["attempt"] for e in events if e["kind"] == "attempt_start"] == [1, 2]
    assert any(e["kind"] == "restore_end" for e in events)  # its own Snapshotter.load


def test_a_crashing_loop_fails_the_interruption_row_with_the_line(crashing_runs):
    row = LOOP_RUNTIME_CHECKS["interruption"](crashing_runs)

    assert not row.ok
    message = row.failure_message()
    assert "the loop crashed: ElasticRuntimeError" in message
    assert "DATA_LOSS" in message and "user_loop.py:" in message and "place_batch" in message
    for dependent in ("recovery-time", "snapshot-restore"):
        later = LOOP_RUNTIME_CHECKS[dependent](crashing_runs)
        assert later.status == NOT_JUDGED and later.depends_on == "interruption"
        assert later.reason.startswith("depends on interruption, which failed")


def test_pytest_suites_acceptance_runs_the_loop_itself():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "suites" / "acceptance" / "test_runtime_checks.py"),
            "-p",
            "no:randomly",
            "-q",
            f"--chaos-loop={CRASHING}:main",
            "-k",
            "interruption or recovery",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 1, out.stdout[-2000:]
    table = out.stdout[out.stdout.index("pathways-chaos acceptance checks") :]
    assert f"loop {CRASHING}:main" in table
    row = next(line for line in table.splitlines() if line.startswith("interruption"))
    assert "FAIL" in row and "the loop crashed" in row
    later = next(line for line in table.splitlines() if line.startswith("recovery-time"))
    assert "NOT JUDGED" in later


@pytest.mark.parametrize(
    ("loop", "cause_fix"),
    [
        ("user_loop_bugs:iterator_from_current_position", "set_state() it after the restore"),
        ("user_loop_bugs:step_not_restored", "resume at the restored snapshot's step + 1"),
    ],
)
def test_the_interruption_rows_fix_is_chosen_by_the_cause_found(tmp_path, loop, cause_fix):
    from pathways_chaos.harness.acceptance.loop_runtime import GENERIC_FIX

    runs = LoopRuns(load_loop(f"pathways_chaos.harness.reference.{loop}"), workdir=tmp_path)
    try:
        row = LOOP_RUNTIME_CHECKS["interruption"](runs)
    finally:
        runs.close()

    assert not row.ok
    assert cause_fix in row.fix and row.fix != GENERIC_FIX


def test_a_leak_fails_the_live_arrays_row(tmp_path):
    from pathways_chaos.harness.acceptance.table import FAIL

    leaky = (
        ROOT
        / "tests"
        / "harness"
        / "judging"
        / "loop_catalogue"
        / "broken"
        / "attempt_history_kept.py"
    )
    runs = LoopRuns(load_loop(f"{leaky}:main"), workdir=tmp_path)
    try:
        row = LOOP_RUNTIME_CHECKS["live-arrays"](runs)
    finally:
        runs.close()

    assert row.status == FAIL, row.reason
    assert "made by failed attempts" in row.failure_message()


def test_a_loop_that_crashes_before_training_is_told_to_run_fault_free_first(tmp_path):
    """A blind tester's port crashed in jax.distributed.initialize(); the data-order row's fix
    spoke of data shards, which were never the cause."""
    loop = Path(__file__).parent / "loops" / "multi_controller_start.py"
    runs = LoopRuns(load_loop(f"{loop}:main"), workdir=tmp_path)
    try:
        row = LOOP_RUNTIME_CHECKS["data-order"](runs)
    finally:
        runs.close()
    assert not row.ok
    assert "jax.distributed.initialize()" in row.failure_message()
    assert row.fix.startswith("make the loop run fault-free first")
