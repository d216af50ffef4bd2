"""A fifth blind tester's loops, kept as written (``tests/loops/real_jobs/blind4_*.py``), each
with the verdict it got wrong before and the one it gets now."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.play import Outcome, play_loop

JOBS = Path(__file__).parents[2] / "loops" / "real_jobs"
DL = "data_loss@batch=12:slice=2:repair_after_polls=3"
INTERNAL = "raise_error@batch=12:code=INTERNAL"
HELD_THEN_RETRIED = "slow_save@batch=11:seconds=4,raise_error@batch=12:code=INTERNAL"


def _judged(name: str, schedule: str, tmp_path: Path) -> Outcome:
    loop = f"{JOBS / f'blind4_{name}.py'}:main"
    options = {"steps": 30}
    base = play_loop(loop, options=options, checkpoint_dir=tmp_path / "fault-free")
    return play_loop(
        loop, schedule, options=options, baseline=base.events, checkpoint_dir=tmp_path / "run"
    )


@pytest.mark.parametrize("name", ["numpy_sampler_step_seed_ok", "multi_epoch_ok", "doc_chunks_ok"])
def test_data_that_repeats_ids_by_itself_survives(name: str, tmp_path: Path) -> None:
    """Sampling with replacement and several epochs FAILED ("trained twice", even with no
    fault), and records sharing a document id made the judge raise (IndexError): a sample is
    trained more often than the fault-free run trained it, not merely twice."""
    out = _judged(name, DL, tmp_path)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "exactly-once" in out.verdict.judged


def test_a_repeat_without_a_fault_free_run_is_not_judged() -> None:
    out = play_loop(f"{JOBS / 'blind4_multi_epoch_ok.py'}:main", options={"steps": 30})
    assert "exactly-once" in out.verdict.not_judged, out.verdict.summary()
    assert "cannot be told" in out.verdict.not_judged["exactly-once"]


def test_a_data_order_seeded_by_the_time_is_named_as_such(tmp_path: Path) -> None:
    """It FAILED, first line "trained twice ... (the attempt that drew them again restored
    nothing)": the artefact, not the cause."""
    out = _judged("numpy_sampler_time_seed", DL, tmp_path)
    first = out.verdict.violations[0]
    assert "before any restore" in first and "not the same from run to run" in first, first


def test_a_restore_that_does_not_wait_for_the_save_in_flight_fails(tmp_path: Path) -> None:
    """It SURVIVED: step 10's save was held, not dropped, and completed after the restore of
    step 5."""
    out = _judged("no_join_before_restore", HELD_THEN_RETRIED, tmp_path)
    assert "restore-latest" in out.verdict.failed, out.verdict.summary()
    assert any("still in flight" in v for v in out.verdict.violations)


def test_a_kept_exception_is_a_leak(tmp_path: Path) -> None:
    """It SURVIVED: the observer cleared the frames of the error the loop's retry policy kept,
    which hid the leak (and changed what the loop saw)."""
    out = _judged("leak_kept_exception", INTERNAL, tmp_path)
    assert "no-leaks" in out.verdict.failed, out.verdict.summary()


def test_an_injected_slice_down_error_is_watched(tmp_path: Path) -> None:
    """errors-handled said "no slice-down error reached the loop" under an injected INTERNAL
    that elastic_retry retried."""
    out = _judged("multi_epoch_ok", INTERNAL, tmp_path)
    assert "errors-handled" in out.verdict.judged, out.verdict.summary()


def test_a_slice_back_before_the_next_attempt_is_said_so(tmp_path: Path) -> None:
    """A pause-and-resume loop: scale-up said "the loop never took the repaired slice 2 back
    while training (it trains on without it...)", which it never did."""
    loop = "pathways_chaos.harness.reference.user_loop:pause_resume"
    base = play_loop(loop, checkpoint_dir=tmp_path / "fault-free")
    out = play_loop(
        loop,
        "data_loss@batch=6:slice=2,repair@time=15:slice=2",
        baseline=base.events,
        checkpoint_dir=tmp_path / "run",
    )
    assert "was back when the next attempt started" in out.verdict.not_judged["scale-up"]


def test_an_error_raised_inside_a_restore_is_the_loops_not_a_segfault_of_ours() -> None:
    """It ended "killed by SIGSEGV at jax/_src/api.py in live_arrays": our end-of-run census of
    a run that raised inside Snapshotter.load; the loop's ValueError was lost."""
    loop = f"{JOBS / 'blind5_raises_in_restore.py'}:main"
    out = play_loop(loop, "data_loss@batch=4:slice=2", options={"final_step": 12})
    first = out.verdict.violations[0]
    assert "ValueError: mid" in first and "SIGSEGV" not in first, first


def test_a_loop_that_rewrites_the_fault_free_values_fails_naming_it(tmp_path: Path) -> None:
    """It PASSED: its final state was wrong by 1, and it wrote the same into the fault-free
    run's values files before the judge read them."""
    loop = f"{JOBS / 'blind5_rewrites_fault_free_values.py'}:main"
    base = play_loop(loop, log_path=tmp_path / "x" / "fault-free-1.jsonl")
    out = play_loop(
        loop,
        "data_loss@batch=10:slice=1:repair_after_polls=3",
        baseline=base.events,
        log_path=tmp_path / "x" / "episode-2.jsonl",
    )
    assert any(
        "was changed after the run that wrote it ended" in v for v in out.verdict.violations
    ), out.verdict.summary()


def test_a_loop_that_replaces_jax_live_arrays_still_has_its_leak_found() -> None:
    """It SURVIVED: the census asked ``jax.live_arrays``, which the loop made return []."""
    loop = f"{JOBS / 'blind5_hides_live_arrays.py'}:main"
    options = {"steps": 12}
    base = play_loop(loop, options=options)
    out = play_loop(
        loop,
        "data_loss@batch=10:slice=1:repair_after_polls=3",
        options=options,
        baseline=base.events,
    )
    assert "no-leaks" in out.verdict.failed, out.verdict.summary()
