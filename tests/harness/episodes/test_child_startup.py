"""The loop's wall deadline counts the loop's time, not the toolkit's start-up: a spawned child
importing JAX on a busy CI machine is ours, and a child that never gets ready is our failure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pathways_chaos.harness.engine.deadline import Deadline
from pathways_chaos.harness.episodes import child_watch, fork_server
from pathways_chaos.harness.play import play_loop


def _naps(seconds: float = 0.0, **_: object) -> None:
    """Trains nothing: sleeps ``seconds`` of wall time, then returns (a failed verdict)."""
    time.sleep(seconds)


def _run_error(events: list[dict[str, object]]) -> str:
    ends = [e for e in events if e["kind"] == "run_end"]
    return str(ends[-1].get("error") or "") if ends else ""


def test_a_spawned_childs_start_up_is_not_the_loops_wall_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fork_server.START_VAR, "spawn")  # importing JAX alone takes > 1 s
    out = play_loop(_naps, deadline=Deadline(wall_s=1.0), checkpoint_dir=tmp_path)
    assert "wall-time deadline" not in _run_error(out.result.events), _run_error(out.result.events)
    assert any(e["kind"] == "child_ready" for e in out.result.events)


def test_the_loops_own_time_still_meets_the_wall_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fork_server.START_VAR, "spawn")
    out = play_loop(
        _naps, options={"seconds": 30.0}, deadline=Deadline(wall_s=1.0), checkpoint_dir=tmp_path
    )
    error = _run_error(out.result.events)
    assert "wall-time deadline of 1 s" in error and "_naps" in error, error


def test_a_child_never_ready_is_the_toolkits_failure_not_the_loops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fork_server.START_VAR, "spawn")
    previous = child_watch.set_default_limits(child_watch.ChildLimits(startup_s=0.2))
    try:
        out = play_loop(_naps, checkpoint_dir=tmp_path)
    finally:
        child_watch.set_default_limits(previous)
    assert isinstance(out.result.error, child_watch.ToolkitFailed), out.result.error
    assert "not ready to load the loop" in str(out.result.error)
    assert not [e for e in out.result.events if e["kind"] == "run_end"]
