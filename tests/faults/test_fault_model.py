from __future__ import annotations

import pytest
from hypothesis import given, settings

from pathways_chaos.faults.model import (
    FaultSpecError,
    Schedule,
    fault_kinds,
    parse_fault,
    parse_schedule,
)
from pathways_chaos.faults.slice import DataLoss, RepairSlice
from pathways_chaos.faults.strategies import loop_schedules, schedules


def test_text_form_parses_to_the_fault_it_names():
    entry = parse_fault("data_loss@step=12:slice=2")
    assert entry.at.kind == "step" and entry.at.value == 12
    assert entry.fault == DataLoss(slice=2)
    assert entry.to_text() == "data_loss@step=12:slice=2"


def test_parameters_are_typed():
    entry = parse_fault("repair@time=2.5:slice=1:after_polls=3")
    assert entry.fault == RepairSlice(slice=1, after_polls=3)
    assert entry.at.value == 2.5


@settings(max_examples=60, deadline=None)
@given(schedules())
def test_text_and_json_round_trip(schedule: Schedule):
    assert parse_schedule(schedule.to_text()) == schedule
    assert Schedule.from_json(schedule.to_json()) == schedule


@settings(max_examples=40, deadline=None)
@given(loop_schedules())
def test_loop_schedules_round_trip_and_need_no_cooperation(schedule: Schedule):
    assert parse_schedule(schedule.to_text()) == schedule
    assert {e.at.kind for e in schedule} <= {"batch", "save", "restore", "attempt", "time"}
    assert all(e.fault.repair_after_polls >= 1 for e in schedule)


def test_the_batch_trigger_has_a_text_form():
    entry = parse_fault("not_found@batch=12:slice=2")
    assert (entry.at.kind, entry.at.value) == ("batch", 12)
    assert entry.to_text() == "not_found@batch=12:slice=2"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("meteor@step=1", "unknown fault kind 'meteor'"),
        ("data_loss", "has no trigger"),
        ("data_loss@epoch=3", "unknown trigger 'epoch'"),
        ("data_loss@step=x", "'x' is not a number"),
        ("data_loss@step=3:slcie=2", "unknown parameter(s) slcie"),
        ("data_loss@step=3:slice", "needs a value"),
        ("data_loss@step=-1", "is negative"),
        ("slow_save@step=1", "give exactly one of seconds or polls"),
        ("slow_save@step=1:seconds=2:polls=1", "give exactly one of seconds or polls"),
        ("stall@save=1:seconds=0", "use seconds > 0"),
        ("repair@save=1:slice=1:after_polls=2:after_seconds=3", "give one of them"),
        ("repair@save=1:slice=1:after_seconds=100000", "longer than a day"),
    ],
)
def test_bad_text_is_one_clear_line(text: str, says: str):
    with pytest.raises(FaultSpecError) as info:
        parse_fault(text)
    message = str(info.value)
    assert says in message and "\n" not in message


def test_every_slice_fault_kind_is_registered():
    kinds = fault_kinds()
    for kind in (
        "data_loss",
        "deadline_exceeded",
        "not_found",
        "internal",
        "repair",
        "raise_error",
        "preemption",
        "slow_save",
        "callback_error",
    ):
        assert kind in kinds


def test_a_stall_passes_time_on_the_episode_clock_and_touches_no_slice():
    """What a clean rerun uses to stand where the faulted run's clock stood."""
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    entry = parse_fault("stall@save=3:seconds=2.5")
    with FakeCluster(SliceTopology(2, 1)) as fake:
        before = fake.clock.time()
        touched = entry.fault.inject(fake)
        assert fake.clock.time() == before + 2.5
        assert fake.down_slices() == frozenset()
    assert touched == ["the training thread stalled 2.5 s on the episode clock"]
