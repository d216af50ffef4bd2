"""One row per check: its status, a reason, and the fix; printed after the run, or written out.

A row is PASS, FAIL, SKIP (its input was not given: the reason says what to pass) or NOT JUDGED
(it reads something a failed row already explains: the reason names that row). Only FAIL fails.
"""

from __future__ import annotations

import dataclasses
import html
import json
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

PASS = "PASS"
FAIL = "FAIL"
SKIP = "SKIP"
NOT_JUDGED = "NOT JUDGED"
STATUSES = (PASS, FAIL, SKIP, NOT_JUDGED)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem a check found, pinned to a place (``file:line``, a container, a run)."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: ``findings`` empty and nothing skipped means it passed."""

    check: str  # short id, e.g. "process-index"
    title: str  # what is checked, for a person
    fix: str  # what to do when it fails
    findings: tuple[Finding, ...] = ()
    note: str = ""  # the reason shown when it passes (what was measured or looked at)
    skipped: str = ""  # SKIP: what was not given, and what to pass
    depends_on: str = ""  # NOT JUDGED: the failed row this one cannot be judged without
    group: str = ""  # static, manifest or runtime
    #: NOT JUDGED: the check itself raised (a bug in pathways-chaos), with the traceback.
    judge_error: str = ""

    @property
    def ok(self) -> bool:
        """Nothing found wrong: PASS, SKIP and NOT JUDGED rows do not fail the run."""
        return not self.findings

    @property
    def status(self) -> str:
        if self.findings:
            return FAIL
        if self.depends_on or self.judge_error:
            return NOT_JUDGED
        if self.skipped:
            return SKIP
        return PASS

    @property
    def reason(self) -> str:
        """One line: the first finding (and how many more), or what made it pass or skip."""
        status = self.status
        if status == FAIL:
            first = str(self.findings[0])
            more = len(self.findings) - 1
            return first + (f" (+{more} more)" if more else "")
        if status == NOT_JUDGED and self.judge_error:
            return self.judge_error.splitlines()[0]
        if status == NOT_JUDGED:
            why = f": {self.note}" if self.note else ""
            return f"depends on {self.depends_on}, which failed{why}"
        if status == SKIP:
            return f"not given: {self.skipped}"
        return self.note or "nothing found"

    def failure_message(self) -> str:
        """Every finding, one per line, then the fix: what a failing test prints."""
        lines = [f"{self.check}: {self.title}"]
        lines += [f"  {f}" for f in self.findings]
        lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)

    def blocked_by(self, row: str, why: str = "") -> CheckResult:
        """This row, NOT JUDGED because ``row`` failed (``why``: what is missing here)."""
        return dataclasses.replace(self, findings=(), depends_on=row, note=why)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "group": self.group,
            "status": self.status,
            "title": self.title,
            "reason": self.reason,
            "findings": [{"where": f.where, "message": f.message} for f in self.findings],
            "fix": self.fix if self.status == FAIL else "",
            "skipped": self.skipped,
            "depends_on": self.depends_on,
            "judge_error": self.judge_error,
        }


class UserCodeFailed(Exception):
    """The team's code raised in a child process: its row FAILs at the team's line."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{message} at {where}")
        self.where, self.message = where, message


def judge_row(check: str, run: Callable[..., CheckResult], *args: Any) -> CheckResult:
    """``run(*args)``; an exception it raises is the user's (FAIL, at the user's line) when the
    innermost frame outside the libraries is theirs, else the toolkit's: NOT JUDGED, "the judge
    failed (bug in pathways-chaos)", with the traceback. Bad input still raises its one line."""
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        return run(*args)
    except ChaosConfigError:
        raise
    except UserCodeFailed as error:  # where and what its child said
        where, message = error.where, error.message
    except Exception as error:
        found = user_frame(error)
        if found is None:
            from pathways_chaos.harness.judging.verdict import judge_failed

            return CheckResult(check, "", "", judge_error=judge_failed(error))
        where = found
        message = f"your code raised {type(error).__name__}: {' '.join(str(error).split())[:300]}"
    return CheckResult(
        check,
        "the check ran your code",
        f"fix the error raised at {where} (run the check with -p no:randomly -x for the "
        "whole traceback)",
        (Finding(where, message),),
    )


def user_frame(error: BaseException) -> str | None:
    """``file:line in function`` of the innermost traceback frame outside the standard library,
    the installed libraries and pathways-chaos' own packages; None when the error arose in
    pathways-chaos' code (no user frame below the toolkit's innermost one)."""
    import importlib.util
    import os
    import traceback

    # Where the toolkit's packages lie, found without importing them (fixtures is a higher room).
    toolkit = tuple(
        os.path.abspath(p)
        for name in ("harness", "faults", "fixtures")
        for spec in [importlib.util.find_spec(f"pathways_chaos.{name}")]
        if spec is not None
        for p in spec.submodule_search_locations or ()
    )
    stdlib = os.path.dirname(os.__file__)
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = os.path.abspath(frame.filename)
        if path.startswith(stdlib) or "site-packages" in path or frame.filename.startswith("<"):
            continue
        if path.startswith(toolkit):
            return None
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return None


def render(results: Sequence[CheckResult], width: int = 100) -> str:
    """A plain-text table that wraps long reasons and fixes onto indented lines."""
    if not results:
        return "no acceptance checks ran"
    name_w = max(len("check"), *(len(r.check) for r in results))
    status_w = max(len(s) for s in STATUSES)
    indent = " " * (name_w + status_w + 4)
    text_w = max(30, width - len(indent))
    lines = [f"{'check':<{name_w}}  {'result':<{status_w}}  reason", "-" * min(width, 120)]
    for r in results:
        reason = _wrap(r.reason, text_w)
        lines.append(f"{r.check:<{name_w}}  {r.status:<{status_w}}  {reason[0]}")
        lines += [indent + more for more in reason[1:]]
        if r.status == FAIL:
            lines += [indent + part for part in _wrap(f"fix: {r.fix}", text_w, hang="     ")]
    lines.append(summary(results))
    return "\n".join(lines)


def summary(results: Iterable[CheckResult]) -> str:
    """``3 passed, 1 failed, 2 skipped, 1 not judged`` (zero counts left out, but passed)."""
    counts = {s: 0 for s in STATUSES}
    for r in results:
        counts[r.status] += 1
    words = {PASS: "passed", FAIL: "failed", SKIP: "skipped", NOT_JUDGED: "not judged"}
    parts = [f"{counts[PASS]} passed"] + [
        f"{counts[s]} {words[s]}" for s in (FAIL, SKIP, NOT_JUDGED) if counts[s]
    ]
    return ", ".join(parts)


def failed(results: Iterable[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == FAIL]


def write_report(results: Sequence[CheckResult], path: str | Path, header: str = "") -> Path:
    """The rows as JSON (``.json``) or a standalone HTML table (any other suffix)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".json":
        body = {
            "made_by": "pathways-chaos acceptance checks",
            "header": header,
            "summary": summary(results),
            "rows": [r.to_json() for r in results],
        }
        out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    else:
        out.write_text(_html(results, header), encoding="utf-8")
    return out


def _html(results: Sequence[CheckResult], header: str) -> str:
    colour = {PASS: "#d7f5dd", FAIL: "#fbd5d5", SKIP: "#eeeeee", NOT_JUDGED: "#fff1c2"}
    rows = []
    for r in results:
        details = "".join(f"<li>{html.escape(str(f))}</li>" for f in r.findings)
        fix = f"<div><b>fix:</b> {html.escape(r.fix)}</div>" if r.status == FAIL else ""
        rows.append(
            f'<tr style="background:{colour[r.status]}"><td>{html.escape(r.check)}</td>'
            f"<td>{html.escape(r.group)}</td><td>{html.escape(r.status)}</td>"
            f"<td>{html.escape(r.reason)}{f'<ul>{details}</ul>' if details else ''}{fix}</td></tr>"
        )
    return (
        "<!doctype html><meta charset='utf-8'><title>pathways-chaos acceptance checks</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #999;padding:4px;"
        "vertical-align:top;text-align:left}table{border-collapse:collapse}</style>"
        f"<h1>pathways-chaos acceptance checks</h1><p>{html.escape(header)}</p>"
        f"<p>{html.escape(summary(results))}</p>"
        "<table><tr><th>check</th><th>group</th><th>result</th><th>reason</th></tr>"
        + "".join(rows)
        + "</table>\n"
    )


def _wrap(text: str, width: int, hang: str = "") -> list[str]:
    text = " ".join(text.split())
    return textwrap.wrap(
        text, width, subsequent_indent=hang, break_long_words=False, break_on_hyphens=False
    ) or [""]
