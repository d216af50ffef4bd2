"""A user's loop episode goes through every report (--chaos-report with --chaos-loop): the
observer's events lack the reference trainer's fields (``recompile``, ``active_slices`` at
run start), and a report that read them crashed at the session's end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pathways_chaos.harness.reports import goodput, report
from pathways_chaos.harness.reports.html_report import EpisodeReport, write_report

SCHEDULE = "data_loss@batch=4:slice=1:repair_after_polls=2"


def test_a_loop_episode_renders_in_every_report(chaos: Any, tmp_path: Path) -> None:
    outcome = chaos.run_loop("pathways_chaos.harness.reference.user_loop:main", SCHEDULE)
    events = outcome.result.events
    assert any(e["kind"] == "mesh" for e in events)
    assert not any("recompile" in e for e in events if e["kind"] == "mesh")  # the case at hand

    figures = goodput.measure(events)
    assert figures.recompiles == 0  # unknown for a loop: not counted, and said so below
    lines = report.timeline(events)
    assert any("mesh" in line and "compiled" not in line for line in lines)
    page = write_report(
        tmp_path / "report.html",
        [EpisodeReport("test_loop", "passed", list(events), outcome.verdict)],
    ).read_text()
    assert "test_loop" in page and "<svg" in page
