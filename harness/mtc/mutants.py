"""Deliberately broken replication services (and one trainer), each caught by one MTC property.

``MUTANTS`` maps a name to (what to build, the schedule that exposes it, the property that
must catch it). ``tests/harness/mtc/test_mtc_mutants.py`` runs each and proves its property fails.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pathways_chaos.harness.mtc.service import ReplicationService, RestorePlan, Source
from pathways_chaos.harness.mtc.tiers import Tiers
from pathways_chaos.harness.mtc.trainer import MtcTrainer


class PrefersBackup(ReplicationService):
    """Restores from the backup whenever it holds a step, even when a peer has a newer copy."""

    def plan_restore(self, hosts: list[int]) -> RestorePlan:
        inventory = self.tiers.inventory()
        common = set.intersection(*(set(inventory.backup[h]) for h in hosts)) if hosts else set()
        if common and self.tiers.pinned_version() is None:
            step = max(common)
            sources = {h: Source("backup", self.tiers.backup_dir(step, h)) for h in hosts}
            return RestorePlan(step, sources, False, inventory)
        return super().plan_restore(hosts)


class AcceptsTornSteps(ReplicationService):
    """Counts a local step folder as complete without its metadata: Orbax's temporary folder of
    a save cut off by a crash becomes the step to restore."""

    def plan_restore(self, hosts: list[int]) -> RestorePlan:
        inventory = self.tiers.inventory()
        torn: dict[int, dict[int, Path]] = {}
        for h in hosts:
            for p in self.tiers.ramdisk(h).glob("*.orbax-checkpoint-tmp-*"):
                torn.setdefault(int(p.name.split(".")[0]), {})[h] = p
        for step, paths in sorted(torn.items(), reverse=True):
            if set(paths) == set(hosts) and step > max(
                (
                    s
                    for tier in (inventory.ramdisk, inventory.peer, inventory.backup)
                    for v in tier.values()
                    for s in v
                ),
                default=-1,
            ):
                sources = {h: Source("ramdisk", paths[h]) for h in hosts}
                return RestorePlan(step, sources, False, inventory)
        return super().plan_restore(hosts)

    def stage(self, host: int, plan: RestorePlan) -> None:
        source = plan.sources.get(host)
        if source is not None and ".orbax-checkpoint-tmp" in source.path.name:
            kept = source.path.parent / f".torn-{plan.step}"
            source.path.replace(kept)  # out of the way of the stale-folder sweep
            plan = dataclasses.replace(
                plan, sources={**plan.sources, host: Source("ramdisk", kept)}
            )
        super().stage(host, plan)


class IgnoresRestoreVersion(ReplicationService):
    """Never reads ``restore.version``: the newest in-cluster copy wins over the pin."""

    def plan_restore(self, hosts: list[int]) -> RestorePlan:
        pin = self.tiers.restore_version
        saved = pin.read_text() if pin.exists() else None
        if saved is not None:
            pin.unlink()
        try:
            plan = super().plan_restore(hosts)
        finally:
            if saved is not None:
                pin.write_text(saved)
        return dataclasses.replace(plan, inventory=self.tiers.inventory())


class StagesPeersOwnStep(ReplicationService):
    """Restoring a host from a peer, copies the peer's own checkpoint of the step before."""

    def stage(self, host: int, plan: RestorePlan) -> None:
        source = plan.sources.get(host)
        if source is not None and source.tier == "peer" and source.holder is not None:
            older = [s for s in self.tiers.local_steps(source.holder) if s < (plan.step or 0)]
            if older:
                wrong = self.tiers.ramdisk(source.holder) / str(older[-1])
                plan = dataclasses.replace(
                    plan, sources={**plan.sources, host: Source("peer", wrong, source.holder)}
                )
        super().stage(host, plan)


class SkipsOwnRamdisk(ReplicationService):
    """Fetches a host's step from its peer copy even when the host's own ramdisk holds it."""

    def fastest_source(self, host: int, step: int) -> Source | None:
        for holder, steps in sorted(self.tiers.peer_copies(host).items()):
            if step in steps:
                return Source("peer", self.tiers.peer_store(holder, host) / str(step), holder)
        return super().fastest_source(host, step)


class DataPositionOutsideCheckpoint(MtcTrainer):
    """Keeps the data position in process memory (as if written apart from the checkpoint every
    step) and resumes from it, not from the position saved with the restored model."""

    _last_position: int | None = None

    def _restore_or_init(
        self, workers: Any, mesh: Any, sharding: Any, iterator: Any, ids: Any
    ) -> Any:
        state, step = super()._restore_or_init(workers, mesh, sharding, iterator, ids)
        if self._last_position is not None and step > 0:
            iterator.set_state({"global_next_index": self._last_position})
        return state, step

    def step_function(self) -> Any:
        return super().step_function()

    def batch_ids(self, batch: Any) -> list[int]:
        self._last_position = int(max(batch["id"])) + 1  # the position after this batch
        return super().batch_ids(batch)


@dataclasses.dataclass(frozen=True)
class MtcMutant:
    service: type[ReplicationService]
    schedule: str
    caught_by: str
    trainer: type[MtcTrainer] = MtcTrainer


MUTANTS: dict[str, MtcMutant] = {
    "prefers_backup": MtcMutant(PrefersBackup, "node_loss@step=17:host=1", "newest_restored"),
    "prefers_backup_loses_work": MtcMutant(PrefersBackup, "node_loss@step=17:host=1", "lost_work"),
    "accepts_torn_steps": MtcMutant(
        AcceptsTornSteps,
        ",".join(f"torn_save@step=12:host={h}:saving=13:restart=false" for h in range(3))
        + ",torn_save@step=12:host=3:saving=13",
        "never_partial",
    ),
    "ignores_restore_version": MtcMutant(
        IgnoresRestoreVersion, "stale_backup@step=17:version=1", "pinned_wins"
    ),
    "skips_own_ramdisk": MtcMutant(SkipsOwnRamdisk, "node_loss@step=12:host=1", "fastest_tier"),
    "stages_peers_own_step": MtcMutant(StagesPeersOwnStep, "node_loss@step=12:host=1", "bitwise"),
    "data_position_outside_checkpoint": MtcMutant(
        ReplicationService,
        "node_loss@step=12:host=1",
        "data_position",
        trainer=DataPositionOutsideCheckpoint,
    ),
}

__all__ = ["MUTANTS", "MtcMutant", "Tiers"]
