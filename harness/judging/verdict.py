"""The one verdict: what each named judge said of one history, for the reference trainer and a
user's loop alike.

After Jepsen's composed checker: every judge is named, and says "no violation", its violations,
or "not judged, because ..." (``not_judged``); a judge that raised is our bug (``judge_errors``),
never the subject's failure and never a pass. ``word`` is what every front door says:
``FAILED`` when any judge found something, else ``NOT JUDGED`` when a judge raised or a judge a
pass needs (``central``) could not judge, else ``SURVIVED``.
"""

from __future__ import annotations

import dataclasses
import traceback
from typing import TYPE_CHECKING, Any

from pathways_chaos.harness.errors import ChaosError

if TYPE_CHECKING:
    from pathways_chaos.harness.judging.committed import StepRecord
    from pathways_chaos.harness.judging.loop_lineage import BatchRecord

#: What a judge that raised is, wherever it is reported.
JUDGE_FAILED = "the judge failed: a bug in pathways-chaos"


class OracleViolation(ChaosError, AssertionError):
    """The run did not survive; the message lists every violated check."""


@dataclasses.dataclass
class Verdict:
    """The judges' verdict on one log: each violation in one line naming where and why."""

    violations: list[str] = dataclasses.field(default_factory=list)
    completed: bool = False
    #: The committed steps of the reference trainer (its own step records); empty for a loop.
    lineage: list[StepRecord] = dataclasses.field(default_factory=list)
    #: Work done and thrown away: steps (or batches) drawn that the committed lineage lacks.
    wasted_steps: int = 0
    recoveries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The error the run ended with, when it failed.
    error: str | None = None
    #: The committed batches of a loop, as the observer saw them; empty for the trainer.
    batches: list[BatchRecord] = dataclasses.field(default_factory=list)
    #: The judges that ran, and of them those that found a violation.
    judged: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    #: Judge name -> why it could not judge this log.
    not_judged: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Judge name -> "Type: message" and the traceback of a toolkit exception inside it.
    judge_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The cause each violation names (same order), from ``loop_causes.CAUSES``: what an
    #: acceptance row chooses its fix by (a loop's verdict).
    causes: list[str] = dataclasses.field(default_factory=list)
    #: Every cause any violation names (a primary cause and what its text also shows).
    named: set[str] = dataclasses.field(default_factory=set)
    #: The judges a pass needs: without any of them a pass judged nothing that matters.
    central: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations and not self.judge_errors

    @property
    def central_not_judged(self) -> dict[str, str]:
        """The central judges that could not judge a verdict that found no failure: such a pass
        judged nothing that matters, so it is "not judged", never passed (a failure stands
        whatever else could not be judged)."""
        if not self.ok:
            return {}
        return {k: v for k, v in self.not_judged.items() if k in self.central}

    @property
    def word(self) -> str:
        """``FAILED``, ``NOT JUDGED`` or ``SURVIVED``: what every front door says."""
        if self.violations:
            return "FAILED"
        if self.judge_errors or self.central_not_judged:
            return "NOT JUDGED"
        return "SURVIVED"

    @property
    def exit_code(self) -> int:
        """The command line's: 0 survived, 1 failed, 5 not judged (never a green CI step;
        pytest's 5 is "no tests ran", the nearest meaning)."""
        return {"SURVIVED": 0, "FAILED": 1, "NOT JUDGED": 5}[self.word]

    def summary(self) -> str:
        lines = [f"judged: {', '.join(self.judged) or 'nothing'}", *self.not_judged_lines()]
        lines += [f"FAILED: {v}" for v in self.violations]
        return "\n".join(lines)

    def not_judged_lines(self) -> list[str]:
        """ "not judged: NAME, because WHY" for each judge that could not judge, or raised."""
        lines = [f"not judged: {name}, because {why}" for name, why in self.not_judged.items()]
        return lines + [
            f"not judged: {name}, because {JUDGE_FAILED}: {why.splitlines()[0]}"
            for name, why in self.judge_errors.items()
        ]

    def raise_if_failed(self) -> None:
        if not self.ok:
            broke = [f"{JUDGE_FAILED} ({name})" for name in self.judge_errors]
            raise OracleViolation("; ".join(self.violations + broke))


def judge_error(error: BaseException) -> str:
    """A toolkit exception inside a judge: ``Type: message``, then its traceback."""
    trace = "".join(traceback.format_exception(error)).rstrip()
    return f"{type(error).__name__}: {error}\n{trace}"


def judge_failed(error: BaseException) -> str:
    """How a toolkit exception inside a judge is reported: what, where, and the traceback."""
    trace = "".join(traceback.format_exception(error)).rstrip()
    return (
        f"not judged: the judge failed (bug in pathways-chaos): {type(error).__name__}: "
        f"{error}\n{trace}"
    )
