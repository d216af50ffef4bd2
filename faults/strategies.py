"""Hypothesis strategies that generate fault schedules (the property suites draw from these)."""

from __future__ import annotations

from hypothesis import strategies as st

from pathways_chaos.faults.model import Schedule, ScheduledFault, Trigger
from pathways_chaos.faults.slice import (
    DataLoss,
    DeadlineExceeded,
    Internal,
    NotFound,
    Preemption,
    RaiseError,
    RepairSlice,
)

_LOSSES = (DataLoss, DeadlineExceeded, NotFound, Internal)


def slice_faults(num_slices: int) -> st.SearchStrategy[object]:
    slices = st.integers(0, num_slices - 1)
    loss = st.builds(
        lambda cls, s, polls: cls(slice=s, repair_after_polls=polls),
        st.sampled_from(_LOSSES),
        slices,
        st.integers(0, 3),
    )
    repair = st.builds(RepairSlice, slice=slices, after_polls=st.integers(0, 3))
    error = st.builds(RaiseError, code=st.sampled_from(["INTERNAL", "INVALID_ARGUMENT"]))
    return st.one_of(loss, repair, error, st.just(Preemption()))


def triggers(max_step: int) -> st.SearchStrategy[Trigger]:
    return st.one_of(
        st.builds(Trigger, st.sampled_from(["step", "batch"]), st.integers(0, max_step)),
        st.builds(Trigger, st.sampled_from(["restore", "save", "attempt"]), st.integers(1, 4)),
        st.builds(Trigger, st.just("time"), st.integers(0, 10 * max_step)),
    )


def schedules(
    num_slices: int = 4, max_step: int = 30, max_faults: int = 4
) -> st.SearchStrategy[Schedule]:
    entry = st.builds(ScheduledFault, triggers(max_step), slice_faults(num_slices))
    return st.lists(entry, max_size=max_faults).map(Schedule.of)


def loop_faults(num_slices: int) -> st.SearchStrategy[object]:
    """Faults any elastic loop can recover from: every lost slice comes back after a few health
    polls, so a pause-and-resume loop is not left waiting for good."""
    slices = st.integers(0, num_slices - 1)
    return st.builds(
        lambda cls, s, polls: cls(slice=s, repair_after_polls=polls),
        st.sampled_from(_LOSSES),
        slices,
        st.integers(1, 3),
    )


def loop_triggers(max_batch: int) -> st.SearchStrategy[Trigger]:
    """Triggers that need no cooperation from a user's loop: the Nth batch drawn from its
    grain iterator, its Nth Snapshotter save or restore, its Nth elastic attempt, a time."""
    return st.one_of(
        st.builds(Trigger, st.just("batch"), st.integers(1, max_batch)),
        st.builds(Trigger, st.sampled_from(["save", "restore", "attempt"]), st.integers(1, 3)),
        st.builds(Trigger, st.just("time"), st.integers(0, max_batch)),
    )


def loop_schedules(
    num_slices: int = 4, max_batch: int = 24, max_faults: int = 2
) -> st.SearchStrategy[Schedule]:
    """Schedules for ``chaos.run_loop``: slices lost (and back) at points a loop cannot skip."""
    entry = st.builds(ScheduledFault, loop_triggers(max_batch), loop_faults(num_slices))
    return st.lists(entry, min_size=1, max_size=max_faults).map(Schedule.of)
