"""A twelfth blind tester's loops (``tests/loops/real_jobs/blind12/``, kept as written), on the
two doors of this session: an error in the loop's elastic-event callback
(``callback_error@callback=N``) and an error raised again in attempt after attempt
(``raise_error``'s ``attempts``). Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.play import Outcome, play_loop

JOBS = Path(__file__).parents[2] / "loops" / "real_jobs" / "blind12"
LOSS_THEN_CALLBACK = "data_loss@batch=5:slice=1,callback_error@callback=1"
CALLBACK = "raise_error@batch=5:code=INTERNAL,callback_error@callback=1"


def _play(name: str, schedule: str, **options: Any) -> Outcome:
    return play_loop(f"{JOBS / name}:main", schedule, options=options or None)


def test_a_callback_that_meets_a_lost_slice_and_the_armed_error_survives_every_time() -> None:
    """The callback's guarded ``float(loss)`` reads an array on the lost slice: which error it
    met depended on which device was looked at first, so 2 runs in 6 were NOT JUDGED ("used no
    device"). The armed error now comes first on every device."""
    for _ in range(3):
        out = _play("ok_plain.py", LOSS_THEN_CALLBACK)
        assert not out.verdict.failed, out.verdict.summary()
        assert "faults-fired" in out.verdict.judged, out.verdict.summary()


def test_a_callback_given_by_place_is_watched_too() -> None:
    """It was not seen ("called 0 times"), and a broken loop was NOT JUDGED."""
    out = _play("cb_positional.py", CALLBACK)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert "on_elastic_event_callback let it out" in out.verdict.violations[0]


def test_a_retry_policy_that_gives_up_while_the_error_goes_on_is_right() -> None:
    """ElasticRetryLimit(5) against an error in 6 (or 39) attempts gives up at attempt 5 with
    the error still coming, as it does against 40; it was "the loop crashed" below 40."""
    out = _play("ok_plain.py", "raise_error@batch=5:code=INTERNAL:attempts=6")
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert out.verdict.central == ("completed",)


def test_a_policy_that_allows_more_attempts_than_the_guard_is_not_judged() -> None:
    """It was told to "give elastic_retry a retry_policy", which it had."""
    out = _play("p_huge_limit.py", "raise_error@batch=5:code=INTERNAL:attempts=40", limit=41)
    assert out.verdict.word == "NOT JUDGED", out.verdict.summary()
    why = out.verdict.not_judged["completed"]
    assert "ElasticRetryLimit(max_attempts=41)" in why and "not judged" in why


def test_a_loop_that_calls_elastic_retry_again_after_it_gave_up_is_told_that() -> None:
    out = _play("p_outer_retry.py", "raise_error@batch=5:code=INTERNAL:attempts=40")
    assert out.verdict.word == "FAILED", out.verdict.summary()
    first = out.verdict.violations[0]
    assert "ElasticRetryLimit(max_attempts=3)) gave up, and the loop called" in first
    assert "Pass retry_policy" not in first


def test_a_loop_that_retries_by_itself_is_not_judged_on_an_error_it_met_once() -> None:
    """With no elastic_retry attempts the error cannot be raised again: it was FAILED "raised
    INTERNAL in every attempt" though the log shows it raised once."""
    out = _play("p_handrolled.py", "raise_error@batch=5:code=INTERNAL:attempts=40")
    assert "completed" not in out.verdict.failed, out.verdict.summary()
    assert "raised once" in out.verdict.not_judged["faults-fired"]


@pytest.mark.parametrize(
    ("schedule", "says"),
    [
        ("callback_error@batch=3", "write callback_error@callback=N"),
        ("callback_error@callback=0", "the first is callback=1"),
        ("raise_error@attempt=0:code=INTERNAL", "the first is attempt=1"),
        ("raise_error@batch=5:code=INVALID_ARGUMENT:attempts=40", "drop attempts"),
        ("raise_error@batch=5:code=INTERNAL:attempts=-1", "attempts=-1: use >= 1"),
    ],
)
def test_what_cannot_happen_is_refused_in_one_line(schedule: str, says: str) -> None:
    """Each ran a whole episode, or fired somewhere else, or said "use >= 0" for a count from 1."""
    from pathways_chaos.faults.model import FaultSpecError, parse_schedule

    with pytest.raises(FaultSpecError) as refused:
        parse_schedule(schedule)
    assert says in str(refused.value) and "\n" not in str(refused.value)
