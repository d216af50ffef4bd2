"""Multi-Tier Checkpointing restores, under any schedule of MTC faults hypothesis writes.

Each example is one MTC job on a fresh fake cluster (ramdisks, peer copies, a backup and the
emulated replication service) driven by the real Orbax MTC client. Every restore must be the
newest step some tier holds completely, from the fastest tier, bitwise, never a partial step;
a pinned ``restore.version`` wins; the steps run again equal the gap to the step restored; the
data position comes back with the model. ``harness/mtc/mutants.py`` has a broken service each
property catches (``tests/harness/mtc/test_mtc_mutants.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import event, given, settings

from pathways_chaos.faults.mtc_strategies import mtc_schedules
from pathways_chaos.harness.mtc import judging

if TYPE_CHECKING:
    from pathways_chaos.faults.model import Schedule

#: An example is a whole job with Orbax saves (about 10 s here): a sixth of the profile's count.
EXAMPLES = max(3, settings().max_examples // 6)


@settings(max_examples=EXAMPLES)
@given(schedule=mtc_schedules(num_hosts=4, max_step=18, max_faults=2))
def test_every_restore_is_the_newest_complete_step_from_the_fastest_tier(
    schedule: Schedule,
) -> None:
    from pathways_chaos import MtcRunner
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    with FakeCluster(SliceTopology(4, 2)) as fake:
        out = MtcRunner(fake).run(schedule.to_text())

    for restore in judging.tier_restores(out.events):
        event(f"restored from {restore.tier or 'nothing'}")  # --hypothesis-show-statistics
    out.verdict.raise_if_failed()
    assert not out.problems, "\n".join(out.problems)
