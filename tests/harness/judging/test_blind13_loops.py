"""A thirteenth blind tester's loops (``tests/loops/real_jobs/blind13/``, kept as written, and
one broken twin made here): a loop that saves every micro-batch under its optimizer step, and
one that restores without waiting for the save in flight. Each test failed before its fix."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from pathways_chaos.harness.judging.chain_judges import _slices_were
from pathways_chaos.harness.judging.loop_lineage import batches_per_step, samples_per_step
from pathways_chaos.harness.play import Outcome, play_loop

JOBS = Path(__file__).parents[2] / "loops" / "real_jobs" / "blind13"
FLAPPING = "flapping@batch=5:slice=2"
IN_FLIGHT = "slow_save@save=1:seconds=30,raise_error@save=3:code=DATA_LOSS"


def _judged(name: str, schedule: str) -> Outcome:
    """The loop under ``schedule``, judged against a fault-free run of it."""
    loop = f"{JOBS / name}:main"
    return play_loop(loop, schedule, baseline=play_loop(loop).events)


def _saves(labels: list[int], size: int = 8) -> list[dict[str, object]]:
    """A fault-free attempt that draws a batch and saves after it, under ``labels``."""
    events: list[dict[str, object]] = []
    for n, label in enumerate(labels, start=1):
        events.append({"kind": "batch", "run": 1, "attempt": 1, "size": size})
        events.append(
            {
                "kind": "snapshot_save",
                "run": 1,
                "attempt": 1,
                "step": label,
                "batches_in_attempt": n,
            }
        )
    return events


def test_a_step_saved_once_per_micro_batch_is_learned_as_two_batches() -> None:
    """optax.MultiSteps(k=2) saved after every draw as ``n // 2``: 0, 1, 1, 2, 2, 3. Each pair
    of saves where the label grew is one batch apart, so the unit came out as one batch a step
    and a correct loop FAILED resume-step ("it resumed at step 2, not step 3")."""
    events = _saves([n // 2 for n in range(1, 13)])
    assert batches_per_step(events) == 2
    assert samples_per_step(events) == 16
    assert batches_per_step(_saves([0, 1, 2, 3])) == 1  # one save a step: as before
    twice = [  # a snapshot and a checkpoint of each step, two micro-batches a step
        {"kind": kind, "run": 1, "attempt": 1, "step": step, "batches_in_attempt": 2 * step}
        for step in (5, 10)
        for kind in ("snapshot_save", "checkpoint_save")
    ]
    assert batches_per_step(twice) == 2
    assert batches_per_step(_saves([4, 8, 12], size=4)) == Fraction(1, 4)


def test_the_micro_batch_loop_survives_a_flapping_slice_and_its_broken_twin_fails() -> None:
    out = _judged("l13_multisteps_pause_resume_ok.py", FLAPPING)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "resume-step" in out.verdict.judged
    broken = _judged("l13b_multisteps_counter_not_restored.py", FLAPPING)
    assert broken.verdict.word == "FAILED", broken.verdict.summary()
    assert any("step counter was not restored" in v for v in broken.verdict.violations)


def test_a_restore_that_does_not_wait_for_the_save_in_flight_fails_the_chaos_suite() -> None:
    """It passed all nine fixed scenarios; only the property search found it. The suite's
    save-in-flight scenario now does, and a loop that joins first survives it."""
    broken = _judged("l14_no_join_before_load.py", IN_FLIGHT)
    assert broken.verdict.word == "FAILED", broken.verdict.summary()
    assert "Snapshotter.join() before load" in broken.verdict.violations[0]
    out = _judged("l01_scan_accum_ok.py", IN_FLIGHT)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "restore-latest" in out.verdict.judged


def test_two_slices_are_named_as_two() -> None:
    """It said "the lost slice 1, 2 was back"."""
    assert _slices_were([2]) == "the lost slice 2 was"
    assert _slices_were([1, 2]) == "the lost slices 1 and 2 were"
