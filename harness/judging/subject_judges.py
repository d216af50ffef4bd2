"""The judges of what a subject reported of itself (``engine/subject_events.py``): heard
beside the loop judges only when the subject reported something, so a user's loop, which
reports nothing, is judged as before.

They read what only the subject knows: the reference trainer's batch policy (a global batch
that scales with the slices must scale), the slice order of its mesh rows, the slices each of
its steps ran on. These are the reference trainer's own oracle checks, over its own events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging import oracle
from pathways_chaos.harness.judging.panel import Finding, Judge

_CHECKS: tuple[tuple[str, Callable[[Sequence[Event]], list[str]]], ...] = (
    ("batch-sizes", oracle.check_batch_sizes),
    ("mesh-rebuild", oracle.check_meshes),
    ("scale-up-joins", oracle.check_scale_up_joins),
)


def _said_of_itself(check: Callable[[Sequence[Event]], list[str]]) -> Callable[..., Finding]:
    def judge(history: Sequence[Event]) -> Finding:
        return [f"by its own events, {text}" for text in check(history)]

    return judge


#: Every subject judge, in the order the verdict lists them, after the loop judges; each
#: reads the subject's own history (``engine.subject_events.subject_history``), made once.
SUBJECT_JUDGES: tuple[Judge[Sequence[Event]], ...] = tuple(
    Judge(name, _said_of_itself(check)) for name, check in _CHECKS
)
