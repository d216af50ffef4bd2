"""An episode's child process acting its slice faults out on the cluster, for the judging process.

Why: the loop under test runs in a child process (it never shares a process with its judge), and
on ``--cluster`` its faults are Kubernetes actions made while it runs. The child connects on its
own, checks before each change that the session's Lease still names the judging process, and
appends the change to the session's rollback journal (the same file, one locked line at a time).
The judging process keeps the Lease renewed and rolls the journal back when the test ends,
whatever the child did and however it ended: a child killed in the middle of a cordon leaves a
journal entry written before the change, which the rollback undoes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from pathways_chaos.harness.engine.clock import Clock
from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.errors import ChaosError
from pathways_chaos.harness.kube.kube_cluster import ClusterSpec, KubeBridgedCluster


@dataclasses.dataclass(frozen=True)
class BridgeBinding:
    """What a child needs to bridge its fake's slices to the JobSet the session targets."""

    spec: ClusterSpec
    allowed_namespaces: tuple[str, ...]
    journal_path: str | None  # None: no journal (a dry run, which changes nothing)
    run_id: str
    lease_holder: str | None  # the judging process's holder identity (armed sessions)
    hosts_per_slice: int

    def cluster(
        self, topology: SliceTopology, clock: Clock, down_at_start: Iterable[int] = ()
    ) -> KubeBridgedCluster:
        """The child's bridged fake (not started): its own API client, the session's journal."""
        from pathways_chaos.faults.journal import RollbackJournal
        from pathways_chaos.faults.journal_mirror import JournalMirror
        from pathways_chaos.faults.kube_target import KubeTarget
        from pathways_chaos.faults.lease import check_holder
        from pathways_chaos.harness.kube.kube_cluster import connect

        api = connect(self.spec)
        journal = None
        if self.journal_path is not None:
            journal = RollbackJournal(self.journal_path, run_id=self.run_id)
            if self.spec.armed and journal.header is None:  # the session binds it, never a child
                raise ChaosError(
                    f"the session's journal {self.journal_path} names no cluster yet: the "
                    "judging process binds it before an episode's child may change anything"
                )
            if self.lease_holder is not None:  # armed: fenced and mirrored as the session's
                journal.fence = functools.partial(
                    check_holder, api, self.spec.namespace, self.spec.jobset, self.lease_holder
                )
                journal.mirror = JournalMirror(
                    api, self.spec.namespace, self.spec.jobset, self.run_id
                )
        target = KubeTarget(
            api_client=api,
            namespace=self.spec.namespace,
            jobset=self.spec.jobset,
            armed=self.spec.armed,
            allowed_namespaces=frozenset(self.allowed_namespaces),
            journal=journal,
        )
        return KubeBridgedCluster(
            topology,
            target,
            api,
            self.spec,
            self.hosts_per_slice,
            clock=clock,
            down_at_start=down_at_start,
        )


def binding_of(cluster: KubeBridgedCluster) -> BridgeBinding:
    """The binding of the judging process's bridged cluster, for its episodes' children."""
    target = cluster.target
    journal = target.journal
    return BridgeBinding(
        spec=cluster.spec,
        allowed_namespaces=tuple(sorted(target.allowed_namespaces)),
        journal_path=None if journal is None else str(journal.path),
        run_id="" if journal is None else journal.run_id,
        lease_holder=None if journal is None else journal.lease_holder,
        hosts_per_slice=cluster.hosts_per_slice,
    )
