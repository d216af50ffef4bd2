"""Which code catches a slice-down error the loop met: its own ``except`` (an error swallowed)
or a library's (Orbax skipping a lost replica, elastic_retry recovering)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from pathways_chaos.harness.blackbox.values import is_plumbing


class CatchWatch:
    """Which code catches a slice-down error: the loop's own ``except`` (an error swallowed)
    or a library's (Orbax skipping a lost replica, elastic_retry recovering).

    Python's own ``sys.monitoring`` EXCEPTION_HANDLED event, on a tool id of its own, for the
    episode only; it costs nothing until an exception is handled.
    """

    TOOL_IDS = (4, 3)

    def __init__(self, report: Callable[[int, str], None]) -> None:
        self._report = report
        # Weak references: a kept error keeps its frames, and their arrays, alive.
        self._watched: dict[int, tuple[weakref.ref[BaseException], int]] = {}
        self._tool: int | None = None
        self._main = threading.get_ident()

    def start(self) -> None:
        import sys

        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return
        from pathways_chaos.harness.engine.monitoring_tools import claim_tool_id

        tool = claim_tool_id(self.TOOL_IDS, "pathways-chaos")
        if tool is not None:
            self._tool = tool
            monitoring.register_callback(tool, monitoring.events.EXCEPTION_HANDLED, self._handled)
            monitoring.set_events(tool, monitoring.events.EXCEPTION_HANDLED)

    def stop(self) -> None:
        import sys

        if self._tool is None:
            return
        monitoring = sys.monitoring
        monitoring.set_events(self._tool, 0)
        monitoring.register_callback(self._tool, monitoring.events.EXCEPTION_HANDLED, None)
        monitoring.free_tool_id(self._tool)
        self._tool = None
        self._watched.clear()

    def watch(self, error: BaseException, number: int) -> None:
        self._watched[id(error)] = (weakref.ref(error), number)

    def _handled(self, code: Any, offset: int, exception: BaseException) -> Any:
        entry = self._watched.get(id(exception))
        if entry is None or entry[0]() is not exception:
            return None
        if is_plumbing(code.co_filename) or threading.get_ident() != self._main:
            return None
        del self._watched[id(exception)]  # the first handler outside the libraries decides
        # The handler's own line (a ``with`` that suppresses it); else, its first instructions
        # (PUSH_EXC_INFO) having none, the first line after them: its ``except`` clause (the
        # last line before them is the ``try`` body's).
        lines = list(code.co_lines())
        line = (
            next(
                (ln for start, end, ln in lines if start <= offset < end and ln is not None),
                next((ln for start, _, ln in lines if start >= offset and ln is not None), None),
            )
            or code.co_firstlineno
        )
        self._report(entry[1], f"{code.co_filename}:{line} in {code.co_name}")
        return None
