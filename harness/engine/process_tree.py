"""A child process and everything it starts, found and ended together, whatever they did.

Every process an episode's child starts inherits a token in its environment
(``PATHWAYS_CHAOS_EPISODE=<token>``). A process that left the child's process group (``setsid``,
a double fork) still carries it, so ending the episode finds it by reading ``/proc/*/environ``:
only processes of this user, only ones whose environment holds this exact token. No pid is
signalled because a file or a child named it; pid 1 and this process are never signalled.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

#: The environment variable that marks every process of one episode's child.
TOKEN_VAR = "PATHWAYS_CHAOS_EPISODE"


def new_token() -> str:
    return secrets.token_hex(12)


def tagged(token: str) -> list[int]:
    """Pids (not this process, never <= 1) whose environment carries ``token``."""
    needle = b"\0" + f"{TOKEN_VAR}={token}".encode() + b"\0"
    me, found = os.getpid(), []
    for entry in _proc_entries():
        pid = int(entry.name)
        if pid <= 1 or pid == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, a zombie, or another user's
            continue
        if needle in b"\0" + environ + b"\0":
            found.append(pid)
    return found


def _proc_entries() -> list[Path]:
    try:
        return [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    except OSError:
        return []


def rss_bytes(pids: list[int]) -> int:
    """The resident memory of ``pids`` together (those gone count 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def describe(pid: int) -> str:
    """``pid N: command line`` (cut), for a verdict that names a process left behind."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"pid {pid}"
    command = raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    if "pathways_chaos.harness.episodes.fork_server" in command:
        # a fork that never exec'd carries the command line it was copied from
        return f"pid {pid}: a copy of the loop's process it forked (it ran no other program)"
    return f"pid {pid}: {command[:120]}"


def end_all(token: str, group: int | None = None) -> list[str]:
    """SIGKILLs the child's process group (``group``, one this module's caller created) and
    every process carrying ``token``; returns what was still running, described."""
    left = tagged(token)
    described = [describe(pid) for pid in left]
    if group is not None and group > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in left:  # reap those that were our own children
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    _wait_gone(left)
    return described


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> None:
    """Until each SIGKILLed pid is gone or a zombie (a kill is delivered, not instant)."""
    end = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < end and _running(pid):
            time.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """The children of ``pid``, and theirs (from /proc: a tree read once)."""
    parents: dict[int, list[int]] = {}
    for entry in _proc_entries():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for kid in parents.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out
