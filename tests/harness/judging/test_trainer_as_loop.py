"""The reference trainer seen from outside, as a user's loop (``reference.trainer_loop``): the
loop panel judges it and its mutants from the libraries' calls alone, the first step of one
subject (issue 32). Every mutant of the catalogue is caught by the judge named below (the last
two by an error that persists in every attempt, and one met in the elastic-event callback,
which a user's loop is given too). What only the trainer knows (its batch policy, its mesh
rows' order) it reports as ``subject`` events, judged by the subject judges beside the loop
judges."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.play import Outcome, play_loop
from pathways_chaos.harness.properties.loop import TRAINER_LOOP as LOOP

LOSS = "data_loss@batch=7:slice=1"
REJOIN = "data_loss@batch=7:slice=1,repair@batch=12:slice=1"
RETRIED = "raise_error@batch=7:code=INTERNAL"  # a host-callback error: retried, no slice lost
PROGRAM_ERROR = "raise_error@batch=7:code=INVALID_ARGUMENT"  # must propagate
HELD_SAVE = "slow_save@batch=6:seconds=4,raise_error@batch=7:code=INTERNAL"  # not dropped
PERSISTENT = "raise_error@batch=7:code=INTERNAL:attempts=40"  # in every attempt: give up
CALLBACK = "raise_error@batch=7:code=INTERNAL,callback_error@callback=1"  # met in the callback

#: mutant -> (schedule, a judge that must find it)
CAUGHT = {
    "IteratorRestoredFromCurrentPosition": (LOSS, "exactly-once"),
    "PerHostIteratorState": (LOSS, "exactly-once"),
    "DataShardByProcessIndex": ("", "snapshot-pairs"),
    "ResumeAtSnapshotStep": (LOSS, "resume-step"),
    "MeshFromAllDevices": (LOSS, "completed"),
    "MeshBuiltOnce": (LOSS, "completed"),
    "FailedAttemptArraysKept": (RETRIED, "no-leaks"),
    "ScaleUpKeepsOldMesh": (REJOIN, "scale-up"),
    "StateShardedAlongReplicaAxis": (LOSS, "completed"),
    "NonSliceDownErrorsRetried": (PROGRAM_ERROR, "completed"),
    "SnapshotBeforeUpdate": (LOSS, "exactly-once"),
    "IteratorNotCarriedAcrossScaleUp": (REJOIN, "exactly-once"),
    "RandomnessNotRestored": (LOSS, "final-state"),
    "StaleSnapshotRestore": (HELD_SAVE, "restore-latest"),
    "UnlimitedRetries": (PERSISTENT, "completed"),
    "CallbackErrorEscapes": (CALLBACK, "completed"),
    # Seen only in what the trainer reports of itself (``subject`` events):
    "BatchFromTotalSlices": (LOSS, "batch-sizes"),
    "JoiningSlicesAppended": (REJOIN, "mesh-rebuild"),
}


@functools.cache
def _baseline(trainer: str) -> list[dict[str, Any]]:
    return play_loop(LOOP, "", options={"trainer": trainer, "steps": 20}).events


def _play(trainer: str, schedule: str, **kwargs: Any) -> Outcome:
    options = {"trainer": trainer, "steps": 20}
    base = _baseline(trainer) if schedule else None
    return play_loop(LOOP, schedule, options=options, baseline=base, **kwargs)


def test_every_mutant_is_listed_once() -> None:
    from pathways_chaos.harness.reference.mutants import CATALOGUE

    assert {e.trainer.__name__ for e in CATALOGUE} == set(CAUGHT)


@pytest.mark.parametrize(
    "schedule", [LOSS, RETRIED, PROGRAM_ERROR, HELD_SAVE, PERSISTENT, CALLBACK]
)
def test_the_reference_trainer_survives_as_a_loop(schedule: str) -> None:
    """Its central judges judged: a program error's (and a persistent one's) is that the run
    ends with it."""
    out = _play("ReferenceTrainer", schedule)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()


@pytest.mark.parametrize(
    "variant", ["WeightDecayTrainer", "StepKeyedInputNoise", "DropoutKeyInState"]
)
@pytest.mark.parametrize("schedule", [LOSS, RETRIED])
def test_a_correct_variant_survives_as_a_loop(variant: str, schedule: str) -> None:
    """Other step math, the same right recovery: a judge that failed one judged the model."""
    out = _play(variant, schedule)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()


@pytest.mark.parametrize("mutant", sorted(CAUGHT))
def test_the_loop_panel_catches_the_mutant(mutant: str) -> None:
    schedule, judge = CAUGHT[mutant]
    out = _play(mutant, schedule)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert judge in out.verdict.failed, (out.verdict.failed, out.verdict.violations)


def test_what_the_trainer_reports_of_itself_is_judged_only_when_present() -> None:
    """The trainer's own events reach the log as ``subject`` events and its judges are heard;
    a user's loop reports none, and is judged by the loop judges alone."""
    from pathways_chaos.harness.judging.subject_judges import SUBJECT_JUDGES

    names = {j.name for j in SUBJECT_JUDGES}
    trainer = _play("ReferenceTrainer", LOSS)
    assert any(e["kind"] == "subject" for e in trainer.events)
    assert names <= set(trainer.verdict.judged), trainer.verdict.summary()
    user = play_loop("pathways_chaos.harness.reference.user_loop:main", "", options={"steps": 12})
    assert not any(e["kind"] == "subject" for e in user.events)
    assert not names & (set(user.verdict.judged) | set(user.verdict.not_judged))


def test_a_program_error_the_loop_retries_is_named() -> None:
    """It SURVIVED before: the loop judges did not know an INVALID_ARGUMENT must propagate
    (and failed a loop that let it propagate: "the loop crashed")."""
    out = _play("NonSliceDownErrorsRetried", PROGRAM_ERROR)
    assert any("which is not a slice-down error" in v for v in out.verdict.violations)


def test_the_clean_rerun_repairs_after_the_same_trained_batches(tmp_path: Path) -> None:
    """The faulted run drew a batch a failure threw away before its repair fired at batch 12:
    the clean rerun, which throws nothing away, repairs at batch 11."""
    _play("ReferenceTrainer", REJOIN, log_path=tmp_path / "ep.jsonl")
    clean = tmp_path / "ep-clean.jsonl"
    start = next(e for e in map(json.loads, clean.read_text().splitlines()) if e["kind"] == "fault")
    faults = [
        e["text"] for e in map(json.loads, clean.read_text().splitlines()) if e["kind"] == "fault"
    ]
    assert start["text"].startswith("data_loss@save="), faults
    assert "repair@batch=11:slice=1" in faults, faults


def test_a_failed_attempts_arrays_kept_across_a_lost_slice_are_a_leak() -> None:
    """The fake deletes the arrays on a lost slice, and the census read only JAX's live
    arrays, so a state kept from the failed attempt vanished from it: the mutant SURVIVED a
    lost slice (it was caught only under a retried error, which loses none). On Pathways its
    buffers on the slices that stayed stay allocated while the loop holds it."""
    out = _play("FailedAttemptArraysKept", LOSS)
    assert "no-leaks" in out.verdict.failed, out.verdict.summary()
    kept = [e.get("failed_attempts_alive") for e in out.events if e["kind"] == "attempt_ready"]
    assert kept[-1] == {"1:1": 6}


def test_a_loop_holding_a_drawn_batch_is_counted_without_its_host_buffers(tmp_path: Path) -> None:
    """The leak census walks every buffer the lineage tracks; a drawn batch's numpy leaves are
    tracked too. Counting them as device arrays raised in the child ("'numpy.ndarray' object
    has no attribute 'sharding'", a toolkit error), which ``pathways-chaos replay`` printed as
    its one line for a correct loop that returns None (tests/loops/real_jobs)."""
    jobs = Path(__file__).parents[2] / "loops" / "real_jobs"
    loop = f"{jobs / 'final_ckpt_returns_none.py'}:main"
    base = play_loop(loop, checkpoint_dir=tmp_path / "fault-free")
    out = play_loop(
        loop,
        "data_loss@batch=6:slice=1:repair_after_polls=2",
        baseline=base.events,
        checkpoint_dir=tmp_path / "run",
    )
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "no-leaks" in out.verdict.judged
