"""What each chaos test's verdict judged, said where a person reads test results.

Per test (under ``-v`` or ``-rA``) one short line: the judges that passed, failed, could not
judge (with why) and raised; for the session one count, so a passing test is never mistaken
for a judged one ("10 passed, of which 3 with exactly-once not judged"). Read from the reports'
user properties (``chaos_judged`` and the rest, written by ``fixtures.chaos.record_judges``),
which pytest-xdist carries to the controller and JUnit writes as properties.

A test whose judge raised (a bug in pathways-chaos) is reported as an ERROR, not a failure of
the code under test: ``judge_error_status``.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from pathways_chaos.harness.reports.judge_properties import (
    JUDGE_ERROR,
    JUDGED,
    JUDGES_FAILED,
    NOT_JUDGED,
    NOT_JUDGED_NAMES,
)

#: How long one not-judged reason may be on a test's line (the full one is in JUnit and HTML).
REASON_CHARS = 90


def _properties(report: Any) -> dict[str, Any]:
    return dict(getattr(report, "user_properties", ()) or ())


def _names(text: object) -> list[str]:
    return [name for name in str(text or "").split(", ") if name]


def _reasons(props: dict[str, Any]) -> dict[str, str]:
    """``chaos_not_judged`` ("name: why; name: why"), split at the names it lists."""
    text = str(props.get(NOT_JUDGED, "") or "")
    names = _names(props.get(NOT_JUDGED_NAMES))
    found: dict[str, str] = {}
    for i, name in enumerate(names):
        start = text.find(f"{name}: ")
        if start < 0:
            continue
        end = text.find(f"; {names[i + 1]}: ", start) if i + 1 < len(names) else len(text)
        found[name] = text[start + len(name) + 2 : end if end >= 0 else len(text)]
    return found


def judge_error_status(
    report: pytest.TestReport,
) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """A test whose judge raised is an ERROR (red, counted with errors), never a failure."""
    if report.when == "call" and report.failed and JUDGE_ERROR in _properties(report):
        return "error", "E", ("ERROR", {"red": True})
    return None


def verdict_line(status: str, nodeid: str, props: dict[str, Any]) -> str:
    """``PASSED t.py::test: judges passed a, b; failed c; not judged d (why)``."""
    failed = _names(props.get(JUDGES_FAILED))
    passed = [name for name in _names(props.get(JUDGED)) if name not in failed]
    error = str(props.get(JUDGE_ERROR) or "")
    parts = [] if error and not passed else [f"judges passed {', '.join(passed) or 'none'}"]
    if failed:
        parts.append(f"failed {', '.join(failed)}")
    reasons = _reasons(props)
    if reasons:
        parts.append(
            "not judged " + ", ".join(f"{name} ({_cut(why)})" for name, why in reasons.items())
        )
    if error:
        parts.append(f"the judge failed (a bug in pathways-chaos): {_cut(error)}")
    return f"{status.upper()} {nodeid}: " + "; ".join(parts)


def summary_count(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """``10 passed, of which 3 with exactly-once not judged; 1 not judged (skipped); ...``."""
    passed = [props for status, props in rows if status == "passed"]
    counts = collections.Counter(
        name for props in passed for name in _names(props.get(NOT_JUDGED_NAMES))
    )
    text = f"{len(passed)} passed"
    if counts:
        text += ", of which " + ", ".join(
            f"{n} with {name} not judged" for name, n in counts.most_common()
        )
    elif passed:
        text += ", every judge judged"
    skipped = sum(1 for status, _ in rows if status == "skipped")
    failed = [props for status, props in rows if status == "failed"]
    by_judge = sum(  # a verdict with findings (a trainer's may name no judge for some)
        1 for props in failed if _names(props.get(JUDGES_FAILED)) or props.get("chaos_violations")
    )
    errors = sum(1 for status, props in rows if status == "error" and props.get(JUDGE_ERROR))
    text += f"; {by_judge} failed by a judge" if by_judge else ""
    if len(failed) > by_judge:  # every judge passed, and the test's own assertion did not
        text += f"; {len(failed) - by_judge} failed by the test's own assertions"
    text += f"; {skipped} not judged (skipped)" if skipped else ""
    text += f"; {errors} with a judge that failed (a bug in pathways-chaos)" if errors else ""
    return text


def write_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = []
    for status in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(status, []):
            props = _properties(report)
            if (JUDGED in props or JUDGE_ERROR in props) and getattr(report, "when", "") == "call":
                rows.append((status, report.nodeid, props))
    if not rows:
        return
    verbose = config.get_verbosity() > 0 or "A" in (config.getoption("reportchars", "") or "")
    terminalreporter.section("pathways-chaos: what each verdict judged", sep="-")
    if verbose:
        for status, nodeid, props in rows:
            terminalreporter.write_line(verdict_line(status, nodeid, props))
    terminalreporter.write_line(summary_count([(status, props) for status, _, props in rows]))


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= REASON_CHARS else flat[: REASON_CHARS - 3] + "..."
