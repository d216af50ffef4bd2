"""Multi-Tier Checkpointing faults: ramdisks, peer copies and the backup, on the fake's tiers.

Each acts on an ``MtcTarget``: what it needs of ``harness.mtc.cluster.MtcCluster``, declared
here so the faults do not reach up to the room that builds the fake. A fault that restarts the
job's Pods raises ``PodRestarted`` into the trainer, which restarts and restores through the real
Orbax client. None imports JAX at module load.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pathways_chaos.faults.model import Fault, FaultSpecError


class MtcService(Protocol):
    """The replication service, as the faults drive it."""

    def held(self) -> AbstractContextManager[Any]: ...
    def fail_next(self, message: str, fatal: bool = ..., times: int = ..., /) -> None: ...


class MtcTiers(Protocol):
    """The ramdisks, peer copies and backup, as the faults damage them."""

    def wipe_host(self, host: int, /) -> list[str]: ...
    def drop_peer_copies(self, owner: int, /) -> list[str]: ...
    def pin(self, step: int, /) -> list[str]: ...
    def write_torn_step(self, host: int, step: int, /) -> list[str]: ...


class MtcTarget(Protocol):
    """What an MTC fault acts on (``MtcCluster`` is the one implementation)."""

    @property
    def num_hosts(self) -> int: ...
    @property
    def service(self) -> MtcService: ...
    @property
    def tiers(self) -> MtcTiers: ...
    def check_host(self, host: int, /) -> None: ...
    def node_lost(self, host: int, /) -> list[str]: ...
    def restart(self, why: str, /) -> None: ...


@dataclasses.dataclass(frozen=True)
class NodeLoss(Fault[MtcTarget]):
    """A node is replaced: its ramdisk and the peer copies it held are gone; every Pod restarts.

    The host's volume is wiped; on ``--cluster`` the slice's Nodes are also cordoned and its
    worker Pods killed through the API (``MtcCluster.node_lost``), then uncordoned. On a GKE
    run against the managed service use ``kubernetes_equivalent`` (a drain of the Nodes).
    """

    kind = "node_loss"
    needs_mtc = True
    host: int = 0

    def inject(self, target: MtcTarget) -> list[str]:
        target.check_host(self.host)
        with target.service.held():
            touched = target.tiers.wipe_host(self.host)
        touched += target.node_lost(self.host)
        target.restart(f"node of host {self.host} lost with its ramdisk")
        return touched  # pragma: no cover - restart raises

    def describe(self) -> str:
        return f"host {self.host}'s node lost with its ramdisk; the job restarts"

    def kubernetes_equivalent(self) -> str:
        return f"drain_nodes@step=N:slice={self.host}"


@dataclasses.dataclass(frozen=True)
class PeerLoss(Fault[MtcTarget]):
    """Every peer copy of ``host``'s checkpoints is gone (the job keeps running)."""

    kind = "peer_loss"
    needs_mtc = True
    host: int = 0

    def inject(self, target: MtcTarget) -> list[str]:
        target.check_host(self.host)
        with target.service.held():
            touched = target.tiers.drop_peer_copies(self.host)
        return touched or [f"no peer copy of host {self.host}"]

    def describe(self) -> str:
        return f"peer copies of host {self.host}'s checkpoints lost"


@dataclasses.dataclass(frozen=True)
class BackupOnly(Fault[MtcTarget]):
    """Every node is replaced: only the backup is left (a full job restart on new nodes)."""

    kind = "backup_only"
    needs_mtc = True

    def inject(self, target: MtcTarget) -> list[str]:
        with target.service.held():
            touched = [line for h in range(target.num_hosts) for line in target.tiers.wipe_host(h)]
        target.restart("every node lost with its ramdisk; only the backup is left")
        return touched  # pragma: no cover - restart raises

    def describe(self) -> str:
        return "every ramdisk lost: only the backup is left"


@dataclasses.dataclass(frozen=True)
class ReplicatorError(Fault[MtcTarget]):
    """The service fails its next ``times`` restore rounds; with ``restart`` the job restarts now.

    ``fatal`` writes ``replicator.failed`` (the client must raise), otherwise
    ``replicator.errors`` (the client logs it and continues).
    """

    kind = "replicator_error"
    needs_mtc = True
    max_count = 100  # each failed round restarts the job: a hundred is already a long test
    fatal: bool = True
    times: int = 1
    restart: bool = True
    message: str = "injected replicator failure"

    def __post_init__(self) -> None:
        if self.times < 1:
            raise FaultSpecError("replicator_error: times must be >= 1")

    def inject(self, target: MtcTarget) -> list[str]:
        target.service.fail_next(f"{self.message} (pathways-chaos)", self.fatal, self.times)
        touched = [f"service fails its next {self.times} restore round(s), fatal={self.fatal}"]
        if self.restart:
            target.restart("Pods restarted while the replicator is failing")
        return touched

    def describe(self) -> str:
        what = "fatally" if self.fatal else "with recoverable errors"
        return f"the replication service fails {what} {self.times} time(s)"


@dataclasses.dataclass(frozen=True)
class StaleBackup(Fault[MtcTarget]):
    """The newest checkpoints are not trusted: ``restore.version`` pins backup step ``version``
    and the job is restarted to roll back."""

    kind = "stale_backup"
    needs_mtc = True
    version: int = 0
    restart: bool = True

    def inject(self, target: MtcTarget) -> list[str]:
        with target.service.held():
            touched = target.tiers.pin(self.version)
        if self.restart:
            target.restart(f"restarted to roll back to backup step {self.version}")
        return touched

    def describe(self) -> str:
        return f"restore.version pins backup step {self.version}"


@dataclasses.dataclass(frozen=True)
class TornSave(Fault[MtcTarget]):
    """A host crashes in the middle of a local save of step ``saving``: its half-written
    (temporary) folder stays in the ramdisk."""

    kind = "torn_save"
    needs_mtc = True
    host: int = 0
    saving: int = 0
    restart: bool = True

    def inject(self, target: MtcTarget) -> list[str]:
        target.check_host(self.host)
        with target.service.held():
            touched = target.tiers.write_torn_step(self.host, self.saving)
        if self.restart:
            target.restart(f"host {self.host} crashed while saving step {self.saving}")
        return touched

    def describe(self) -> str:
        return f"host {self.host} leaves a half-written step {self.saving}"
