"""An error that never goes away (``raise_error``'s ``attempts``): raised again at the start of
each coming attempt, it tells a loop whose retry policy gives up (correct: the run ends with
the policy's ``ElasticRuntimeError``) from one that retries forever (pathwaysutils' default
with no ``retry_policy``), which the observer stops after ``PERSISTENT_ATTEMPTS`` attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.faults.model import FaultSpecError, parse_schedule
from pathways_chaos.faults.slice import PERSISTENT_ATTEMPTS
from pathways_chaos.harness.play import play_loop

LOOP = "pathways_chaos.harness.reference.user_loop:main"
PERSISTENT = f"raise_error@batch=5:code=INTERNAL:attempts={PERSISTENT_ATTEMPTS}"
JOBS = Path(__file__).parents[2] / "loops" / "real_jobs"


def test_attempts_is_a_count_of_one_or_more_in_one_line() -> None:
    (entry,) = parse_schedule("raise_error@batch=5:code=INTERNAL:attempts=3")
    assert "again in each of the next 2 attempts" in entry.fault.describe()
    with pytest.raises(FaultSpecError, match=r"attempts=0: use >= 1"):
        parse_schedule("raise_error@batch=5:code=INTERNAL:attempts=0")
    with pytest.raises(FaultSpecError, match=r"callback_error: attempts=2"):
        parse_schedule("callback_error@callback=1:attempts=2")


def test_an_error_in_three_attempts_is_raised_in_each_and_survived() -> None:
    """Fewer attempts than the loop's policy allows: it is retried each time and the run goes
    on; the repeats are fault events of their own, and none is left unfired."""
    out = play_loop(
        LOOP, "raise_error@batch=5:code=INTERNAL:attempts=3", options={"final_step": 12}
    )
    assert out.result.completed, out.verdict.summary()
    fired = out.of_kind("fault")
    assert [e.get("repeat") for e in fired] == [None, 2, 3]
    assert len(out.of_kind("attempt_start")) == 4
    assert "faults-fired" in out.verdict.judged and not out.result.unfired
    assert "completed" not in out.verdict.failed, out.verdict.summary()


def test_a_retry_policy_that_gives_up_on_a_persistent_error_is_right() -> None:
    out = play_loop(LOOP, PERSISTENT, options={"final_step": 12, "max_attempts": 4})
    assert not out.result.completed
    assert len(out.of_kind("attempt_start")) == 4
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert out.verdict.central == ("completed",) and "completed" in out.verdict.judged


def test_a_loop_that_retries_a_persistent_error_forever_fails_saying_so() -> None:
    """A correct loop under slice losses, with no retry_policy (elastic_retry's default)."""
    loop = f"{JOBS / 'ckpt_manager_ok.py'}:main"
    out = play_loop(loop, PERSISTENT)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert out.verdict.failed[:1] == ["completed"], out.verdict.summary()
    (first, *_) = out.verdict.violations
    assert f"INTERNAL in {PERSISTENT_ATTEMPTS} attempts and would never have stopped" in first
    assert "retry_policy=manager.ElasticRetryLimit" in first


def gives_up_quietly(**options: Any) -> Any:
    """The sample loop, its retry policy's ``ElasticRuntimeError`` caught: the job "succeeds"."""
    from pathwaysutils.elastic.manager import ElasticRuntimeError

    from pathways_chaos.harness.reference import user_loop

    try:
        return user_loop.train(**options)
    except ElasticRuntimeError:
        return None


def test_a_loop_that_hides_its_retry_policy_giving_up_fails() -> None:
    out = play_loop(gives_up_quietly, PERSISTENT, options={"final_step": 12, "max_attempts": 3})
    assert out.result.completed
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert "raised INTERNAL in every attempt" in out.verdict.violations[0]
