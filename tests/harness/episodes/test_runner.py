"""The one episode runner, driven by a toy workload (no JAX, no trainer): what every episode
kind shares is done once, in this order, whatever the workload does."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pathways_chaos.faults.model import Schedule
from pathways_chaos.harness.engine.clock import FakeClock
from pathways_chaos.harness.engine.deadline import EpisodeDeadlineExceeded
from pathways_chaos.harness.engine.recorder import Event, Recorder
from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.episodes.runner import EpisodeRunner


class Toy:
    """Runs return the next of ``outcomes`` ("again", "done", or an exception to raise)."""

    caught: ClassVar[tuple[type[BaseException], ...]] = (ValueError,)
    deadline_ends_episode: ClassVar[bool] = True
    subject = "toy"

    def __init__(self, outcomes: list[Any], *, refuse: Exception | None = None) -> None:
        self.outcomes = outcomes
        self.refusal = refuse
        self.calls: list[str] = []
        self.recorder: Recorder | None = None

    def refuse(self) -> None:
        self.calls.append("refuse")
        if self.refusal is not None:
            raise self.refusal

    def start_fields(self) -> dict[str, Any]:
        return {"toy": 1}

    def begin(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.calls.append("begin")

    def enter(self, stack: contextlib.ExitStack) -> None:
        stack.callback(self.calls.append, "exit")
        self.calls.append("enter")

    def start(self, index: int) -> Callable[[], str]:
        self.calls.append(f"start {index}")
        outcome = self.outcomes.pop(0)

        def run() -> str:
            assert self.recorder is not None
            self.recorder.emit("run", index=index)
            if isinstance(outcome, BaseException):
                raise outcome
            return str(outcome)

        return run

    def failed(self, error: BaseException) -> BaseException:
        self.calls.append(f"failed {type(error).__name__}")
        return error

    def after_run(self) -> None:
        self.calls.append("after")

    def again(self, result: str) -> bool:
        return result == "again"

    def close(self, recorder: Recorder) -> list[str]:
        recorder.emit("closing")
        return ["never"]


def parts(result: EpisodeResult) -> tuple[Any, ...]:
    assert result.subject == "toy"  # the runner names what ran, from the workload
    return result.events, result.results, result.error, result.unfired, result.log_path


def cluster() -> Any:
    return types.SimpleNamespace(clock=FakeClock(), topology=SliceTopology(4, 2))


def kinds(events: list[Event]) -> list[str]:
    return [e["kind"] for e in events]


def test_runs_again_while_asked_up_to_max_runs_and_logs_start_and_end(tmp_path: Path) -> None:
    seen: list[str] = []
    toy = Toy(["again", "again", "again"])
    runner = EpisodeRunner(
        toy,
        cluster(),
        Schedule(),
        log_path=tmp_path / "log.jsonl",
        max_runs=2,
        listeners=[lambda e: seen.append(e["kind"])],
    )
    events, results, error, unfired, path = parts(runner.run())
    assert results == ["again", "again"] and error is None and unfired == ["never"]
    # The recorder's own first line comes before the listeners are added.
    assert kinds(events) == ["log_start", "episode_start", "run", "run", "closing", "episode_end"]
    assert seen == kinds(events)[1:]
    start = events[1]
    assert (start["topology"], start["schedule"], start["clock"], start["toy"]) == (
        str(SliceTopology(4, 2)),
        "",
        "fake",
        1,
    )
    assert events[-1]["error"] is None
    assert path is not None and path.read_text().count("\n") == 6
    assert toy.calls == ["refuse", "begin", "enter", "start 1", "after", "start 2", "after", "exit"]


def test_a_caught_error_ends_the_runs_and_is_logged() -> None:
    toy = Toy(["again", ValueError("boom"), "done"])
    events, results, error, _, _ = parts(
        EpisodeRunner(toy, cluster(), Schedule(), max_runs=3).run()
    )
    assert results == ["again"] and isinstance(error, ValueError)
    assert events[-1]["error"] == "ValueError: boom"
    assert toy.calls[-4:] == ["start 2", "failed ValueError", "after", "exit"]


def test_an_uncaught_error_propagates_after_the_contexts_close() -> None:
    toy = Toy([KeyError("k")])
    with pytest.raises(KeyError):
        EpisodeRunner(toy, cluster(), Schedule()).run()
    assert toy.calls[-2:] == ["after", "exit"]


def test_a_refusal_comes_before_the_log() -> None:
    toy = Toy([], refuse=ValueError("misfit"))
    seen: list[Event] = []
    with pytest.raises(ValueError, match="misfit"):
        EpisodeRunner(toy, cluster(), Schedule(), listeners=[seen.append]).run()
    assert seen == [] and toy.calls == ["refuse"]


def test_a_deadline_ends_the_episode_only_if_the_workload_says_so() -> None:
    toy = Toy([EpisodeDeadlineExceeded("late")])
    events, results, error, _, _ = parts(EpisodeRunner(toy, cluster(), Schedule()).run())
    assert isinstance(error, EpisodeDeadlineExceeded) and results == []
    assert kinds(events)[-2:] == ["closing", "episode_end"]

    class Strict(Toy):
        deadline_ends_episode: ClassVar[bool] = False

    with pytest.raises(EpisodeDeadlineExceeded):
        EpisodeRunner(Strict([EpisodeDeadlineExceeded("late")]), cluster(), Schedule()).run()


def test_a_run_that_does_not_ask_again_is_the_last() -> None:
    toy = Toy(["done", "again"])
    _, results, error, _, _ = parts(EpisodeRunner(toy, cluster(), Schedule(), max_runs=3).run())
    assert results == ["done"] and error is None and toy.outcomes == ["again"]
