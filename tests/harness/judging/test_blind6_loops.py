"""A sixth blind tester's loops, kept as written (``tests/loops/real_jobs/blind6_*.py``), each
with the verdict it got wrong before and the one it gets now."""

from __future__ import annotations

from pathlib import Path

from pathways_chaos.harness.play import Outcome, play_loop

JOBS = Path(__file__).parents[2] / "loops" / "real_jobs"
DL = "data_loss@batch=10:slice=1:repair_after_polls=3"
PROGRAM_ERROR = "raise_error@batch=7:code=INVALID_ARGUMENT"


def _judged(name: str, schedule: str, tmp_path: Path) -> Outcome:
    loop = f"{JOBS / f'blind6_{name}.py'}:main"
    base = play_loop(loop, checkpoint_dir=tmp_path / "fault-free")
    return play_loop(loop, schedule, baseline=base.events, checkpoint_dir=tmp_path / "run")


def test_a_snapshotter_beside_a_checkpoint_manager_is_judged(tmp_path: Path) -> None:
    """NOT JUDGED before: the clean rerun's ``save=K`` counted only snapshot saves, while the
    trigger counts a checkpoint manager's too, so the clean run lost its slice after another
    save, restored checkpoint 5 instead of snapshot 8, and trained another batch schedule."""
    out = _judged("snapshot_and_checkpoint_manager_ok", DL, tmp_path)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "final-state" in out.verdict.judged


def test_a_program_error_swallowed_around_the_step_fails_naming_it(tmp_path: Path) -> None:
    """SURVIVED before: raise_error was raised inside the batch draw, outside the loop's
    ``try`` around its step, so the loop never met it. It now comes from the loop's next use
    of a device; the swallowed error is the first finding, and the batch it dropped is named
    as dropped, not as a data order that changes from run to run."""
    out = _judged("swallows_program_errors_of_its_step", PROGRAM_ERROR, tmp_path)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    first, second = out.verdict.violations[:2]
    assert "which is not a slice-down error: the loop retried or swallowed it" in first
    assert "were drawn in batch #7" in second and "never trained" in second
    assert not any("not the same from run to run" in v for v in out.verdict.violations)


def test_a_retry_of_the_loops_own_says_why_it_is_not_judged(tmp_path: Path) -> None:
    """A correct loop that retries by itself (``is_error_due_to_slice_down`` and
    ``wait_for_slices``, no ``elastic_retry``) was told "only one attempt ran" and "the loss led
    to no restore", both false: it restored snapshot 6. Attempts are counted by
    ``elastic_retry``; without it the judges that need them say so."""
    out = _judged("own_retry_without_elastic_retry_ok", DL, tmp_path)
    assert out.verdict.word == "NOT JUDGED", out.verdict.summary()
    for judge in ("no-leaks", "final-state"):
        assert "the loop retried by itself" in out.verdict.not_judged[judge]
    said = " ".join(out.verdict.not_judged.values())
    assert "only one attempt ran" not in said and "led to no restore" not in said
    assert "exactly-once" in out.verdict.judged and not out.verdict.violations


def test_samples_a_sampler_drew_twice_are_blamed_on_the_draw_thrown_away(tmp_path: Path) -> None:
    """A sampler (with replacement) whose key stays outside the snapshot goes on after the
    restore where the failed attempt stopped. The first line blamed a batch that was trained
    ("sample ids 1278 were drawn in batch #2 and never trained"): 1278 is drawn twice by the
    fault-free run too, and the draw named must be one the chain did not train."""
    out = _judged("sampler_key_not_saved", DL, tmp_path)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    first = out.verdict.violations[0]
    assert "never drawn again after the restore" in first, first
    assert "batch #2 " not in first
