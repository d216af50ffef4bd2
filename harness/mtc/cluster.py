"""The fake cluster with Multi-Tier Checkpointing: tiers, the service and the client seams.

One fake host per slice (a v5e-8-like slice of one host): host ``s`` owns slice ``s``'s devices,
its ramdisk, and the peer copies it holds. This object is what the MTC faults act on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine.backend import KubeBacked
from pathways_chaos.harness.engine.fake_cluster import FakeCluster
from pathways_chaos.harness.errors import ChaosError
from pathways_chaos.harness.mtc.client_seams import MountTable, MtcClientSeams
from pathways_chaos.harness.mtc.service import ReplicationService
from pathways_chaos.harness.mtc.tiers import Tiers

DEFAULT_MOUNT = "/mtc/ramdisk"
DEFAULT_JOB = "chaos-mtc"


class PodRestarted(ChaosError, RuntimeError):
    """Raised into the trainer when a fault restarts the job's Pods (the JobSet restarts all)."""


class MtcCluster:
    """A ``FakeCluster`` whose hosts have ramdisks, peers and a backup, served by ``service``.

    ``service_factory`` builds the replication service (a mutant from ``harness.mtc.mutants``
    in the mutant tests). Entering starts the service thread and installs the client seams;
    leaving undoes both and removes the tiers it created.
    """

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        job: str = DEFAULT_JOB,
        mount: str = DEFAULT_MOUNT,
        root: str | Path | None = None,
        service_factory: Callable[..., ReplicationService] = ReplicationService,
    ) -> None:
        self.cluster = cluster
        self.job = job
        self.mount = mount
        self.num_hosts = cluster.topology.num_slices
        self.tiers = Tiers(self.num_hosts, job, root)
        self.service = service_factory(self.tiers, clock=cluster.clock)
        self.table = MountTable(mount, [self.tiers.ramdisk(h) for h in range(self.num_hosts)])
        self.seams = MtcClientSeams(self.table, self.worker_of, self.service.pump)
        self._stack = contextlib.ExitStack()

    @property
    def mtc_hosts(self) -> int:
        """The hosts an MTC fault may name: the fault schedule is checked against it up front."""
        return self.num_hosts

    def __enter__(self) -> MtcCluster:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.tiers)
            stack.enter_context(self.service)
            stack.enter_context(self.seams)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    # -- what the episode and the trainer need --------------------------------------------------
    @property
    def clock(self) -> Any:
        return self.cluster.clock

    @property
    def devices(self) -> list[Any]:
        return self.cluster.devices

    @property
    def topology(self) -> Any:
        return self.cluster.topology

    def check_access(self, slices: Any) -> None:
        self.cluster.check_access(slices)

    def lose_slice(
        self, slice_index: int, code: str = "DATA_LOSS", repair_after_polls: Any = None
    ) -> list[str]:
        return self.cluster.lose_slice(slice_index, code, repair_after_polls=repair_after_polls)

    def repair_slice(self, slice_index: int, after_polls: int = 0) -> list[str]:
        return self.cluster.repair_slice(slice_index, after_polls)

    def host_of(self, device: Any) -> int:
        return self.cluster.slice_of(device)

    def worker_of(self, device: Any) -> tuple[int, int]:
        """Pathways worker key ``(task, slice)`` of a CPU device: one host (task 0) per slice."""
        return (0, self.host_of(device))

    def host_dir(self, host: int) -> Path:
        """Where the job's mount path points on ``host`` (the sidecar's local directory)."""
        return self.table.resolve(self.mount, host)

    def check_host(self, host: int) -> None:
        if not 0 <= host < self.num_hosts:
            raise ValueError(
                f"host {host} does not exist: this {self.topology} cluster has hosts "
                f"0..{self.num_hosts - 1} (one per slice)"
            )

    def node_lost(self, host: int) -> list[str]:
        """On ``--cluster`` (the fake bridged to a JobSet), the node loss through the API too:
        the slice's Nodes cordoned and its worker Pods killed, as ``data_loss`` does there, then
        uncordoned (the node is replaced), all in the rollback journal. Nothing on the plain fake.
        """
        if not isinstance(self.cluster, KubeBacked):
            return []
        return self.cluster.lose_slice(host) + self.cluster.repair_slice(host)

    def restart(self, why: str) -> None:
        raise PodRestarted(f"UNAVAILABLE: {why}; the JobSet restarts every Pod (pathways-chaos)")
