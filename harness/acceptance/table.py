"""One row per check: pass or fail, a one-line reason, and the fix; printed after the run."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

PASS = "PASS"
FAIL = "FAIL"
SKIP = "SKIP"
NOT_JUDGED = "NOT JUDGED"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem a check found, pinned to a place (``file:line``, a container, a run)."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: ``findings`` empty means it passed."""

    check: str  # short id, e.g. "process-index"
    title: str  # what is checked, for a person
    fix: str  # what to do when it fails
    findings: tuple[Finding, ...] = ()
    note: str = ""  # the reason shown when it passes (what was measured or looked at)
    skipped: str = ""  # SKIP: why this input cannot be checked here
    depends_on: str = ""  # NOT JUDGED: the failed row this one cannot be judged without

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def status(self) -> str:
        if self.findings:
            return FAIL
        if self.depends_on:
            return NOT_JUDGED
        return SKIP if self.skipped else PASS

    @property
    def reason(self) -> str:
        """One line: the first finding (and how many more), or what made it pass."""
        if self.ok and self.depends_on:
            return f"not judged: {self.depends_on} failed" + (
                f" ({self.note})" if self.note else ""
            )
        if self.ok and self.skipped:
            return f"not checked: {self.skipped}"
        if self.ok:
            return self.note or "nothing found"
        first = str(self.findings[0])
        more = len(self.findings) - 1
        return first + (f" (+{more} more)" if more else "")

    def failure_message(self) -> str:
        """Every finding, one per line, then the fix: what a failing test prints."""
        lines = [f"{self.check}: {self.title}"]
        lines += [f"  {f}" for f in self.findings]
        lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


def render(results: Sequence[CheckResult], width: int = 100) -> str:
    """A plain-text table; a failing row carries its fix on the next line."""
    if not results:
        return "no acceptance checks ran"
    name_w = max(len(r.check) for r in results)
    lines = [f"{'check':<{name_w}}  {'result':<10}  reason", "-" * min(width, 40 + name_w)]
    for r in results:
        lines.append(f"{r.check:<{name_w}}  {r.status:<10}  {_clip(r.reason, width)}")
        if not r.ok:
            lines.append(f"{'':<{name_w}}  {'':<10}  fix: {_clip(r.fix, width)}")
    failed = sum(not r.ok for r in results)
    others = [r.status for r in results if r.ok and r.status != PASS]
    extra = "".join(
        f", {others.count(s)} {s.lower()}" for s in (SKIP, NOT_JUDGED) if others.count(s)
    )
    lines.append(f"{len(results) - failed - len(others)} passed, {failed} failed{extra}")
    return "\n".join(lines)


def failed(results: Iterable[CheckResult]) -> list[CheckResult]:
    return [r for r in results if not r.ok]


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
