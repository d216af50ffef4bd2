"""The process-exit judge: a loop's processes ended cleanly (read from the supervisor's
``child_end`` events)."""

from __future__ import annotations

from collections.abc import Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.wording import one_line as _line
from pathways_chaos.harness.judging.wording import plural as _plural


def process_exit(events: Sequence[Event]) -> list[str] | str:
    """The loop's processes ended cleanly: no thread kept one alive after its run ended, and
    nothing it started was still running (a real job's Pod would hang, or its workers be cut
    off mid-work). Not judged when only a library's threads held a process: whether that
    library's wait ends is not the loop's to show."""
    children = [e for e in events if e["kind"] == "child_end"]
    if not children:
        return "the loop ran in the judging process (no child process to watch)"
    found, unknown = [], []
    for e in events:
        if e["kind"] == "log_foreign_lines":
            found.append(
                f"the event log holds {_plural(int(e.get('count') or 0), 'line')} that "
                f"pathways-chaos's recorder did not write (the first: {e.get('first')}): "
                "something in the loop's process wrote into the toolkit's log (or changed "
                "it); those lines were not read"
            )
    for e in children:
        if e.get("exit_not_judged"):
            unknown.append(f"run {e.get('run')}: {_line(str(e['exit_not_judged']), 400)}")
        if e.get("after_end") and e.get("cause"):
            found.append(_line(e["cause"], 500))
        left = [str(x) for x in e.get("left_behind") or []]
        if left:
            found.append(
                f"the loop left {_plural(len(left), 'process', 'processes')} running when run "
                f"{e.get('run')} ended ({'; '.join(left[:3])}{'; ...' if len(left) > 3 else ''}): "
                "pathways-chaos ended them; join or terminate what the loop starts"
            )
    if not found and unknown:
        return "; ".join(unknown)
    return found
