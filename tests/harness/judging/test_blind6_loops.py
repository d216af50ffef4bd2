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
