"""The first chaos suite: the recoveries the Pathways resilient-training guide promises.

Each test runs one episode under a fault schedule and asserts the oracle, then the specific
shape of the recovery (meshes, attempts, where it resumed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathways_chaos import Chaos

pytestmark = pytest.mark.chaos


def test_pause_and_resume_after_data_loss(chaos: Chaos) -> None:
    # Slice 2 fails at step 12 and is healthy again after 3 health polls (30 s of fake time).
    out = chaos.run("data_loss@step=12:slice=2:repair_after_polls=3", mode="pause_resume")

    out.verdict.raise_if_failed()
    assert out.meshes() == [[4, 2], [4, 2]]
    assert [e["recompile"] for e in out.of_kind("mesh")] == [True, False]  # executables reused
    restore = out.of_kind("restore_end")
    assert [r["step"] for r in restore] == [10]
    assert out.of_kind("attempt_ready")[1]["start_step"] == 11
    (recovery,) = out.verdict.recoveries
    assert recovery["recovery_s"] == pytest.approx(30.0)  # waited for the slice, polled 3 times


def test_replica_resize_four_to_three_slices(chaos: Chaos) -> None:
    out = chaos.run("data_loss@step=12:slice=2", mode="resize", scale_up="off")

    out.verdict.raise_if_failed()
    assert out.meshes() == [[4, 2], [3, 2]]
    assert out.of_kind("mesh")[1]["slices"] == [0, 1, 3]
    sizes = {e["attempt"]: len(e["ids"]) for e in out.of_kind("step")}
    assert sizes == {1: 16, 2: 12}  # the global batch scales with the active slices
    assert out.verdict.wasted_steps == 2  # steps 11 and 12 ran twice


@pytest.mark.parametrize("scale_up", ["in_loop", "signal"])
def test_scale_up_three_to_four_slices(chaos: Chaos, scale_up: str) -> None:
    # Slice 3 is down when training starts and is repaired at step 4; the monitor thread sees
    # it at its next poll (10 s of fake time, one step per second).
    out = chaos.run("repair@step=4:slice=3", initially_down=(3,), scale_up=scale_up)

    out.verdict.raise_if_failed()
    assert out.meshes()[0] == [3, 2] and out.meshes()[-1] == [4, 2]
    (scale,) = out.of_kind("scale_up")
    assert scale["how"] == scale_up and scale["joining"] == [3]
    assert out.verdict.wasted_steps == 0  # the signal path snapshots the step it leaves
    attempts = {e["attempt"] for e in out.of_kind("attempt_start")}
    assert attempts == ({1} if scale_up == "in_loop" else {1, 2})


def test_two_faults_before_the_first_snapshot(chaos: Chaos) -> None:
    # The first snapshot is taken after step 0; both faults land before it exists.
    out = chaos.run("data_loss@step=0:slice=1,data_loss@attempt=2:slice=2", scale_up="off")

    out.verdict.raise_if_failed()
    assert out.of_kind("restore_end") == []  # nothing to restore: started over twice
    assert [e["start_step"] for e in out.of_kind("attempt_ready")] == [0, 0, 0]
    assert out.meshes() == [[4, 2], [3, 2], [2, 2]]


def test_slice_lost_during_restore(chaos: Chaos) -> None:
    out = chaos.run("data_loss@step=12:slice=2,data_loss@restore=1:slice=1", scale_up="off")

    out.verdict.raise_if_failed()
    assert out.meshes() == [[4, 2], [3, 2], [2, 2]]
    begins = out.of_kind("restore_begin")
    assert [(b["attempt"], b["step"]) for b in begins] == [(2, 10), (3, 10)]
    assert [(e["attempt"], e["step"]) for e in out.of_kind("restore_end")] == [(3, 10)]


def test_non_slice_down_error_propagates(chaos: Chaos) -> None:
    out = chaos.run("raise_error@step=7:code=INVALID_ARGUMENT", expect_completed=False)

    import jax

    assert isinstance(out.result.error, jax.errors.JaxRuntimeError)
    assert "INVALID_ARGUMENT" in str(out.result.error)
    assert out.verdict.violations == []  # the committed prefix is still exactly-once
    assert len(out.of_kind("attempt_start")) == 1  # never retried
    assert [e["slice_down"] for e in out.of_kind("error")] == [False]


def test_retry_limit_is_hit(chaos: Chaos) -> None:
    from pathwaysutils.elastic.manager import ElasticRuntimeError

    # INTERNAL is what a Python exception in a host callback surfaces as: it counts as slice
    # down, so only the retry policy stops an endless loop.
    schedule = ",".join(
        ["raise_error@step=3:code=INTERNAL"]
        + [f"raise_error@attempt={n}:code=INTERNAL" for n in (2, 3)]
    )
    out = chaos.run(schedule, max_attempts=3, expect_completed=False)

    assert isinstance(out.result.error, ElasticRuntimeError)
    assert "INTERNAL" in repr(out.result.error.__cause__)
    assert len(out.of_kind("attempt_start")) == 3
    assert out.verdict.violations == []


def test_suspend_on_preemption_and_resume(chaos: Chaos) -> None:
    out = chaos.run("preemption@step=12")

    out.verdict.raise_if_failed()
    runs = out.of_kind("run_end")
    assert [(r["run"], r["status"]) for r in runs] == [(1, "suspended"), (2, "completed")]
    (saved,) = out.of_kind("checkpoint_save")
    assert saved["step"] == 12
    (restored,) = out.of_kind("restore_end")
    assert (restored["run"], restored["source"], restored["step"]) == (2, "checkpoint", 12)
    assert out.of_kind("attempt_ready")[-1]["start_step"] == 13


def test_fixed_global_batch_survives_a_resize(chaos: Chaos) -> None:
    # 24 samples a step whatever the slice count: sharded over 8, then 6 devices.
    out = chaos.run("data_loss@step=12:slice=0", batch="fixed", global_batch=24, scale_up="off")

    out.verdict.raise_if_failed()
    assert {len(e["ids"]) for e in out.of_kind("step")} == {24}
    assert out.of_kind("mesh")[1]["slices"] == [1, 2, 3]
