"""An eighth blind tester's flax/optax loops were all judged right; two hints misled. A step
counter one short because a batch was skipped, or reset by a rebuilt optimizer at a scale-up,
was said to be "re-initialised or not restored (is it in the snapshot?)" alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pathways_chaos.harness.judging.final_values import compare_final_states
from pathways_chaos.harness.play import Outcome, play_loop


def _end(count: int) -> dict[str, Any]:
    leaf = {"dtype": "int32", "shape": [], "values": count}
    return {"kind": "run_end", "status": "completed", "final_state": {"['opt'].count": leaf}}


def test_a_counter_behind_names_every_way_it_falls_behind() -> None:
    (said,) = compare_final_states(_end(23), _end(24), True)
    assert "an integer counter at 23 where the fault-free run has 24" in said
    assert "rebuilt, at a restore or a scale-up" in said and "updates were skipped" in said


def test_a_counter_ahead_says_it_counted_thrown_away_work() -> None:
    (said,) = compare_final_states(_end(27), _end(24), True)
    assert "counted work a failure threw away" in said and "skipped" not in said


# -- the flax loops themselves, kept as written (tests/loops/real_jobs/blind8_*.py) ----------
def _judged(name: str, tmp_path: Path) -> Outcome:
    loop = f"{Path(__file__).parents[2] / 'loops' / 'real_jobs' / f'blind8_{name}.py'}:main"
    base = play_loop(loop, checkpoint_dir=tmp_path / "fault-free", options={"steps": 24})
    return play_loop(
        loop,
        "data_loss@batch=10:slice=1:repair_after_polls=3",
        baseline=base.events,
        checkpoint_dir=tmp_path / "run",
        options={"steps": 24},
    )


def test_flax_loops_written_by_a_team_survive(tmp_path: Path) -> None:
    for name in ("flax_nnx_ok", "flax_linen_train_state_ok"):
        out = _judged(name, tmp_path / name)
        assert out.verdict.word == "SURVIVED", (name, out.verdict.summary())
        assert "final-state" in out.verdict.judged, name


def test_a_flax_loop_that_never_restores_its_iterator_fails_naming_it(tmp_path: Path) -> None:
    out = _judged("flax_nnx_iterator_not_restored", tmp_path)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert "the data iterator was not restored" in out.verdict.violations[0]
