"""The loop search counts a fault only when it fired, and a failure that does not repeat is
reported as flaky with both runs' logs, never dropped as a pass."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.play import play_loop
from pathways_chaos.harness.properties import loop as loop_search
from pathways_chaos.harness.properties.loop import LoopSearch, LoopTarget, SearchStats, fired_kinds

LOOP = Path(__file__).parents[2] / "loops" / "save_paths.py"


@dataclasses.dataclass
class Written:
    """What the search's schedule writer hands ``note``: the entries it drew."""

    entries: list[str]
    scenarios: list[str] = dataclasses.field(default_factory=list)

    def text(self) -> str:
        return ",".join(self.entries)


def test_a_fault_drawn_but_never_fired_is_not_counted(tmp_path):
    drawn = ["slow_save@batch=500:seconds=1", "data_loss@batch=6:slice=1:repair_after_polls=3"]
    out = play_loop(
        f"{LOOP}:main",
        ",".join(drawn),
        options={"path": "snapshotter"},
        topology="2x1",
        checkpoint_dir=tmp_path / "ckpt",
    )
    assert next(e["text"] for e in out.of_kind("fault_unfired")).startswith(
        "fault never fired: slow_save@batch=500"
    )

    stats = SearchStats()
    stats.note("snapshot", Written(drawn), out.events, 1.0)  # type: ignore[arg-type]

    assert fired_kinds(out.events) == ["data_loss"]
    assert dict(stats.fault_kinds) == {"data_loss": 1}
    assert "fault kinds fired: data_loss 1" in stats.summary()


def test_a_fault_not_injected_is_not_counted():
    events = [
        {"kind": "fault", "fault": {"kind": "preemption"}, "raised": "not injected: no handler"},
        {"kind": "fault", "fault": {"kind": "data_loss"}, "touched": ["slice 1: down"]},
        {"kind": "fault_unfired", "text": "fault never fired: slow_save@batch=9:seconds=1"},
    ]
    assert fired_kinds(events) == ["data_loss"]


class _Verdict:
    def __init__(self, ok: bool) -> None:
        self.ok = ok
        self.violations = [] if ok else ["sample ids 3..4 were skipped"]


class _Outcome:
    def __init__(self, ok: bool) -> None:
        self.verdict = _Verdict(ok)
        self.events: list[dict[str, Any]] = []


@pytest.mark.parametrize(
    ("runs", "flaky", "raises"), [((False, True), 1, False), ((False, False), 0, True)]
)
def test_a_failure_that_does_not_repeat_is_reported_flaky_with_both_logs(
    tmp_path, monkeypatch, runs, flaky, raises
):
    # The episodes are stand-ins (the loop's verdicts are what is under test here: the first
    # run fails, the second passes or fails); each writes the log it was given.
    results = iter(runs)
    logs: list[Path] = []

    def episode(
        target: Any,
        schedule: str,
        baseline: Any,
        log_path: Path | None = None,
        yardsticks: Any = None,
    ) -> Any:
        assert log_path is not None
        # the first run may reuse the search's reruns; the run that confirms a failure may not
        assert (yardsticks is None) == log_path.name.endswith("-again.jsonl")
        log_path.write_text(json.dumps({"kind": "episode_start"}) + "\n")
        logs.append(log_path)
        return _Outcome(next(results)), 0.1

    monkeypatch.setattr(loop_search, "play_target", episode)
    search = LoopSearch(LoopTarget(f"{LOOP}:main"), database=None)
    search.log_dir = tmp_path / "logs"
    search.log_dir.mkdir()
    monkeypatch.setattr(search, "baseline", lambda: ([], None))

    writer = Written(["data_loss@batch=6:slice=1"])
    if raises:
        with pytest.raises(loop_search.LoopPropertyFailure):
            search.check("snapshot", writer)  # type: ignore[arg-type]
    else:
        search.check("snapshot", writer)  # type: ignore[arg-type]

    assert len(search.stats.flaky) == flaky and len(logs) == 2
    if flaky:
        record = search.stats.flaky[0]
        assert record["logs"] == [str(p) for p in logs] and all(p.exists() for p in logs)
        assert record["violations"] == ["sample ids 3..4 were skipped"]
        summary = search.stats.summary()
        assert "1 flaky" in summary and str(logs[0]) in summary and str(logs[1]) in summary
    else:
        assert search.stats.failures == 1
