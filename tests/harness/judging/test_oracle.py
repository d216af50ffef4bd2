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
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.episode import run_episode
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


# -- the checks of issue 12 -------------------------------------------------------------------
def test_the_replay_says_it_ran_the_same_trainer(clean_log):
    def nudge(e):
        e["final_state"]["['params']['b1']"]["values"][0] += 1e-3

    (problem,) = oracle.check(tampered(clean_log, "run_end", nudge)).violations
    assert "a fault-free run of the same trainer (pathways_chaos" in problem
    assert "on one device over the committed batches" in problem
    assert "every committed step's loss matches the replay's" in problem


def test_a_log_without_a_trainer_falls_back_to_the_model_and_says_so(clean_log):
    def anonymous(e):
        e["trainer"] = "nowhere.at_all:Trainer"

    log = tampered(tampered(clean_log, "run_start", anonymous), "run_end", _nudge)
    (problem,) = oracle.check(log).violations
    said = "the reference model's step (the log names trainer nowhere.at_all:Trainer, not one"
    assert said in problem, problem  # a name outside the toolkit is never imported here


def _nudge(e):
    e["final_state"]["['params']['b1']"]["values"][0] += 1e-3


def test_a_restore_of_an_older_snapshot_than_the_newest_complete_is_named(clean_log):
    def stale(e):
        e["step"] = 0

    log = tampered(clean_log, "restore_end", stale)
    (problem,) = oracle.check_restore_newest(log)
    assert problem.startswith(
        "attempt 2 restored snapshot step 0, but snapshot step 5 was complete"
    )
    assert "at the failure (JaxRuntimeError after step 7 in attempt 1)" in problem


def test_a_save_in_flight_at_the_failure_must_be_waited_for(clean_log):
    log = copy.deepcopy(clean_log)
    error = next(i for i, e in enumerate(log) if e["kind"] == "error")
    held = {"seq": -1, "kind": "save_held", "run": 1, "step": 6, "since": 6.0}
    log.insert(error, held)
    (problem,) = oracle.check_restore_newest(log)
    assert (
        "restored snapshot step 5, but snapshot step 6 was in flight (held since t=6.0" in problem
    )
    dropped = {"seq": -1, "kind": "save_dropped", "run": 1, "step": 6}
    log.insert(error + 1, dropped)  # the slice it was on was lost: nothing to wait for
    assert oracle.check_restore_newest(log) == []


def test_a_scale_up_whose_next_step_lacks_the_joining_slice_is_named(clean_log):
    scale_up = next(e for e in clean_log if e["kind"] == "scale_up")
    after = scale_up["step"] + 1

    def old_mesh(e):
        e["mesh_slices"] = [0, 1, 3]

    nth = [e["step"] for e in clean_log if e["kind"] == "step"].index(after, 8)
    log = tampered(clean_log, "step", old_mesh, nth=nth)
    (problem,) = oracle.check_scale_up_joins(log)
    assert problem == (
        f"attempt 2: slices [2] joined by an in-loop scale-up after step {after - 1}, but step "
        f"{after} ran on a mesh of slices [0, 1, 3]: the mesh was not rebuilt with the joining "
        "slices"
    )


def test_a_batch_sized_from_the_total_slice_count_is_named_with_step_and_ids(clean_log):
    first_of_attempt_2 = next(e for e in clean_log if e["kind"] == "step" and e["attempt"] == 2)
    nth = [e for e in clean_log if e["kind"] == "step"].index(first_of_attempt_2)

    def full_size(e):
        e["ids"] = list(range(e["ids"][0], e["ids"][0] + 16))

    (problem,) = oracle.check_batch_sizes(tampered(clean_log, "step", full_size, nth=nth))
    start = first_of_attempt_2["ids"][0]
    assert problem == (
        f"attempt 2: step 6 consumed a global batch of 16 (ids {start}..{start + 15}) on a mesh "
        "of 3 slices [0, 1, 3], which wants 12 (= 16 x 3/4 slices); 16 is the batch for 4 "
        "slices: the batch was not resized with the mesh"
    )


def test_samples_consumed_but_not_trained_are_named(clean_log):
    def dropped_rows(e):
        e["trained"] = 4

    (problem,) = oracle.check_batch_sizes(tampered(clean_log, "step", dropped_rows, nth=2))
    assert problem == "attempt 1: step 2 consumed 16 samples (ids 32..47) but trained on 4: " + (
        "consumed and trained samples must be the same"
    )


def test_a_skipped_range_names_its_step_never_the_end(clean_log):
    def skip(e):
        e["ids"] = [i + 1000 for i in e["ids"]]

    log = tampered(
        clean_log, "step", skip, nth=len([e for e in clean_log if e["kind"] == "step"]) - 1
    )
    (problem, *_) = oracle.check(log, replay=False).violations
    assert "the end" not in problem
    assert problem.startswith("exactly-once violated from step 19:")
    assert problem.endswith("(step 19 ran in attempt 2)")


def test_run_and_attempt_are_named_as_the_log_has_them(clean_log):
    assert oracle.who(clean_log, 1, 2) == "attempt 2"
    start = next(e for e in clean_log if e["kind"] == "run_start")
    two_runs = [*clean_log, {**start, "run": 2}]
    assert oracle.who(two_runs, 2, 1) == "run 2, attempt 1"


def test_a_trainer_whose_math_depends_on_the_mesh_is_replayed_on_the_run_meshes(clean_log):
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer

    class PerMesh(ReferenceTrainer):
        replay_on_one_device = False

    assert oracle.check(clean_log, trainer=PerMesh).violations == []
    (problem,) = oracle.check(tampered(clean_log, "run_end", _nudge), trainer=PerMesh).violations
    assert "on the meshes the committed steps ran on over the committed batches" in problem
