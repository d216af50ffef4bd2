"""Where each thread of an episode's child was started, so a thread left running at the end is
blamed on whoever started it.

A thread's stack at the end says what it waits in, not who made it: an idle worker of a pool
orbax made waits in the standard library's ``queue`` only, and a loop's own
``Thread(target=<a library function>)`` waits in the library. ``sys.monitoring``'s PY_START event,
set on ``threading.Thread.start``'s code alone (one callback per thread started, nothing
patched), reads the starter's stack: the innermost frame that is not the standard library's
names the library, this toolkit, or the loop's line that started it.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pathways_chaos.harness.engine.monitoring_tools import claim_tool_id

#: Tool ids tried in turn (the coverage tool's and the debugger's slots: the child is a fresh
#: process; the exit witness uses 5 or 2, the observer's catch watch 3 and 4).
TOOL_IDS = (1, 0)
#: The name a thread started by this toolkit's own code is attributed to.
TOOLKIT = "pathways_chaos"


@dataclass(frozen=True)
class Origin:
    """Who started a thread: ``library`` is an installed package's top-level name (or
    ``pathways_chaos``), None for the loop's own code; ``where`` is that frame's line."""

    library: str | None
    where: str


_origins: weakref.WeakKeyDictionary[threading.Thread, Origin] = weakref.WeakKeyDictionary()


def origin_of(frame: FrameType | None) -> Origin | None:
    """The starter of a thread, from the stack of the code that called ``Thread.start``."""
    from pathways_chaos.harness.blackbox.values import (
        TOOLKIT_ROOMS,
        installed_package,
        is_standard_library,
    )

    while frame is not None:
        filename = frame.f_code.co_filename
        where = f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        if filename.startswith(TOOLKIT_ROOMS):
            return Origin(TOOLKIT, where)
        library = installed_package(filename)
        if library is not None:
            return Origin(library, where)
        if not is_standard_library(filename):
            return Origin(None, where)
        frame = frame.f_back
    return None


def of(thread: threading.Thread) -> Origin | None:
    """Who started ``thread``, when it was started after ``install``."""
    return _origins.get(thread)


def install() -> None:
    """Records the starter of every thread started in this process from now on."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return
    start = threading.Thread.start.__code__

    def on_start(code: Any, offset: int) -> Any:
        frame = sys._getframe(1)  # Thread.start's own frame
        thread = frame.f_locals.get("self")
        if isinstance(thread, threading.Thread):
            origin = origin_of(frame.f_back)
            if origin is not None:
                _origins[thread] = origin
        return None

    tool = claim_tool_id(TOOL_IDS, "pathways-chaos-thread-origins")
    if tool is not None:
        monitoring.register_callback(tool, monitoring.events.PY_START, on_start)
        monitoring.set_local_events(tool, start, monitoring.events.PY_START)
