"""The loop's wall deadline counts the loop's time, not the toolkit's start-up: a spawned child
importing JAX on a busy CI machine is ours, and a child that never gets ready is our failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pathways_chaos.harness.engine.deadline import Deadline
from pathways_chaos.harness.episodes import child_limits, child_watch, fork_server
from pathways_chaos.harness.play import play_loop

NAPS = f"{Path(__file__).parents[2] / 'loops' / 'naps.py'}:naps"


@pytest.fixture
def slow_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned children whose interpreter start-up takes 5 s more (a ``sitecustomize`` that
    sleeps, as a loaded CI runner would): the toolkit's time, before the ready marker."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import time\ntime.sleep(5)\n")
    monkeypatch.setenv(fork_server.START_VAR, "spawn")
    monkeypatch.setenv("PYTHONPATH", str(site))


def _run_error(events: list[dict[str, object]]) -> str:
    ends = [e for e in events if e["kind"] == "run_end"]
    return str(ends[-1].get("error") or "") if ends else ""


@pytest.mark.usefixtures("slow_start")
def test_a_slow_start_up_is_not_the_loops_wall_time(tmp_path: Path) -> None:
    out = play_loop(NAPS, deadline=Deadline(wall_s=4.0), checkpoint_dir=tmp_path)
    error = _run_error(out.result.events)
    assert "wall-time deadline" not in error, error
    assert any(e["kind"] == "child_ready" for e in out.result.events)


@pytest.mark.usefixtures("slow_start")
def test_the_loops_own_time_still_meets_the_wall_deadline(tmp_path: Path) -> None:
    out = play_loop(
        NAPS, options={"seconds": 60.0}, deadline=Deadline(wall_s=4.0), checkpoint_dir=tmp_path
    )
    error = _run_error(out.result.events)
    assert "wall-time deadline of 4 s" in error and "naps.py" in error, error


@pytest.mark.usefixtures("slow_start")
def test_a_child_never_ready_is_the_toolkits_failure_not_the_loops(tmp_path: Path) -> None:
    """Its start-up outlasts the 0.2 s allowed and the 3 s the parent then waits for its stacks
    (a plain spawned child, 3.4 s start to end here, sometimes finished its run in that wait)."""
    previous = child_limits.set_default_limits(child_limits.ChildLimits(startup_s=0.2))
    log = tmp_path / "episode.jsonl"
    try:  # raised, never judged: a verdict would read "the loop never finished a run"
        with pytest.raises(child_watch.ToolkitFailed, match="not ready to load the loop"):
            play_loop(NAPS, checkpoint_dir=tmp_path, log_path=log)
    finally:
        child_limits.set_default_limits(previous)
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert "toolkit_error" in kinds and "run_end" not in kinds, kinds


def test_a_setup_failure_in_the_child_is_its_one_line_not_the_loops_nor_ours() -> None:
    """A child that could not set the episode up for the setup's reason (a --cluster JobSet
    not running, ``ChaosConfigError``) is ``SetupFailed``, said as its message; any other
    exception of the child's is ours (``ToolkitFailed``, with its type)."""
    from pathways_chaos.harness.engine.recorder import Recorder
    from pathways_chaos.harness.episodes.child import toolkit_error
    from pathways_chaos.harness.errors import ChaosConfigError

    def logged(error: BaseException) -> list[dict[str, object]]:
        recorder = Recorder(None)
        toolkit_error(recorder, 1, error)
        return list(recorder.events)

    unhealthy = "the episode needs a healthy JobSet, but slice 1 has 0 of 2 Pods running"
    setup = child_watch.error_of(logged(ChaosConfigError(unhealthy)))
    assert type(setup) is child_watch.SetupFailed and str(setup) == unhealthy
    ours = child_watch.error_of(logged(KeyError("slices")))
    assert type(ours) is child_watch.ToolkitFailed and str(ours) == "KeyError: 'slices'"
