"""What a subject says of itself: events a loop of ours reports beside what the observer saw.

The observer sees only the libraries' calls. The reference trainer also knows what it meant:
the batch policy in its config, the slice order of the mesh rows it built, the slices each
step ran on. Run as a loop (``reference/trainer_loop.py``), it reports its own events into the
episode's log as ``subject`` events, each holding one of the trainer's events; the judges that
read them (``judging/subject_judges.py``) are heard only when some are present. A user's loop
reports none and is judged from the observer's events alone.

A ``subject`` event can only add findings: the central judges read the observer's events.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Event, Recorder

#: The kind of an event the subject reported of itself; ``event`` holds its own event.
SUBJECT = "subject"
#: A subject event's own fields that belong to its recorder, not to what it reports.
_ITS_RECORDERS = ("seq", "t", "wall")
#: The loop's events a subject's history keeps, in place: the faults acted out on it.
_EPISODE_KINDS = frozenset({"fault"})

_reporters: list[Callable[[Event], None]] = []


@contextlib.contextmanager
def reporting(recorder: Recorder, run: Callable[[], int]) -> Iterator[None]:
    """While the episode's loop runs: a subject's own events go into ``recorder``'s log, in
    the run the observer is in (``run``)."""

    watching = True

    def report(event: Event) -> None:
        if not watching or event.get("kind") == "log_start":
            return
        own = {k: v for k, v in event.items() if k not in _ITS_RECORDERS}
        recorder.emit(SUBJECT, run=run(), event=own)

    _reporters.append(report)
    try:
        yield
    finally:
        watching = False  # a listener the subject kept reports nothing after its episode
        _reporters.remove(report)


def reporter() -> Callable[[Event], None] | None:
    """Where a subject's own events go (a listener for its ``Recorder``), or None when no
    episode is watching (the subject then keeps them to itself)."""
    return _reporters[-1] if _reporters else None


def subject_history(events: Sequence[Event]) -> list[Event]:
    """The subject's own events as one log: each in the run the episode saw it in, the faults
    acted out in between kept in place, numbered again from 0. Empty: it reported nothing."""
    out: list[Event] = []
    for e in events:
        own_event = e.get("event")
        if e["kind"] == SUBJECT and isinstance(own_event, dict):
            own: dict[str, Any] = dict(own_event)
            if not isinstance(own.get("kind"), str):
                continue
            if "run" in own:
                own["run"] = e.get("run", own["run"])
            out.append({**own, "seq": len(out)})
        elif e["kind"] in _EPISODE_KINDS:
            out.append({**e, "seq": len(out)})
    return out if any(e["kind"] != "fault" for e in out) else []
