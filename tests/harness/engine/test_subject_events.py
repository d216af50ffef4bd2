"""What a subject reports of itself (``engine/subject_events.py``): into the episode's log
while an episode watches, rebuilt as its own history, and only ever read, never trusted."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.engine.subject_events import reporter, reporting, subject_history


def test_reports_go_into_the_watching_log_in_the_observed_run_and_stop_after() -> None:
    log = Recorder()
    run = [1]
    own = Recorder()
    assert reporter() is None  # outside an episode: the subject keeps its events
    with reporting(log, lambda: run[0]):
        report = reporter()
        assert report is not None
        own.add_listener(report)
        own.emit("step", run=1, attempt=1, step=0, ids=[0, 1])
        run[0] = 2
        own.emit("step", run=1, attempt=1, step=1, ids=[2, 3])
    assert reporter() is None
    own.emit("step", run=1, attempt=1, step=2, ids=[4, 5])  # after the episode: not reported
    subject = [e for e in log.events if e["kind"] == "subject"]
    assert [(e["run"], e["event"]["step"]) for e in subject] == [(1, 0), (2, 1)]
    assert not {"seq", "t", "wall"} & set(subject[0]["event"])  # its recorder's, not its report


def _log(*events: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"seq": n, "t": 0.0, "wall": 0.0, **e} for n, e in enumerate(events)]


def test_its_history_keeps_the_faults_in_place_and_the_episode_run() -> None:
    events = _log(
        {"kind": "run_start", "run": 1},
        {"kind": "subject", "run": 1, "event": {"kind": "step", "run": 1, "step": 0}},
        {"kind": "fault", "fault": {"kind": "data_loss", "slice": 1}},
        {"kind": "batch", "run": 1, "attempt": 1, "batch": 2},
        {"kind": "subject", "run": 2, "event": {"kind": "step", "run": 1, "step": 1}},
    )
    history = subject_history(events)
    assert [(e["kind"], e.get("run")) for e in history] == [
        ("step", 1),
        ("fault", None),
        ("step", 2),  # a later run's process: its trainer numbers it 1 again
    ]
    assert [e["seq"] for e in history] == [0, 1, 2]


def test_a_report_that_is_not_an_event_is_not_read() -> None:
    events = _log(
        {"kind": "subject", "run": 1, "event": "step"},
        {"kind": "subject", "run": 1, "event": {"step": 0}},
        {"kind": "subject", "run": 1, "event": {"kind": 7}},
        {"kind": "fault", "fault": {"kind": "data_loss", "slice": 1}},
    )
    assert subject_history(events) == []  # faults alone are not a subject's history
