"""One way to take a ``sys.monitoring`` tool id.

Python has six, shared with debuggers, coverage and profilers. Each watcher of ours (the exit
witness, the thread origins, the observer's catch watch and batch sources) names the ids it
may use, in order, and gets the first one no other tool holds, or none: then it watches
nothing, and what depends on it says so.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def claim_tool_id(candidates: Sequence[int], name: str) -> int | None:
    """The first of ``candidates`` that was free, now held as ``name``; None when every one is
    taken or this Python has no ``sys.monitoring``."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return None
    for tool in candidates:
        try:
            monitoring.use_tool_id(tool, name)
        except ValueError:  # taken by another tool
            continue
        return tool
    return None
