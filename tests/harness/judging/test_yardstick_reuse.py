"""A search keeps the clean reruns and restore probes it made (``YardstickRuns``): a later
schedule that asks for the same run by name and schedule is judged against the kept one, and
a run that did not complete is made again. Reuse must not change a verdict either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pathways_chaos.faults.model import Schedule, parse_schedule
from pathways_chaos.harness.judging.yardsticks import YardstickRuns
from pathways_chaos.harness.play import play_loop

LOOPS = Path(__file__).parents[2] / "loops"
CORRECT = f"{Path(__file__).parent / 'loop_catalogue' / 'correct' / 'trainer_class.py'}:main"
BROKEN = f"{LOOPS / 'lr_counts_thrown_away_batches.py'}:main"


def test_a_run_is_kept_by_name_and_schedule_and_one_that_did_not_complete_is_made_again():
    asked: list[tuple[str, str]] = []
    answers: dict[str, Any] = {"clean data_loss@save=2:slice=1": None}

    def rerun(plan: Schedule, where: Path | None, name: str) -> tuple[Any, str]:
        key = f"{name} {plan.to_text()}"
        asked.append((name, plan.to_text()))
        events = answers.get(key, [{"kind": "run_end", "for": key}])
        return events, "" if events is not None else "did not complete"

    kept = YardstickRuns()
    through = kept.rerun_through(rerun)
    one = parse_schedule("data_loss@save=3:slice=1")
    first = through(one, None, "clean")
    assert through(one, Path("/elsewhere"), "clean") == first  # the folder is not the key
    assert through(one, None, "probe")[0] != first[0]  # the name is
    assert through(parse_schedule("data_loss@save=3:slice=2"), None, "clean")[0] != first[0]
    failed = parse_schedule("data_loss@save=2:slice=1")
    assert through(failed, None, "clean") == (None, "did not complete")
    assert through(failed, None, "clean") == (None, "did not complete")
    assert (kept.made, kept.reused) == (5, 1), (kept.made, kept.reused)
    assert asked.count(("clean", "data_loss@save=2:slice=1")) == 2  # made again, never kept


def _two_schedules_sharing_a_probe(loop: str, tmp_path: Path) -> tuple[list[Any], YardstickRuns]:
    baseline = play_loop(loop, checkpoint_dir=tmp_path / "c0")
    kept = YardstickRuns()
    outs = [
        play_loop(
            loop,
            f"data_loss@batch=10:slice={s}:repair_after_polls=3",
            baseline=baseline.events,
            checkpoint_dir=tmp_path / f"c{s}",
            yardsticks=kept,
        )
        for s in (1, 2)
    ]
    return outs, kept


def test_a_correct_loop_judged_against_a_kept_probe_still_survives_judged(tmp_path: Path):
    outs, kept = _two_schedules_sharing_a_probe(CORRECT, tmp_path)
    assert kept.reused >= 1, kept.runs.keys()  # the second schedule used the first's probe
    for out in outs:
        assert out.verdict.ok, out.verdict.summary()
        assert "final-state" in out.verdict.judged, out.verdict.summary()


def test_a_broken_loop_judged_against_a_kept_probe_still_fails(tmp_path: Path):
    """A learning rate that counts thrown-away batches: each schedule throws work away, and the
    kept restore probe does not hide it."""
    outs, kept = _two_schedules_sharing_a_probe(BROKEN, tmp_path)
    assert kept.reused >= 1, kept.runs.keys()
    for out in outs:
        assert "final-state" in out.verdict.failed, out.verdict.summary()
