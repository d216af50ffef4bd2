"""Every fault parameter checked when the schedule is read, for every fault kind (issue 25):
status codes, counts, seconds, indices, MTC hosts, long values. Nothing here starts JAX."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pathways_chaos.faults.lease import TargetLease
from pathways_chaos.faults.model import (
    MAX_COUNT,
    FaultSpecError,
    check_schedule_fits,
    fault_kinds,
    parse_schedule,
)
from pathways_chaos.faults.mtc import NodeLoss, ReplicatorError
from pathways_chaos.faults.slice import ERROR_CODES, SLICE_DOWN_CODES, DataLoss, RaiseError


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("raise_error@step=3:code=OK", "code='OK' is not an XLA error status"),
        ("callback_error@callback=1:code=ok", "code='ok' is not an XLA error status"),
        ("data_loss@step=3:code=BOGUS", "code='BOGUS' is not a slice-down error"),
        ("slice_loss@step=3:code=INVALID_ARGUMENT", "is not a slice-down error"),
        ("replicator_error@step=3:times=101", "times=101 is too many: use at most 100"),
        ("flapping@step=3:slice=1:times=1001", f"times=1001 is too many: use at most {MAX_COUNT}"),
        ("slow_save@step=3:polls=5000", "polls=5000 is too many"),
        ("slow_health@step=3:slice=1:seconds=1e300", "is longer than a day"),
        ("stale_backup@step=3:version=99999999999", "version=99999999999 is too large"),
        ("node_loss@step=3:host=-1", "host=-1 is negative"),
        (" , ,", "names no fault"),  # looks like faults, would have run fault-free and passed
    ],
)
def test_bad_parameters_are_refused_when_parsed(text: str, says: str) -> None:
    with pytest.raises(FaultSpecError) as caught:
        parse_schedule(text)
    assert says in str(caught.value)


def test_the_code_sets_are_what_pathwaysutils_and_xla_use() -> None:
    assert set(SLICE_DOWN_CODES) <= set(ERROR_CODES) and "OK" not in ERROR_CODES
    for code in SLICE_DOWN_CODES:
        assert DataLoss(code=code).code == code
    for code in ERROR_CODES:
        assert RaiseError(code=code).code == code


def test_a_fault_built_in_python_is_checked_before_it_runs_too() -> None:
    schedule = parse_schedule("data_loss@step=3:slice=0")
    entry = schedule.entries[0]
    huge = type(entry)(entry.at, ReplicatorError(times=10**9))
    with pytest.raises(FaultSpecError, match="is too many"):
        check_schedule_fits(type(schedule)((huge,)), 4, kubernetes=False, mtc_hosts=4)


def test_mtc_faults_need_an_mtc_trainer_and_a_host_inside_it() -> None:
    plan = parse_schedule("node_loss@step=3:host=99")
    with pytest.raises(FaultSpecError, match="this trainer has none"):
        check_schedule_fits(plan, 4, kubernetes=False)
    with pytest.raises(
        FaultSpecError, match=r"host 99 is outside the cluster's 4 hosts \(use 0..3"
    ):
        check_schedule_fits(plan, 4, kubernetes=False, mtc_hosts=4)
    check_schedule_fits(parse_schedule("node_loss@step=3:host=3"), 4, kubernetes=False, mtc_hosts=4)
    assert all(cls.needs_mtc == (cls.__module__.endswith(".mtc")) for cls in fault_kinds().values())
    assert NodeLoss.needs_mtc


def test_the_fault_controller_refuses_before_a_step() -> None:
    from pathways_chaos.harness.episodes.fault_controller import FaultController

    cluster = SimpleNamespace(topology=SimpleNamespace(num_slices=4), mtc_hosts=4)
    with pytest.raises(FaultSpecError, match="host 9 is outside"):
        FaultController(parse_schedule("peer_loss@step=3:host=9"), cluster, None)  # type: ignore[arg-type]


def test_a_120k_character_value_is_cut_in_the_message() -> None:
    with pytest.raises(FaultSpecError) as caught:
        parse_schedule(f"raise_error@step=3:code={'X' * 120_000}")
    assert len(str(caught.value)) < 500 and "(120007 characters)" in str(caught.value)


def test_a_lease_beyond_int32_is_refused_before_the_api_sees_it() -> None:
    with pytest.raises(ValueError, match="the API's int32"):
        TargetLease(None, "ns", "js", "run", duration_s=2**31)  # type: ignore[arg-type]
