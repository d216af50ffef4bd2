"""Hypothesis strategies that generate fault schedules (the property suites draw from these).

Besides single faults they generate the pairs that only matter together: a save held in
flight (``slow_save``) followed by a loss or a retried error while it is still in flight, and
a retried error whose elastic-event callback then raises (``callback_error@callback=N``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pathways_chaos.faults.model import Fault, Schedule, ScheduledFault, Trigger
from pathways_chaos.faults.slice import (
    CallbackError,
    DataLoss,
    DeadlineExceeded,
    Internal,
    NotFound,
    Preemption,
    RaiseError,
    RepairSlice,
    SlowSave,
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
    # callback_error takes only the callback= trigger: ``error_in_the_callback`` draws it.
    return st.one_of(loss, repair, error, slow_saves(), st.just(Preemption()))


def slow_saves() -> st.SearchStrategy[SlowSave]:
    """A save held for some seconds on the episode clock, or some health polls."""
    by_time = st.builds(SlowSave, seconds=st.integers(1, 8).map(float))
    by_polls = st.builds(SlowSave, polls=st.integers(1, 4))
    return st.one_of(by_time, by_polls)


def triggers(max_step: int) -> st.SearchStrategy[Trigger]:
    return st.one_of(
        st.builds(Trigger, st.just("step"), st.integers(0, max_step)),  # a step number
        st.builds(Trigger, st.just("batch"), st.integers(1, max(1, max_step))),  # counts from 1
        st.builds(
            Trigger, st.sampled_from(["restore", "save", "attempt", "callback"]), st.integers(1, 4)
        ),
        st.builds(Trigger, st.just("time"), st.integers(0, 10 * max_step)),
    )


@st.composite
def failure_during_a_slow_save(
    draw: st.DrawFn, num_slices: int, max_step: int
) -> list[ScheduledFault]:
    """``slow_save`` at a step, then a loss or a retried INTERNAL one or two steps later."""
    at = draw(st.integers(0, max(0, max_step - 2)))
    hold = draw(slow_saves())
    if draw(st.booleans()):
        then: Fault[Any] = draw(st.sampled_from(_LOSSES))(
            slice=draw(st.integers(0, num_slices - 1))
        )
    else:
        then = RaiseError(code="INTERNAL")
    later = Trigger("step", min(max_step, at + draw(st.integers(1, 2))))
    return [ScheduledFault(Trigger("step", at), hold), ScheduledFault(later, then)]


@st.composite
def error_in_the_callback(draw: st.DrawFn, max_step: int) -> list[ScheduledFault]:
    """A retried INTERNAL, and the elastic-event callback it causes raises INTERNAL too."""
    at = draw(st.integers(0, max_step))
    nth = draw(st.integers(1, 2))
    return [
        ScheduledFault(Trigger("step", at), RaiseError(code="INTERNAL")),
        ScheduledFault(Trigger("callback", nth), CallbackError()),
    ]


def schedules(
    num_slices: int = 4, max_step: int = 30, max_faults: int = 4
) -> st.SearchStrategy[Schedule]:
    entry = st.builds(ScheduledFault, triggers(max_step), slice_faults(num_slices)).map(
        lambda e: [e]
    )
    group = st.one_of(
        entry,
        failure_during_a_slow_save(num_slices, max_step),
        error_in_the_callback(max_step),
    )
    return st.lists(group, max_size=max_faults).map(
        lambda groups: Schedule.of(e for g in groups for e in g)
    )


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
