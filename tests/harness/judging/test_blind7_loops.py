"""A seventh blind tester's loops, kept as written (``tests/loops/real_jobs/blind7_*.py``), each
with the verdict it got wrong before and the one it gets now."""

from __future__ import annotations

from pathlib import Path

from pathways_chaos.harness.play import Outcome, play_loop

JOBS = Path(__file__).parents[2] / "loops" / "real_jobs"
DL_BACK = "data_loss@batch=10:slice=1:repair_after_polls=3"


def _judged(name: str, schedule: str, tmp_path: Path) -> Outcome:
    loop = f"{JOBS / f'blind7_{name}.py'}:main"
    base = play_loop(loop, checkpoint_dir=tmp_path / "fault-free")
    return play_loop(loop, schedule, baseline=base.events, checkpoint_dir=tmp_path / "run")


def test_a_retry_of_its_own_that_takes_a_slice_back_is_judged_by_scale_up(
    tmp_path: Path,
) -> None:
    """ "scale-up not judged: the loop took no slice back while training" before, although it
    did: with no elastic_retry its attempt never changes, so a slice active at the start, lost
    and made active again looked as if it had been active all along, and the observer did
    not log the return to a mesh it had seen earlier in that attempt."""
    out = _judged("own_retry_polls_scale_up_ok", DL_BACK, tmp_path)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "scale-up" in out.verdict.judged
    meshes = [e["slices"] for e in out.result.events if e["kind"] == "mesh"]
    assert meshes[-1] == [0, 1, 2, 3] and [0, 2, 3] in meshes, meshes


def test_a_retry_of_its_own_that_claims_a_slice_but_keeps_the_mesh_fails(
    tmp_path: Path,
) -> None:
    """SURVIVED before (the same bug under elastic_retry FAILED)."""
    out = _judged("own_retry_claims_slice_keeps_mesh", DL_BACK, tmp_path)
    assert "scale-up" in out.verdict.failed, out.verdict.summary()
    assert "slice 1 rejoined and was made active in run 1" in out.verdict.violations[0]


def test_a_state_returned_on_a_lost_slice_is_a_verdict_not_a_toolkit_error(
    tmp_path: Path,
) -> None:
    """ "the judge failed: a bug in pathways-chaos" before: reading the returned state, which
    lives on the lost slice, raised DATA_LOSS in the child's toolkit code. The swallowed error
    comes first, with the line of the ``except`` that caught it (the function's first line
    before: the handler's first instructions carry no line)."""
    out = _judged("catch_all_returns_state_on_lost_slice", "data_loss@batch=10:slice=1", tmp_path)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert not out.verdict.judge_errors
    first = out.verdict.violations[0]
    except_line = next(
        n
        for n, text in enumerate((JOBS / "blind7_catch_all_returns_state_on_lost_slice.py")
            .read_text().splitlines(), 1)
        if "except Exception as e:  # BUG" in text
    )  # fmt: skip
    assert (
        f"was caught at {JOBS}/blind7_catch_all_returns_state_on_lost_slice.py:{except_line} in run"
        in first
    ), first
    assert any("returned a final state it cannot read" in v for v in out.verdict.violations)
    assert "completed" in out.verdict.failed  # whether or not final-state can judge


def test_a_main_that_ends_with_sys_exit_0_survives(tmp_path: Path) -> None:
    """FAILED before, in its fault-free run: "the loop crashed: LoopExited: the loop called
    sys.exit(0)". A job's main that exits 0 has succeeded; it returned nothing, so its last
    save is what is compared."""
    out = _judged("ends_with_sys_exit_0_ok", DL_BACK, tmp_path)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "final-state" in out.verdict.judged


def test_a_pause_and_resume_loop_is_told_why_scale_up_had_nothing_to_judge(
    tmp_path: Path,
) -> None:
    """ "the loop took no slice back while training" before, for a loop whose manager waited
    for the lost slice (``repair_after_polls``): it did take it back, at the next attempt."""
    out = play_loop(
        "pathways_chaos.harness.reference.user_loop:pause_resume", DL_BACK, checkpoint_dir=tmp_path
    )
    assert out.verdict.not_judged["scale-up"].startswith(
        "the lost slice 1 was back when a later attempt started"
    ), out.verdict.summary()


def test_a_retry_of_its_own_is_the_reason_restore_latest_gives(tmp_path: Path) -> None:
    """ "no attempt started while a snapshot or checkpoint existed" before, although the loop
    retried (by itself) after snapshots of steps 2 to 8. It still fails, for its crash."""
    out = play_loop(
        f"{JOBS / 'blind7_own_retry_never_waits.py'}:main",
        "data_loss@batch=10:slice=1",
        checkpoint_dir=tmp_path,
    )
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert out.verdict.not_judged["restore-latest"].startswith("the loop retried by itself")


def test_an_unreadable_last_save_of_a_loop_that_returned_nothing_is_not_its_failure() -> None:
    """A loop that returns nothing is compared through its last save, which may be one made
    before a loss, on the lost slice: not the run's result, so not judged, never FAILED."""
    from pathways_chaos.harness.judging.final_values import compare_final_states
    from pathways_chaos.harness.judging.run_outcome import completed

    leaf = {"dtype": "float32", "shape": [2], "unreadable": "JaxRuntimeError: DATA_LOSS: slice 1"}
    base = {"kind": "run_end", "status": "completed", "final_state": {"['w']": {
        "dtype": "float32", "shape": [2], "values": [0.0, 1.0]}}}  # fmt: skip
    saved = {"kind": "run_end", "status": "completed", "final_state": {"['w']": leaf}}
    saved["final_from"] = "the last save"
    returned = {k: v for k, v in saved.items() if k != "final_from"}
    assert completed([saved], [saved], None) == []
    assert isinstance(compare_final_states(saved, base, True), str)
    (said,) = completed([returned], [returned], None)
    assert said.startswith("the loop returned a final state it cannot read: reading leaf ['w']")
