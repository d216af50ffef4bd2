"""Writes down where code asked to end its own process, before the process ends.

An episode's child cannot stop a loop from calling ``os._exit`` (under any name: ``from os
import _exit``, ``posix._exit``), ``os.abort``, ``os.kill``/``os.killpg`` on itself or
``signal.raise_signal``/``signal.pthread_kill``, or replacing it (the ``os.exec*`` family); it can
only say afterwards where it happened.
``sys.monitoring``'s CALL event sees the callable at each call site: a fatal one has its
call and the caller's line written to a file (one ``write``, which survives the process); any
other call site is disabled after its first call, so watching costs one callback per call site.
Nothing is patched. The parent reads the file when the child ended without its end marker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine.monitoring_tools import claim_tool_id

#: Tool ids tried in turn (the optimizer's and the profiler's slots; the child is a fresh
#: process with no other tool, the observer's catch watch uses 3 and 4).
TOOL_IDS = (5, 2)


def _fatal_callables() -> dict[int, str]:
    import posix

    named = {
        os._exit: "os._exit",
        posix._exit: "os._exit",
        os.abort: "os.abort",
        os.kill: "os.kill",
        os.killpg: "os.killpg",
        signal.raise_signal: "signal.raise_signal",
        signal.pthread_kill: "signal.pthread_kill",
    }
    # The exec family replaces the process: the loop's run ends there, with no end marker.
    for name in ("execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe"):
        for module in (os, posix):
            fn = getattr(module, name, None)
            if fn is not None:
                named[fn] = f"os.{name}"
    return {id(fn): name for fn, name in named.items()}


def install(path: str) -> None:
    """Watches every call in this process from now on; a fatal one is written to ``path``."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return
    from pathways_chaos.faults import slice as slice_faults

    fatal = _fatal_callables()
    # The preemption notice's os.kill is the toolkit's, not the loop's; so is the fork server's
    # os._exit that ends a forked child after its run.
    own = {slice_faults.__file__, str(Path(__file__).with_name("fork_server.py"))}
    os_file = os.execl.__code__.co_filename  # "<frozen os>" in a frozen standard library
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    me = os.getpid()

    def on_call(code: Any, offset: int, callable_: Any, arg0: Any) -> Any:
        name = fatal.get(id(callable_))
        if name is None:
            return monitoring.DISABLE
        if os.getpid() != me:
            return None  # a process the loop forked (pty.spawn's exec): not this one's end
        if code.co_filename in own:
            return None  # the toolkit's own preemption notice, not the loop's exit
        if code.co_filename == os_file:
            return None  # os.execl's own call to execv: the loop's call site is written
        if name == "os.kill" and arg0 not in (0, os.getpid()):
            return None  # a signal to another process does not end this one
        if name == "os.killpg" and arg0 not in (0, os.getpgrp()):
            return None
        line = code.co_firstlineno
        for start, _end, ln in code.co_lines():
            if start <= offset and ln is not None:
                line = ln
        argument = "" if arg0 is monitoring.MISSING else repr(arg0)[:40]
        text = f"{name}({argument}) at {code.co_filename}:{line} in {code.co_name}\n"
        with contextlib.suppress(OSError):
            os.write(fd, text.encode(errors="replace"))
        return None

    tool = claim_tool_id(TOOL_IDS, "pathways-chaos-exit-witness")
    if tool is not None:
        monitoring.register_callback(tool, monitoring.events.CALL, on_call)
        monitoring.set_events(tool, monitoring.events.CALL)


def read(path: str) -> str | None:
    """The last fatal call written, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f.read(1 << 16).splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1] if lines else None
