"""Loops written blind (a tester's, and the real-jobs set), judged as their authors meant: a
scale-up through a new attempt (``ScaleUpSignalError``) is judged, and caught when the regained
slice is never used; a "not judged" reason says what the loop did, not something else."""

from __future__ import annotations

from pathlib import Path

from pathways_chaos.harness.play import play_loop

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
