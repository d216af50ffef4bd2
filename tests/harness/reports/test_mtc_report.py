"""The report says which tier each MTC restore came from and what it cost."""

from __future__ import annotations

from pathways_chaos.harness.judging.oracle import check
from pathways_chaos.harness.mtc.judging import tier_restores
from pathways_chaos.harness.reports.goodput import tier_restore_report
from pathways_chaos.harness.reports.report import summary


def test_the_report_names_the_tier_and_the_cost_of_each_restore(chaos_mtc):
    out = chaos_mtc.run("node_loss@step=12:host=1,backup_only@step=17")

    (peer, backup) = tier_restores(out.events)
    assert (peer.tier, peer.restored_step, peer.steps_lost) == ("peer", 10, 2)
    assert (backup.tier, backup.restored_step, backup.steps_lost) == ("backup", 10, 7)
    assert peer.restore_s is not None and peer.recovery_s is not None and peer.recovery_s > 0
    text = summary(out.events, check(out.events))
    assert "attempt 2 after node_loss@step=12:host=1: step 10 from peer; 2 steps lost" in text
    assert "attempt 3 after backup_only@step=17: step 10 from backup; 7 steps lost" in text


def test_an_episode_without_mtc_has_no_tier_lines():
    assert tier_restore_report([{"kind": "step", "seq": 0}]) == []
