"""Multi-Tier Checkpointing under faults: the real Orbax MTC client against the emulated
replication service, with ramdisks, peer copies and a backup on the fake cluster."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathways_chaos import MtcRunner, Outcome

pytestmark = pytest.mark.chaos


def _restore(out: Outcome) -> tuple[dict[str, Any], dict[str, Any]]:
    (plan,) = [p for p in out.of_kind("mtc_restore_plan") if p["step"] is not None]
    (restore,) = out.of_kind("restore_end")
    return plan, restore


def test_node_loss_restores_from_the_peer_copy(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("node_loss@step=12:host=1")

    out.raise_if_failed()
    plan, restore = _restore(out)
    assert restore["step"] == 10 and plan["tier"] == "peer"
    assert plan["sources"] == {"0": "ramdisk", "1": "peer", "2": "ramdisk", "3": "ramdisk"}
    assert out.verdict.wasted_steps == 2  # steps 11 and 12 run again


def test_node_and_peer_copy_lost_restores_from_the_backup(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("peer_loss@step=11:host=1,node_loss@step=12:host=1")

    out.raise_if_failed()
    plan, restore = _restore(out)
    assert plan["tier"] == "backup" and restore["step"] == 10  # backups at steps 1 and 10
    assert plan["sources"] == {"0": "ramdisk", "1": "backup", "2": "ramdisk", "3": "ramdisk"}
    assert out.verdict.wasted_steps == 2


def test_backup_only_after_every_ramdisk_is_lost(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("backup_only@step=17")

    out.raise_if_failed()
    plan, restore = _restore(out)
    assert plan["sources"] == dict.fromkeys("0123", "backup")
    assert restore["step"] == 10  # backups at steps 1 and 10; 15 was only on the ramdisks
    assert out.verdict.wasted_steps == 7


def test_without_a_fault_nothing_is_restored_and_the_backup_follows_the_interval(
    chaos_mtc: MtcRunner,
) -> None:
    out = chaos_mtc.run("")

    out.raise_if_failed()
    assert not out.of_kind("restore_end")
    assert [b["step"] for b in out.of_kind("mtc_backup")] == [1, 10]  # Orbax saves 1, 5, 10, 15


def test_pinned_restore_version_wins_over_newer_ramdisks(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("stale_backup@step=17:version=1")

    out.raise_if_failed()
    plan, restore = _restore(out)
    assert plan["pinned"] and plan["tier"] == "backup" and restore["step"] == 1


def test_a_fatal_replicator_error_is_surfaced_by_the_client(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("replicator_error@step=7")

    out.raise_if_failed()  # the next restart succeeds
    errors = [e for e in out.of_kind("error") if e["type"] == "RuntimeError"]
    assert errors and errors[0]["message"].startswith(
        "Replicator fatal errors: injected replicator failure"
    )


def test_a_replicator_that_keeps_failing_fails_the_job(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("replicator_error@step=7:times=10", max_restarts=2)

    assert out.error is not None and "Replicator fatal errors" in str(out.error)
    assert out.of_kind("run_end")[-1]["status"] == "failed"


def test_recoverable_replicator_errors_are_logged_and_training_continues(
    chaos_mtc: MtcRunner, caplog: pytest.LogCaptureFixture
) -> None:
    # orbax logs it through absl's logger, which an in-process CLI run earlier in the same
    # (xdist) process may have silenced: set that logger's level, not only the root's.
    with caplog.at_level(logging.ERROR), caplog.at_level(logging.ERROR, logger="absl"):
        out = chaos_mtc.run("replicator_error@step=12:fatal=false")

    out.raise_if_failed()
    assert "Replicator errors: injected replicator failure" in caplog.text
    _, restore = _restore(out)
    assert restore["step"] == 10


def test_a_half_written_save_is_never_restored(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("torn_save@step=12:host=2:saving=13")

    out.raise_if_failed()
    _, restore = _restore(out)
    assert restore["step"] == 10


def test_a_lost_peer_copy_is_replicated_again_at_the_next_save(chaos_mtc: MtcRunner) -> None:
    out = chaos_mtc.run("peer_loss@step=11:host=1,node_loss@step=17:host=1")

    out.raise_if_failed()
    plan, restore = _restore(out)
    assert plan["sources"]["1"] == "peer" and restore["step"] == 15
