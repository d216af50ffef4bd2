"""Faults that go past the guide's happy path: every slice-down code, losses during a save,
all replicas but one, every replica, a flapping slice, a slow health check."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathways_chaos import Chaos

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("kind", ["data_loss", "deadline_exceeded", "not_found", "internal"])
def test_every_slice_down_error_is_recovered(chaos: Chaos, kind: str) -> None:
    out = chaos.run(f"{kind}@step=7:slice=1", scale_up="off", final_step=15)

    out.verdict.raise_if_failed()
    (error,) = out.of_kind("error")
    assert error["message"].startswith(kind.upper()) and error["slice_down"]
    assert out.meshes() == [[4, 2], [3, 2]]


def test_slice_lost_during_a_snapshot_save(chaos: Chaos) -> None:
    # The third save (step 10) is in flight when slice 2 dies: it must not become `latest`.
    out = chaos.run("data_loss@save=3:slice=2", scale_up="off")

    out.verdict.raise_if_failed()
    (restore,) = out.of_kind("restore_end")
    assert restore["step"] in (5, 10)  # the save in flight either completed or was dropped
    assert out.of_kind("attempt_ready")[1]["start_step"] == restore["step"] + 1


def test_all_replicas_but_one_lost(chaos: Chaos) -> None:
    schedule = ",".join(f"data_loss@step=12:slice={s}" for s in (1, 2, 3))
    out = chaos.run(schedule, scale_up="off")

    out.verdict.raise_if_failed()
    assert out.meshes() == [[4, 2], [1, 2]]
    assert [r["step"] for r in out.of_kind("restore_end")] == [10]  # from the one survivor


def test_every_replica_lost_fails_loudly(chaos: Chaos) -> None:
    # Every slice dies at once (all come back after a poll): no replica of the snapshot
    # survives, and the restore must refuse rather than start from a wrong state.
    schedule = ",".join(f"data_loss@step=12:slice={s}:repair_after_polls=1" for s in range(4))
    out = chaos.run(schedule, scale_up="off", expect_completed=False)

    assert isinstance(out.result.error, RuntimeError)
    assert "No active replicas found" in str(out.result.error)
    assert out.verdict.violations == []  # nothing committed after the loss
    assert out.of_kind("run_end")[-1]["status"] == "failed"


def test_flapping_slice(chaos: Chaos) -> None:
    out = chaos.run("flapping@step=3:slice=1:times=3:up_accesses=4", final_step=40)

    out.verdict.raise_if_failed()
    lost_again = [e for e in out.of_kind("error") if "flapping" in e["message"]]
    assert len(lost_again) == 2  # lost three times in all
    assert len(out.of_kind("attempt_start")) == 4


def test_slow_health_check_keeps_a_slice_out(chaos: Chaos) -> None:
    # Slice 1 is lost; while the trainer waits, slice 2's health check hangs 30 s and times out,
    # so the next attempt runs on the two slices that answered.
    out = chaos.run(
        "slow_health@step=5:slice=2:seconds=30:polls=1,data_loss@step=5:slice=1", scale_up="off"
    )

    out.verdict.raise_if_failed()
    assert out.of_kind("mesh")[1]["slices"] == [0, 3]
    ready = out.of_kind("attempt_ready")[1]
    fault = out.of_kind("fault")[0]
    assert ready["t"] - fault["t"] == pytest.approx(30.0)  # the hung check, on the fake clock
