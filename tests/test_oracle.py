"""The oracle passes a clean episode and names what is wrong in a tampered one."""

from __future__ import annotations

import copy

import pytest

from pathways_chaos.harness.judging import oracle

SCHEDULE = "data_loss@step=7:slice=2,repair@step=9:slice=2"


@pytest.fixture(scope="module")
def clean_log(request):
    """One resize episode with a loss and a rejoin, shared by the tampering tests."""
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.episode import run_episode
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    with FakeCluster(SliceTopology(4, 2)) as fake:
        result = run_episode(fake, TrainerConfig(final_step=20), parse_schedule(SCHEDULE))
    assert result.error is None
    return result.events


def tampered(events, kind, change, nth=0):
    events = copy.deepcopy(events)
    matching = [e for e in events if e["kind"] == kind]
    change(matching[nth])
    return events


def test_a_clean_episode_survives(clean_log):
    verdict = oracle.check(clean_log)
    assert verdict.violations == []
    assert verdict.wasted_steps == 2  # steps 6 and 7 ran again after restoring step 5
    assert [r.step for r in verdict.lineage] == list(range(20))


def test_duplicated_ids_are_named(clean_log):
    def repeat(e):
        e["ids"] = [0, *e["ids"][1:]]

    log = tampered(clean_log, "step", repeat, nth=3)
    (message, *_) = oracle.check(log, replay=False).violations
    assert "exactly-once violated from step 3" in message
    assert "duplicated sample ids [0]" in message and "missing sample ids [48]" in message


def test_reordered_ids_are_caught_though_the_set_is_the_same(clean_log):
    def swap(e):
        e["ids"] = e["ids"][::-1]

    log = tampered(clean_log, "step", swap, nth=2)
    problems = oracle.check(log, replay=False).violations
    assert any("order differs from the fault-free order at step 2" in p for p in problems)


def test_a_wrong_final_state_names_the_leaf(clean_log):
    def nudge(e):
        e["final_state"]["['params']['b1']"]["values"][0] += 1e-3

    log = tampered(clean_log, "run_end", nudge)
    problems = oracle.check(log).violations
    assert problems == [p for p in problems if "leaf ['params']['b1']" in p] and problems


def test_a_restore_that_is_not_the_saved_state_names_the_leaf(clean_log):
    def corrupt(e):
        e["digest"]["['params']['w2']"] = "0" * 16

    log = tampered(clean_log, "restore_end", corrupt)
    problems = oracle.check(log, replay=False).violations
    assert any("not bitwise the saved state: leaf ['params']['w2']" in p for p in problems)


def test_a_mesh_built_from_all_devices_is_caught(clean_log):
    def all_devices(e):
        e["device_ids"] = [[0, 1], [2, 3], [4, 5], [6, 7]]
        e["shape"] = [4, 2]

    log = tampered(clean_log, "mesh", all_devices, nth=1)
    problems = oracle.check(log, replay=False).violations
    assert any("not the active slices [0, 1, 3]" in p for p in problems)
    assert any("shape [4, 2] is not (active=3" in p for p in problems)


def test_arrays_left_on_a_dead_slice_are_caught(clean_log):
    def leak(e):
        e["live"]["device_ids"] = sorted(e["live"]["device_ids"] + [4])

    log = tampered(clean_log, "attempt_ready", leak, nth=1)
    problems = oracle.check(log, replay=False).violations
    assert any("live arrays have shards on dead devices [4]" in p for p in problems)


def test_resuming_at_the_snapshot_step_is_caught(clean_log):
    def off_by_one(e):
        e["start_step"] -= 1

    log = tampered(clean_log, "attempt_ready", off_by_one, nth=1)
    problems = oracle.check(log, replay=False).violations
    assert any("resumed at step 5 after restoring step 5" in p for p in problems)


def test_growing_live_arrays_are_caught(clean_log):
    def grow(e):
        e["live"]["by_kind"]["device"] += 6

    log = tampered(clean_log, "attempt_ready", grow, nth=1)
    problems = oracle.check(log, replay=False).violations
    assert any("live device arrays grew from 6" in p for p in problems)


def test_an_unfinished_run_is_reported(clean_log):
    log = [e for e in clean_log if e["kind"] != "run_end"]
    assert "run did not complete" in oracle.check(log, replay=False).violations[0]


def test_recovery_times_come_from_the_log(clean_log):
    loss, repair = oracle.check(clean_log, replay=False).recoveries
    assert loss["detected"] and loss["recovery_s"] == 0.0  # resize: 3 slices healthy at once
    assert repair["kind"] == "repair" and repair["recovery_s"] > 0  # the monitor's next poll
