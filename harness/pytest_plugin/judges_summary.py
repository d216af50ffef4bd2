"""What each chaos test's verdict judged, said where a person reads test results.

Per test (under ``-v`` or ``-rA``) one short line: its judges that ran and those that could
not, with why; for the session one count, so a passing test is never mistaken for a judged
one ("10 passed, of which 3 with scale-up not judged"). Read from the reports' user properties
(``chaos_judged``, ``chaos_not_judged``), which pytest-xdist carries to the controller.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

JUDGED = "chaos_judged"
NOT_JUDGED = "chaos_not_judged"


def _properties(report: Any) -> dict[str, Any]:
    return dict(getattr(report, "user_properties", ()) or ())


def _not_judged_names(text: str) -> list[str]:
    """``"scale-up: why; final-state: why"`` -> ``["scale-up", "final-state"]``."""
    names = []
    for part in text.split("; "):
        name, sep, _ = part.partition(": ")
        if sep and name and " " not in name:
            names.append(name)
    return names


def write_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = []
    for status in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(status, []):
            props = _properties(report)
            if JUDGED in props and getattr(report, "when", "call") in ("call", "setup"):
                rows.append((status, report, props))
    if not rows:
        return
    verbose = config.get_verbosity() > 0 or "A" in (config.getoption("reportchars", "") or "")
    terminalreporter.section("pathways-chaos: what each verdict judged", sep="-")
    if verbose:
        for status, report, props in rows:
            judged = [j for j in str(props[JUDGED]).split(", ") if j]
            missing = str(props.get(NOT_JUDGED, "") or "")
            line = f"{status.upper()} {report.nodeid}: judged {', '.join(judged) or 'nothing'}"
            if missing:
                line += f"; not judged: {missing}"
            terminalreporter.write_line(line[:400])
    passed = [props for status, _, props in rows if status == "passed"]
    counts = collections.Counter(
        name for props in passed for name in _not_judged_names(str(props.get(NOT_JUDGED, "")))
    )
    with_any = sum(1 for props in passed if props.get(NOT_JUDGED))
    text = f"{len(passed)} passed"
    if counts:
        text += (
            f", {with_any} of them with a judge that could not judge ("
            + ", ".join(f"{name} not judged in {n}" for name, n in counts.most_common())
            + ")"
        )
    else:
        text += ", every judge judged"
    terminalreporter.write_line(text)
