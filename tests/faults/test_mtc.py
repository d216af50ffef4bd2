"""MTC faults: registered with the fault model, text forms that round-trip, clear bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from pathways_chaos.faults.model import FaultSpecError, fault_kinds, parse_schedule
from pathways_chaos.faults.mtc import NodeLoss
from pathways_chaos.faults.mtc_strategies import mtc_schedules

KINDS = ("node_loss", "peer_loss", "backup_only", "replicator_error", "stale_backup", "torn_save")


def test_every_mtc_fault_is_a_registered_kind():
    assert set(KINDS) <= set(fault_kinds())


@pytest.mark.parametrize(
    "text",
    [
        "node_loss@step=12:host=1",
        "peer_loss@step=11:host=3",
        "backup_only@step=13",
        "replicator_error@step=7:fatal=false:times=2",
        "stale_backup@step=17:version=1",
        "torn_save@step=12:host=2:saving=13:restart=false",
    ],
)
def test_text_forms_round_trip(text):
    assert parse_schedule(text).to_text() == text


@given(mtc_schedules())
@settings(max_examples=50, deadline=None)
def test_generated_schedules_round_trip_through_text(schedule):
    assert parse_schedule(schedule.to_text()) == schedule


def test_a_bad_parameter_names_what_it_takes():
    with pytest.raises(FaultSpecError, match=r"node_loss: unknown parameter.*it takes host"):
        parse_schedule("node_loss@step=3:slice=1")


def test_replicator_error_needs_at_least_one_failure():
    with pytest.raises(FaultSpecError, match="times must be >= 1"):
        parse_schedule("replicator_error@step=3:times=0")


def test_node_loss_maps_to_a_kubernetes_node_fault_on_a_real_cluster():
    assert NodeLoss(host=2).kubernetes_equivalent() == "drain_nodes@step=N:slice=2"
    assert "drain_nodes" in fault_kinds()
