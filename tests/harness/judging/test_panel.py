"""The judge panel: each judge heard on its own, so one that raises (our bug) is "not judged"
under its name and never hides what the others found."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.judging import loop_oracle, oracle
from pathways_chaos.harness.judging.panel import Judge, convene
from pathways_chaos.harness.judging.verdict import JUDGE_FAILED, Verdict


def _raises(history: object) -> list[str]:
    raise KeyError("a bug of ours")


def test_a_judge_that_raises_is_not_judged_and_the_others_findings_stand() -> None:
    judges = [
        Judge[object]("broken", _raises),
        Judge[object]("finds", lambda h: ["step 3 trained twice"]),
        Judge[object]("cannot", lambda h: "no snapshot was saved"),
        Judge[object]("passes", lambda h: []),
    ]
    verdict = convene(judges, object(), Verdict(central=("passes",)))
    assert verdict.violations == ["step 3 trained twice"]
    assert list(verdict.judge_errors) == ["broken"]
    assert verdict.judge_errors["broken"].startswith("KeyError: 'a bug of ours'")
    assert verdict.not_judged == {"cannot": "no snapshot was saved"}
    assert (verdict.judged, verdict.failed) == (["finds", "passes"], ["finds"])
    assert verdict.word == "FAILED"


def test_a_judge_that_raises_alone_makes_the_verdict_not_judged_never_a_pass() -> None:
    verdict = convene([Judge[object]("broken", _raises)], object(), Verdict())
    assert (verdict.word, verdict.exit_code, verdict.ok) == ("NOT JUDGED", 5, False)
    assert f"not judged: broken, because {JUDGE_FAILED}: KeyError" in verdict.summary()


def test_a_central_judge_that_could_not_judge_makes_a_clean_verdict_not_judged() -> None:
    verdict = convene(
        [Judge[object]("central", lambda h: "no fault-free run")],
        object(),
        Verdict(central=("central",)),
    )
    assert verdict.word == "NOT JUDGED"
    assert verdict.central_not_judged == {"central": "no fault-free run"}


def test_a_crash_is_listed_after_the_cause_it_ended() -> None:
    judges = [
        Judge[object]("completed", lambda h: ["the loop crashed"]),
        Judge[object]("errors-handled", lambda h: ["caught and ignored DATA_LOSS"]),
    ]
    verdict = convene(judges, object(), Verdict(), last_if_others=("completed",))
    assert verdict.violations == ["caught and ignored DATA_LOSS", "the loop crashed"]
    alone = convene(judges[:1], object(), Verdict(), last_if_others=("completed",))
    assert alone.violations == ["the loop crashed"]


def test_a_loop_judge_that_raises_leaves_the_other_loop_judges_findings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the panel, one raising loop judge made the whole verdict "not judged"; now a log
    that another judge fails still FAILS, and only the broken judge is not judged."""
    monkeypatch.setattr(loop_oracle.loop_meshes, "judge", _raises)
    verdict = loop_oracle.judge_loop([])  # no run_end: the run did not complete
    assert "meshes" in verdict.judge_errors
    assert "completed" in verdict.failed and verdict.word == "FAILED", verdict.summary()
    assert verdict.central == loop_oracle.CENTRAL_JUDGES


def test_the_trainer_oracle_is_a_panel_of_the_same_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle, "check_meshes", _raises)
    verdict = oracle.check([], replay=False)
    assert list(verdict.judge_errors) == ["mesh-rebuild"]
    assert "exactly-once" in verdict.judged and verdict.word == "FAILED"
    assert isinstance(verdict, Verdict) and verdict.central == oracle.CENTRAL_JUDGES
