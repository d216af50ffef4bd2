"""Loops written blind (a tester's, and the real-jobs set), judged as their authors meant: a
scale-up through a new attempt (``ScaleUpSignalError``) is judged, and caught when the regained
slice is never used; a "not judged" reason says what the loop did, not something else."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.play import Outcome, play_loop

LOOPS = Path(__file__).parents[2] / "loops"
LOSS = "data_loss@batch=10:slice=1:repair_after_polls=3"


def test_a_scale_up_through_a_new_attempt_is_judged(tmp_path: Path) -> None:
    out = play_loop(
        f"{LOOPS / 'real_jobs' / 'ckpt_manager_ok.py'}:main", LOSS, checkpoint_dir=tmp_path
    )
    assert out.verdict.ok, out.verdict.summary()
    assert "scale-up" in out.verdict.judged, out.verdict.summary()


def test_a_scale_up_that_keeps_the_smaller_mesh_fails_naming_the_slice(tmp_path: Path) -> None:
    """Judged "not judged: the loop took no slice back" and passed before."""
    out = play_loop(f"{LOOPS / 'scale_up_keeps_old_mesh.py'}:main", LOSS, checkpoint_dir=tmp_path)
    assert not out.verdict.ok
    first = out.verdict.violations[0]
    assert first.startswith("slice 1 rejoined and was made active in run 1 attempt"), first
    assert "kept the old mesh" in first, first


def test_saves_with_no_step_number_say_so_and_the_loop_survives(tmp_path: Path) -> None:
    """StandardCheckpointer.save(path) names no step: resume-step cannot compare one, and says
    that (it said "no restore was followed by a batch and a save", after 28 of them)."""
    loop = f"{LOOPS / 'real_jobs' / 'standard_checkpointer_dataclass_ok.py'}:main"
    baseline = play_loop(loop, checkpoint_dir=tmp_path / "c0")
    out = play_loop(loop, LOSS, baseline=baseline.events, checkpoint_dir=tmp_path / "c1")
    assert out.verdict.ok, out.verdict.summary()
    assert {"exactly-once", "final-state", "faults-fired"} <= set(out.verdict.judged)
    why = out.verdict.not_judged["resume-step"]
    assert "carry no step number" in why and "StandardCheckpointer.save(path)" in why, why


# -- a second blind tester's loops (2026-12-06, third session) -------------------------------
GEN = f"{LOOPS / 'real_jobs' / 'blind_ckptmgr_gen.py'}"
MANUAL = f"{LOOPS / 'real_jobs' / 'blind_manual_try.py'}"
PAIRS = f"{LOOPS / 'real_jobs' / 'blind_pause_pairs.py'}"


def test_a_checkpoint_manager_restore_of_an_older_step_fails_restore_latest(tmp_path: Path) -> None:
    """It survived, with restore-latest listed as judged: the judge only knew snapshots. And
    the saves CheckpointManager skipped (save_interval_steps) were logged as saves."""
    out = play_loop(
        f"{GEN}:broken_older",
        "data_loss@batch=10:slice=1:repair_after_polls=2",
        checkpoint_dir=tmp_path,
    )
    assert not out.verdict.ok
    first = out.verdict.violations[0]
    assert first.startswith("run 1 attempt 2 restored the checkpoint of step 4 although"), first
    assert "had written step 8: it trains 4 finished steps again" in first, first
    assert [e["step"] for e in out.of_kind("checkpoint_save") if e["attempt"] == 1] == [0, 4, 8]
    assert {e["step"] for e in out.of_kind("save_skipped")} >= {1, 2, 3, 5, 6, 7}


def test_after_a_preemption_an_older_checkpoint_than_the_one_written_fails(tmp_path: Path) -> None:
    out = play_loop(f"{GEN}:broken_older", "preemption@batch=6", checkpoint_dir=tmp_path)
    assert not out.verdict.ok
    assert "run 2 attempt 1 restored the checkpoint of step 4" in out.verdict.violations[0]
    assert "had written step 5" in out.verdict.violations[0]


def test_the_same_loop_restoring_the_latest_survives_with_restore_latest_judged(
    tmp_path: Path,
) -> None:
    out = play_loop(
        f"{GEN}:main", "data_loss@batch=10:slice=1:repair_after_polls=2", checkpoint_dir=tmp_path
    )
    assert out.verdict.ok, out.verdict.summary()
    assert "restore-latest" in out.verdict.judged


def test_a_hand_written_retry_that_restores_is_a_recovery_not_an_ignored_error(
    tmp_path: Path,
) -> None:
    """The guide's own pattern (catch, wait_for_slices, rebuild the mesh, restore) FAILED as
    'caught and ignored'; one that carries on with the failed arrays still fails so."""
    good = play_loop(f"{MANUAL}:main", "data_loss@batch=5:slice=1", checkpoint_dir=tmp_path / "a")
    assert good.verdict.ok, good.verdict.summary()
    assert {"errors-handled", "restore-latest", "exactly-once"} <= set(good.verdict.judged)

    bad = play_loop(
        f"{MANUAL}:broken_swallow",
        "data_loss@batch=5:slice=1:repair_after_polls=2",
        checkpoint_dir=tmp_path / "b",
    )
    assert not bad.verdict.ok
    assert (
        "caught at" in bad.verdict.violations[0]
        and "no restore in between" in (bad.verdict.violations[0])
    )


def test_resume_step_is_not_judged_when_no_batch_of_the_attempt_was_seen(tmp_path: Path) -> None:
    """Batches the observer cannot see were counted as none trained: 'it resumed at step 7,
    not step 5 (the step counter was not restored)' for a loop that resumed at step 5."""
    out = play_loop(
        f"{PAIRS}:main", "data_loss@save=3:slice=2:repair_after_polls=2", checkpoint_dir=tmp_path
    )
    assert not out.verdict.violations, out.verdict.summary()
    assert "drew no batch the observer can see" in out.verdict.not_judged["resume-step"]


def test_a_preemption_a_loop_has_no_handler_for_is_not_judged_never_survived(
    tmp_path: Path,
) -> None:
    out = play_loop(f"{MANUAL}:main", "preemption@batch=6", checkpoint_dir=tmp_path)
    assert out.verdict.word == "NOT JUDGED", out.verdict.summary()
    assert "installs no SIGTERM handler" in out.verdict.not_judged["faults-fired"]


# -- a third blind tester's loops: orbax's own ways to say "the latest" --------------------------
MGRS = f"{LOOPS / 'real_jobs' / 'blind_mgrs.py'}"
V1 = f"{LOOPS / 'real_jobs' / 'blind_v1.py'}"
DL = "data_loss@batch=10:slice=1:repair_after_polls=2"


@pytest.mark.parametrize(
    "loop",
    [
        f"{MGRS}:none_restore",  # CheckpointManager.restore(None, ...): the latest step
        f"{V1}:omitted",  # v1 Checkpointer.load(abstract_state=...): the latest
        f"{V1}:by_meta",  # v1 Checkpointer.load(ck.latest, ...): a CheckpointMetadata
        f"{MGRS}:samples_explicit",  # step labels that count samples: save(step * 24)
    ],
)
def test_orbax_spellings_of_the_latest_and_sample_labels_survive(loop: str, tmp_path: Path) -> None:
    """Each FAILED before: 'restored step None that no attempt saved', samples 'skipped', too
    few steps; or 'the step counter was not restored' for labels 24 apart."""
    out = play_loop(loop, DL, checkpoint_dir=tmp_path)
    assert out.verdict.ok, out.verdict.summary()
    assert {"restore-latest", "resume-step", "exactly-once"} <= set(out.verdict.judged)


def test_restoring_from_the_best_manager_not_the_latest_names_the_newer_one(
    tmp_path: Path,
) -> None:
    out = play_loop(f"{MGRS}:bug_best", DL, checkpoint_dir=tmp_path)
    assert not out.verdict.ok
    first = out.verdict.violations[0]
    assert "restored the checkpoint of step 1" in first, first
    assert "step 8 was written by" in first and first.count("/latest") == 1, first


def test_a_hand_written_retry_from_a_host_copy_is_a_recovery_the_chain_cannot_follow(
    tmp_path: Path,
) -> None:
    """It FAILED 'caught and ignored', with 'never trained' and 'trained 9 steps too few' from a
    chain that broke at the put-back; its final state equals the fault-free run's."""
    loop = f"{LOOPS / 'real_jobs' / 'blind_manual.py'}:hostcopy"
    baseline = play_loop(loop, checkpoint_dir=tmp_path / "c0")
    out = play_loop(loop, DL, baseline=baseline.events, checkpoint_dir=tmp_path / "c1")
    assert out.verdict.ok, out.verdict.summary()
    assert {"errors-handled", "final-state"} <= set(out.verdict.judged)
    assert "put its state back from host values" in out.verdict.not_judged["snapshot-pairs"]


def test_a_new_attempt_put_back_from_a_host_copy_still_breaks_the_chain(tmp_path: Path) -> None:
    """The hand-written-retry case above was added beside this one and, for a while, in its
    place: an attempt that put an older host copy back was followed as a chain again."""
    loop = f"{Path(__file__).parent / 'loop_catalogue' / 'broken' / 'restores_older_host_copy.py'}"
    out = play_loop(
        f"{loop}:main", "data_loss@batch=10:slice=1:repair_after_polls=3", checkpoint_dir=tmp_path
    )
    assert not out.verdict.ok
    why = out.verdict.not_judged["snapshot-pairs"]
    assert "run 1 attempt 2 put its state back from host values" in why, why


# -- a third blind tester's loops (2026-12-06, fourth session) --------------------------------
SIGTERM = f"{LOOPS / 'real_jobs' / 'blind_sigterm_flag.py'}"
SIGTERM_BUG = f"{LOOPS / 'real_jobs' / 'blind_sigterm_flag_bug.py'}"
PORTED = f"{LOOPS / 'real_jobs' / 'blind_ported_mc.py'}"
TWO_LOSSES = (
    "data_loss@batch=8:slice=2:repair_after_polls=2,not_found@batch=16:slice=1:repair_after_polls=2"
)


def test_a_checkpoint_picked_by_name_after_preemptions_is_an_older_one_and_fails(
    tmp_path: Path,
) -> None:
    """It survived: a ``StandardCheckpointer`` that saves by path has no manager whose newest
    step a restore is compared with; ``max(names)`` picks step_8 over step_14."""
    twice = "preemption@batch=9,preemption@batch=15"
    bad = play_loop(f"{SIGTERM_BUG}:main", twice, checkpoint_dir=tmp_path / "bad")
    assert not bad.verdict.ok
    first = bad.verdict.violations[0]
    assert first.startswith("run 3 attempt 1 restored the checkpoint of step 8 ("), first
    assert "although step 14 had been written beside it" in first, first
    assert "it trains 6 finished steps again" in first, first
    good = play_loop(f"{SIGTERM}:main", twice, checkpoint_dir=tmp_path / "good")
    assert good.verdict.ok, good.verdict.summary()
    assert "restore-latest" in good.verdict.judged


def test_batches_placed_through_multihost_utils_are_followed_to_the_state(tmp_path: Path) -> None:
    """A ported multi-controller loop places its batches with
    ``host_local_array_to_global_array``: the chain broke there ("rebuilt on the host"), so a
    loop that kept its old mesh after a scale-up survived, with scale-up not judged."""
    kept = f"{LOOPS / 'real_jobs' / 'blind_ported_mc_keeps_mesh_bug.py'}:main"
    bad = play_loop(kept, TWO_LOSSES, checkpoint_dir=tmp_path / "bad")
    assert "scale-up" in bad.verdict.failed, bad.verdict.summary()
    assert any("kept the old mesh" in v for v in bad.verdict.violations)
    good = play_loop(f"{PORTED}:main", TWO_LOSSES, checkpoint_dir=tmp_path / "good")
    assert good.verdict.ok, good.verdict.summary()
    assert {"scale-up", "snapshot-pairs", "exactly-once"} <= set(good.verdict.judged)


def test_a_snapshot_taken_before_the_step_is_named_through_multihost_utils(tmp_path: Path) -> None:
    """Only the final state failed it: the chain judges could not follow the placements."""
    early = f"{LOOPS / 'real_jobs' / 'blind_ported_mc_presave_bug.py'}:main"
    out = play_loop(early, TWO_LOSSES, checkpoint_dir=tmp_path)
    assert "snapshot-pairs" in out.verdict.failed, out.verdict.summary()
    assert "ahead of the 72 that model had reached" in out.verdict.violations[0]


def test_attempts_that_ended_before_their_first_batch_are_counted_in_the_reasons(
    tmp_path: Path,
) -> None:
    """Six attempts crashed before their restore: no-leaks said "only one attempt ran" and
    restore-latest "no attempt started while a snapshot or checkpoint existed"."""
    crash = f"{LOOPS / 'real_jobs' / 'blind_ported_mc_localdev_bug.py'}:main"
    out = play_loop(crash, "data_loss@batch=8:slice=0", checkpoint_dir=tmp_path)
    assert not out.verdict.ok and "completed" in out.verdict.failed
    reasons = out.verdict.not_judged
    assert "only one attempt ran" not in reasons.get("no-leaks", ""), reasons
    why = reasons["restore-latest"]
    assert why.startswith("the attempts that started while a snapshot existed each ended"), why


# -- the second tester of the fourth session ----------------------------------------------------
SCALED = f"{LOOPS / 'real_jobs' / 'blind2_l5_scaled_batch.py'}"
KEY_NOT_SAVED = f"{LOOPS / 'real_jobs' / 'blind2_l5y_key_not_saved.py'}"
MIXTURE = f"{LOOPS / 'real_jobs' / 'blind2_l11_mixture.py'}"
MIXTURE_UNIQUE = f"{LOOPS / 'real_jobs' / 'blind2_l11u_mixture_unique_ids.py'}"


def test_a_key_the_snapshot_lacks_fails_though_the_batch_scales_with_the_slices(
    tmp_path: Path,
) -> None:
    """It survived: with a batch that scales, the final state was compared only with a clean
    rerun, which resets the key the same way. The restore probe (a retry that loses no slice)
    keeps the fault-free batch schedule, so it is compared with the fault-free run."""
    baseline = play_loop(f"{KEY_NOT_SAVED}:main", checkpoint_dir=tmp_path / "b0")
    bad = play_loop(
        f"{KEY_NOT_SAVED}:main", TWO_LOSSES, baseline=baseline.events, checkpoint_dir=tmp_path / "b"
    )
    assert bad.verdict.failed == ["restore-keeps-state"], bad.verdict.summary()
    first = bad.verdict.violations[0]
    assert first.startswith("after a retry that lost no slice (DATA_LOSS raised right after"), first
    assert "the snapshot does not hold all the state" in first
    assert bad.verdict.causes == ["state-outside-snapshot"]
    reference = play_loop(f"{SCALED}:main", checkpoint_dir=tmp_path / "g0")
    good = play_loop(
        f"{SCALED}:main", TWO_LOSSES, baseline=reference.events, checkpoint_dir=tmp_path / "g"
    )
    assert good.verdict.word == "SURVIVED", good.verdict.summary()
    assert "restore-keeps-state" in good.verdict.judged


def test_a_mixture_whose_sources_share_ids_is_not_judged_never_failed(tmp_path: Path) -> None:
    """Two grain iterators in turn, each numbering its records from 0: FAILED "sample ids
    0..159 were trained twice" for a correct loop, even under a schedule that did nothing."""
    out = play_loop(f"{MIXTURE}:main", TWO_LOSSES, checkpoint_dir=tmp_path)
    assert out.verdict.violations == [], out.verdict.summary()
    assert (
        "several grain iterators (a mixture of data sources) whose sample ids overlap"
        in (out.verdict.not_judged["exactly-once"])
    )
    assert "a data position belongs to one of them" in out.verdict.not_judged["snapshot-pairs"]
    assert out.verdict.word == "NOT JUDGED"


def test_a_mixture_with_an_iterator_left_unrestored_fails_naming_the_repeat(
    tmp_path: Path,
) -> None:
    """It failed blaming the snapshot's pairing, which held both positions correctly."""
    out = _judged_against_fault_free(f"{MIXTURE_UNIQUE}:main_broken", TWO_LOSSES, tmp_path)
    first = out.verdict.violations[0]
    assert first.startswith("sample ids 100000..100031 were trained twice or more"), first
    assert (
        "several grain iterators, or made a new one" in first
        and "snapshot-pairs" in out.verdict.not_judged
    )


# -- the fourth tester: correct loops the new checks misjudged ------------------------------------
def _judged_against_fault_free(loop: str, schedule: str, tmp_path: Path) -> Outcome:
    reference = play_loop(loop, checkpoint_dir=tmp_path / "fault-free")
    return play_loop(loop, schedule, baseline=reference.events, checkpoint_dir=tmp_path / "run")


@pytest.mark.parametrize("name", ["blind3_c3_warmup_pause", "blind3_c2_alternate"])
def test_a_correct_mixture_survives(name: str, tmp_path: Path) -> None:
    """A warm-up iterator then the main one FAILED (its positions were read as one stream's);
    two sources in turn with unique ids FAILED "ids ... skipped" against the fault-free order."""
    out = _judged_against_fault_free(f"{LOOPS / 'real_jobs' / name}.py:main", TWO_LOSSES, tmp_path)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "exactly-once" in out.verdict.judged and "snapshot-pairs" in out.verdict.not_judged


def test_a_loop_restoring_its_own_first_snapshot_is_judged_by_the_reruns(tmp_path: Path) -> None:
    """It restores at every attempt's start, the first attempt too (a step-0 snapshot): the
    clean rerun said "the run's restores do not lead back to saves it made" (NOT JUDGED)."""
    loop = f"{LOOPS / 'real_jobs' / 'blind3_a_tokens.py'}:main"
    out = _judged_against_fault_free(loop, "data_loss@batch=10:slice=1", tmp_path)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert {"final-state", "restore-keeps-state"} <= set(out.verdict.judged)


def test_a_fixed_global_batch_in_more_micro_batches_on_fewer_slices_resumes_right(
    tmp_path: Path,
) -> None:
    """64 samples a step, 8 micro-batches of 8 on one slice, 4 on two: resume-step learned 4
    batches a step from the fault-free run and FAILED "resumed at step 1, not step 3"."""
    loop = f"{LOOPS / 'real_jobs' / 'blind3_f_const_global.py'}:main"
    reference = play_loop(loop, topology="2x2", checkpoint_dir=tmp_path / "fault-free")
    out = play_loop(
        loop,
        "data_loss@batch=11:slice=1",
        topology="2x2",
        baseline=reference.events,
        checkpoint_dir=tmp_path / "run",
    )
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "resume-step" in out.verdict.judged
    assert "its batches changed size with the slices" in out.verdict.not_judged["step-count"]


# -- a slice that comes back: the clean rerun stands where the faulted run's clock stood -----
def _judged_against_a_clean_rerun(loop: str, tmp_path: Path) -> Outcome:
    baseline = play_loop(loop, checkpoint_dir=tmp_path / "c0")
    return play_loop(loop, LOSS, baseline=baseline.events, checkpoint_dir=tmp_path / "c1")


def test_a_slice_taken_back_after_a_loss_has_its_final_state_judged(tmp_path: Path) -> None:
    """Was "not judged: a clean run ... trained another batch schedule": pathwaysutils' monitor
    polls on the episode clock, which in the faulted run had run ahead by the work a failure
    threw away, so the clean run saw the slice come back three batches earlier."""
    out = _judged_against_a_clean_rerun(
        f"{LOOPS / 'real_jobs' / 'ckpt_manager_ok.py'}:main", tmp_path
    )
    assert out.verdict.ok, out.verdict.summary()
    assert "final-state" in out.verdict.judged, out.verdict.summary()


def test_a_learning_rate_that_counts_thrown_away_batches_fails_final_state(tmp_path: Path) -> None:
    """The same loop with one bug only a clean rerun can see after a slice came back: it
    SURVIVED, final-state not judged."""
    loop = f"{LOOPS / 'lr_counts_thrown_away_batches.py'}:main"
    out = _judged_against_a_clean_rerun(loop, tmp_path)
    assert "final-state" in out.verdict.failed, out.verdict.summary()
    assert "a clean run that lost the same slices" in out.verdict.violations[0]


# -- a second loss that broke the restore: the clean run loses both at once -----------------
DURING_RESTORE = (
    "data_loss@batch=10:slice=2:repair_after_polls=3,"
    "data_loss@restore=1:slice=1:repair_after_polls=3"
)
CATALOGUE = LOOPS.parent / "harness" / "judging" / "loop_catalogue"


FLAPPING = "flapping@batch=3:slice=1:times=3:up_accesses=4"


def _during_restore(loop: str, tmp_path: Path, schedule: str = DURING_RESTORE) -> Outcome:
    baseline = play_loop(loop, checkpoint_dir=tmp_path / "c0")
    return play_loop(loop, schedule, baseline=baseline.events, checkpoint_dir=tmp_path / "c1")


def test_a_loss_during_the_restore_has_its_final_state_judged(tmp_path: Path) -> None:
    """The one CI skip left: "a clean run that lost the same slices ... trained another batch
    schedule". The clean run waited for the second loss as well as for the step that surfaced
    the first (it restored a batch late), and its one recovery polled the slices fewer times
    than the faulted run's two, so with repair_after_polls they came back five batches late."""
    out = _during_restore(f"{CATALOGUE / 'correct' / 'trainer_class.py'}:main", tmp_path)
    assert out.verdict.ok, out.verdict.summary()
    assert "final-state" in out.verdict.judged, out.verdict.summary()


def test_a_loss_during_the_restore_shows_a_learning_rate_counting_thrown_away_work(
    tmp_path: Path,
) -> None:
    out = _during_restore(f"{LOOPS / 'lr_counts_thrown_away_batches.py'}:main", tmp_path)
    assert "final-state" in out.verdict.failed, out.verdict.summary()


def test_a_flapping_slice_has_its_final_state_judged(tmp_path: Path) -> None:
    """Five CI skips: "no clean rerun to compare with (the schedule holds a flapping fault,
    which a clean rerun cannot place)". Each loss of the flapping slice is now logged and
    moved like a loss of its own, back where the faulted run's clock stood when it came back."""
    out = _during_restore(f"{CATALOGUE / 'correct' / 'trainer_class.py'}:main", tmp_path, FLAPPING)
    assert out.verdict.ok, out.verdict.summary()
    assert "final-state" in out.verdict.judged, out.verdict.summary()


def test_a_flapping_slice_shows_a_learning_rate_counting_thrown_away_work(tmp_path: Path) -> None:
    out = _during_restore(f"{LOOPS / 'lr_counts_thrown_away_batches.py'}:main", tmp_path, FLAPPING)
    assert "final-state" in out.verdict.failed, out.verdict.summary()


def test_a_slice_lost_before_the_first_save_has_its_final_state_judged(tmp_path: Path) -> None:
    """Lost at batch 3, before the loop's first save at 4: the loop began again from nothing,
    and the clean rerun had no save to move the loss to ("led to no restore"). It now loses
    the slice at the first batch, its clock where the faulted run's stood."""
    out = _during_restore(
        f"{CATALOGUE / 'correct' / 'flax_simple_workload.py'}:main", tmp_path, FLAPPING
    )
    assert out.verdict.ok, out.verdict.summary()
    assert "final-state" in out.verdict.judged, out.verdict.summary()
