"""What a loop returns that is not a state (hostile tester 13: ``return object()`` was told
"the loop returned no state", and its last save, which a ``None`` return gets compared, was not)."""

from __future__ import annotations

from pathlib import Path

from pathways_chaos.harness.play import play_loop


def _loop(tmp_path: Path, body: str) -> str:
    path = tmp_path / "returns_object.py"
    path.write_text(body)
    return f"{path}:main"


def test_a_loop_returning_an_object_without_arrays_is_told_what_it_returned(tmp_path: Path):
    loop = _loop(tmp_path, "def main(**kw):\n    return object()\n")
    out = play_loop(loop, baseline=play_loop(loop).events)
    why = out.verdict.not_judged["final-state"]
    assert "a value with no array in it (object)" in why, why


def test_a_loop_returning_metrics_has_its_last_save_compared(tmp_path: Path):
    loop = _loop(
        tmp_path,
        "from pathways_chaos.harness.reference import user_loop\n"
        "def main(**kw):\n"
        "    user_loop.main(**kw)\n"
        "    return {'loss': 0.25, 'note': object()}\n",
    )
    schedule = "data_loss@batch=6:slice=1:repair_after_polls=2"
    out = play_loop(loop, schedule, baseline=play_loop(loop).events)
    assert "final-state" in out.verdict.judged, out.verdict.summary()
    end = next(e for e in reversed(out.events) if e["kind"] == "run_end")
    assert end["final_from"] == "the last save" and end["returned"] == "dict"
