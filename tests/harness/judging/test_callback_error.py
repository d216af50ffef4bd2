"""``callback_error@callback=N`` on a user's loop: the observer sees the calls of the
``on_elastic_event_callback`` it passes ``elastic_retry``, and the error is armed for the Nth
call, raised by the callback's next use of a device, as a callback that touches a lost slice
meets it. pathwaysutils runs the callback inside its error handler, so what the callback lets
out ends the retries; a callback that catches it is right. An error the callback never met is
taken back when the call ends (it must not reach the next attempt) and said unfired."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.play import play_loop
from pathways_chaos.harness.reference.trainer import touch_a_device

LOOP = "pathways_chaos.harness.reference.user_loop:main"
SCHEDULE = "raise_error@batch=5:code=INTERNAL,callback_error@callback=1"


def catching_callback() -> None:
    """Logs a metric (a device computation); a slice-down error met there is not its own."""
    from jax.errors import JaxRuntimeError
    from pathwaysutils.elastic import elastic

    try:
        touch_a_device()
    except JaxRuntimeError as error:
        if not elastic.is_error_due_to_slice_down(error, log_traceback=False):
            raise


def escaping_callback() -> None:
    touch_a_device()


def idle_callback() -> None:
    """Touches no device: nothing to meet."""


def _play(callback: Any) -> Any:
    options = {"final_step": 12, "on_elastic_event": callback}
    return play_loop(LOOP, SCHEDULE, options=options)


def test_a_callback_that_catches_what_it_meets_is_right() -> None:
    out = _play(catching_callback)
    assert out.result.completed, out.verdict.summary()
    assert "completed" in out.verdict.judged and "faults-fired" in out.verdict.judged
    assert not out.verdict.failed, out.verdict.summary()
    assert [e["kind"] for e in out.events].count("elastic_event") == 1


def test_a_callback_that_lets_the_error_out_fails_naming_the_callback() -> None:
    out = _play(escaping_callback)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    (first, *_) = out.verdict.violations
    assert "injected error in the elastic-event callback" in first
    assert "in touch_a_device" in first  # where it was raised, not the error it handled
    assert "on_elastic_event_callback let it out" in first


def test_a_callback_that_touches_no_device_leaves_the_fault_unjudged() -> None:
    out = _play(idle_callback)
    assert out.result.completed
    why = out.verdict.not_judged["faults-fired"]
    assert "used no device in that call" in why
    # taken back: the next attempt did not meet it
    assert len(out.of_kind("attempt_start")) == 2


def test_a_loop_with_no_callback_is_told_how_to_give_one() -> None:
    out = play_loop(LOOP, SCHEDULE, options={"final_step": 12})
    assert "on_elastic_event_callback was called 0 times" in out.verdict.not_judged["faults-fired"]
