"""What an episode left, for the reference trainer and a user's loop alike: its event log (the
only contract to the judges), what each run returned, and the error that ended it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine.recorder import Event


@dataclasses.dataclass
class EpisodeResult:
    """One episode's log and ending; ``subject`` names what ran (a loop's ``module:function``,
    or empty for the reference trainer)."""

    events: list[Event]
    #: What each run returned in this process (empty when the runs were child processes).
    results: list[Any]
    error: BaseException | None
    log_path: Path | None
    #: "fault never fired: ..." for each scheduled fault whose trigger never came, saying what
    #: the subject did instead and which trigger it can use.
    unfired: list[str] = dataclasses.field(default_factory=list)
    subject: str = ""

    @property
    def completed(self) -> bool:
        # From the log: a supervised episode's results stayed in its child process.
        ends = [e for e in self.events if e["kind"] == "run_end"]
        return bool(ends) and ends[-1].get("status") == "completed"
