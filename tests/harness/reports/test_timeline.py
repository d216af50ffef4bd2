"""The timeline's times are seconds into the episode, on either clock (hostile tester 13:
``demo --clock real`` printed ``1796634844.7s``, the wall clock's epoch seconds)."""

from __future__ import annotations

from pathways_chaos.harness.reports.report import timeline


def _attempt(t: float, attempt: int) -> dict[str, object]:
    return {"kind": "attempt_start", "t": t, "run": 1, "attempt": attempt, "active_slices": [0]}


def test_a_real_clock_log_is_timed_from_its_first_event() -> None:
    epoch = 1796634844.7
    events = [{"kind": "log_start", "t": epoch}, _attempt(epoch, 1), _attempt(epoch + 2.5, 2)]
    lines = timeline(events)
    assert [line.split("s ")[0].strip() for line in lines] == ["0.0", "2.5"], lines


def test_a_fake_clock_log_keeps_its_times() -> None:
    lines = timeline([{"kind": "log_start", "t": 0.0}, _attempt(3.0, 1)])
    assert lines[0].lstrip().startswith("3.0s"), lines


def test_the_events_a_parent_adds_to_a_loops_log_are_on_its_fake_clock() -> None:
    """``child_end`` and ``log_foreign_lines``, written by the watching process after the child,
    carried the wall clock's epoch in a fake-clock log."""
    from pathways_chaos.harness.play import play_loop

    out = play_loop("pathways_chaos.harness.reference.user_loop:main")
    ends = [e for e in out.events if e["kind"] == "child_end"]
    assert ends and all(e["t"] < 10_000 for e in out.events), [(e["kind"], e["t"]) for e in ends]
