"""Hypothesis strategies for MTC fault schedules (kept apart from faults/mtc.py, which the fault
registry imports and so must not import hypothesis)."""

from __future__ import annotations

from hypothesis import strategies as st

from pathways_chaos.faults.model import Fault, Schedule, ScheduledFault, Trigger
from pathways_chaos.faults.mtc import BackupOnly, NodeLoss, PeerLoss, ReplicatorError, StaleBackup


def mtc_faults(num_hosts: int, backup_steps: st.SearchStrategy[int]) -> st.SearchStrategy[Fault]:
    """One MTC fault; ``stale_backup`` pins one of ``backup_steps`` (steps a backup will hold)."""
    hosts = st.integers(0, num_hosts - 1)
    return st.one_of(
        st.builds(NodeLoss, host=hosts),
        st.builds(PeerLoss, host=hosts),
        st.just(BackupOnly()),
        st.builds(ReplicatorError, fatal=st.booleans()),
        st.builds(StaleBackup, version=backup_steps),
    )


def mtc_schedules(
    num_hosts: int = 4,
    first_step: int = 2,
    max_step: int = 18,
    max_faults: int = 2,
    backup_steps: tuple[int, ...] = (1,),
) -> st.SearchStrategy[Schedule]:
    """Faults at distinct steps, each after ``first_step`` (so a backup exists to pin)."""
    entry = st.tuples(
        st.integers(first_step, max_step), mtc_faults(num_hosts, st.sampled_from(backup_steps))
    )
    return st.lists(entry, max_size=max_faults, unique_by=lambda e: e[0]).map(
        lambda entries: Schedule.of(
            ScheduledFault(Trigger("step", step), fault)
            for step, fault in sorted(entries, key=lambda e: e[0])
        )
    )
