"""Collects every episode of the session and writes ``--chaos-report``; registered only then.

Under pytest-xdist the episodes run in the workers and the report is written once, by the
controller: each worker ships a test's episodes with the test's teardown report (an extra
report attribute, which xdist serialises with the report) and writes nothing itself.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Generator
from typing import Any

import pytest

from pathways_chaos.harness.judging.committed import StepRecord
from pathways_chaos.harness.judging.verdict import Verdict
from pathways_chaos.harness.reports.html_report import EpisodeReport, write_report
from pathways_chaos.harness.reports.judge_properties import JUDGE_ERROR

#: The TestReport attribute that carries a worker's episodes to the controller.
REPORT_ATTR = "pathways_chaos_episodes"


class ChaosReportPlugin:
    def __init__(self, path: str) -> None:
        self.path = path
        self.reports: list[EpisodeReport] = []
        self.write_seconds: float | None = None
        self.worker = False

    def pytest_configure(self, config: pytest.Config) -> None:
        self.worker = hasattr(config, "workerinput")  # a pytest-xdist worker

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if self.worker and report.when == "teardown":
            mine = [r for r in self.reports if r.test == item.nodeid]
            if mine:
                self.reports = [r for r in self.reports if r.test != item.nodeid]
                setattr(report, REPORT_ATTR, json.dumps([_to_json(r) for r in mine], default=str))
        return report

    def pytest_chaos_episode_finished(self, node: Any, result: Any, verdict: Any) -> None:
        self.reports.append(EpisodeReport(node.nodeid, "running", result.events, verdict))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        shipped = getattr(report, REPORT_ATTR, None)
        if shipped and not self.worker:
            self.reports += [_from_json(r) for r in json.loads(shipped)]
        if report.when == "call" or (report.when == "setup" and report.failed):
            outcome: str = report.outcome
            if report.failed and any(k == JUDGE_ERROR for k, _ in report.user_properties):
                outcome = "error"  # a judge raised: the toolkit's bug, not the test's failure
            for r in self.reports:
                if r.test == report.nodeid and r.outcome == "running":
                    r.outcome = outcome

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worker:
            return  # the controller writes the one report
        t0 = time.perf_counter()
        write_report(self.path, self.reports)
        self.write_seconds = time.perf_counter() - t0

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(
            f"pathways-chaos report: {self.path} ({len(self.reports)} episodes)"
        )


def _to_json(report: EpisodeReport) -> dict[str, Any]:
    return {
        "test": report.test,
        "outcome": report.outcome,
        "events": report.events,
        "verdict": dataclasses.asdict(report.verdict),
        "logs": report.logs,
    }


def _from_json(data: dict[str, Any]) -> EpisodeReport:
    # What a report reads of any verdict (a loop's has more): the trainer Verdict's fields.
    known = {f.name for f in dataclasses.fields(Verdict)}
    verdict = {k: v for k, v in data["verdict"].items() if k in known}
    verdict["lineage"] = [StepRecord(**{**r, "ids": tuple(r["ids"])}) for r in verdict["lineage"]]
    return EpisodeReport(
        data["test"], data["outcome"], data["events"], Verdict(**verdict), data["logs"]
    )
