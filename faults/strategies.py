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
        st.builds(Trigger, st.just("step"), st.integers(0, max_step)),
        st.builds(Trigger, st.sampled_from(["restore", "save", "attempt"]), st.integers(1, 4)),
        st.builds(Trigger, st.just("time"), st.integers(0, 10 * max_step)),
    )


def schedules(
    num_slices: int = 4, max_step: int = 30, max_faults: int = 4
) -> st.SearchStrategy[Schedule]:
    entry = st.builds(ScheduledFault, triggers(max_step), slice_faults(num_slices))
    return st.lists(entry, max_size=max_faults).map(Schedule.of)
