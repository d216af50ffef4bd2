"""Collects every episode of the session and writes ``--chaos-report``; registered only then."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pathways_chaos.harness.reports.html_report import EpisodeReport, write_report


class ChaosReportPlugin:
    def __init__(self, path: str) -> None:
        self.path = path
        self.reports: list[EpisodeReport] = []
        self.write_seconds: float | None = None

    def pytest_chaos_episode_finished(self, node: Any, result: Any, verdict: Any) -> None:
        self.reports.append(EpisodeReport(node.nodeid, "running", result.events, verdict))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.failed):
            for r in self.reports:
                if r.test == report.nodeid and r.outcome == "running":
                    r.outcome = "passed" if report.passed else "failed"

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        t0 = time.perf_counter()
        write_report(self.path, self.reports)
        self.write_seconds = time.perf_counter() - t0

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(
            f"pathways-chaos report: {self.path} ({len(self.reports)} episodes)"
        )
