"""Which processes are ours to signal: only the ones we started, proven by what we recorded.

A pid alone proves nothing: a file that names it may be planted or edited, and after a crash
or a reboot the pid belongs to whatever process got it next. So when a command starts a
process it records its identity (pid, start time in clock ticks since boot, command line and
the boot id); before any signal the live process must match all of it. Signals never go to a
pid <= 1 (``kill(-1)`` reaches every process the user may signal, ``kill(0)`` our own group,
pid 1 is init), and a process group is signalled only when its leader is the process we
started in a session of its own (``start_new_session=True``), never a group someone else made.
A caller that knows what it started (``python -m MODULE``) also passes ``module``: a pid file
holding the exact record of some other live process (copied from /proc) is then still refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class NotOurProcess(ChaosConfigError):
    """A recorded process that cannot be proven ours: nothing is signalled; exit 2."""


def boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and ')')."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return []
    return text.rsplit(")", 1)[-1].split() if ")" in text else []


def process_start(pid: int) -> str:
    """The pid's start time in clock ticks since boot (field 22 of /proc/PID/stat), or ''."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def process_cmdline(pid: int) -> tuple[str, ...] | None:
    """The pid's command line, or None when it cannot be read (gone, a zombie, not ours)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


@dataclasses.dataclass(frozen=True)
class ProcessIdentity:
    """What proves a pid is the process we started: its start time, command line and boot."""

    pid: int
    start: str
    cmdline: tuple[str, ...]
    boot: str

    def as_record(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start": self.start,
            "cmdline": list(self.cmdline),
            "boot_id": self.boot,
        }

    @classmethod
    def from_record(cls, record: object, source: str) -> ProcessIdentity:
        """A record as ``as_record`` wrote it, or one line saying why it is not one."""
        if not isinstance(record, dict):
            raise NotOurProcess(f"{source} holds no process record of ours: nothing signalled")
        pid, start = record.get("pid"), record.get("start")
        cmdline, boot = record.get("cmdline"), record.get("boot_id")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
            raise NotOurProcess(
                f"{source} names pid {pid!r}, which is never signalled (pid <= 1 or not a "
                "number): nothing signalled"
            )
        if (
            not isinstance(start, str)
            or not start.isdigit()
            or not isinstance(cmdline, list)
            or not cmdline
            or not all(isinstance(part, str) for part in cmdline)
            or not isinstance(boot, str)
        ):
            raise NotOurProcess(
                f"{source} does not record pid {pid}'s start time and command line: nothing "
                "signalled"
            )
        return cls(pid, start, tuple(cmdline), boot)


def identity_of(pid: int) -> ProcessIdentity | None:
    """The identity of a live process (to record right after starting it), or None."""
    if pid <= 1:
        return None
    start, cmdline = process_start(pid), process_cmdline(pid)
    if not start or not cmdline:
        return None
    return ProcessIdentity(pid, start, cmdline, boot_id())


def identity_of_started(
    pid: int, command: list[str] | tuple[str, ...], timeout_s: float = 10.0
) -> ProcessIdentity | None:
    """The identity of a process just started with ``command``, once it runs that command: a
    child reads as an empty or its parent's command line until its ``exec``; None if it ended
    (or never ran ``command``) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        identity = identity_of(pid)
        if identity is not None and identity.cmdline == tuple(command):
            return identity
        if not process_start(pid):  # gone: nothing to record
            return None
        time.sleep(0.01)  # between fork and exec its command line is empty or its parent's
    return None


def runs_module(cmdline: tuple[str, ...] | None, module: str) -> bool:
    """Whether ``cmdline`` is ``PYTHON -m module ...``, as ``subprocess.Popen([sys.executable,
    "-m", module, ...])`` starts it: a record's own command line proves nothing (it is copied)."""
    return cmdline is not None and len(cmdline) >= 3 and cmdline[1:3] == ("-m", module)


def ownership(recorded: ProcessIdentity, *, module: str | None = None) -> tuple[str, str]:
    """``("ours" | "gone" | "other", why)``: whether the recorded process is the live one (and,
    with ``module``, whether the live one runs ``python -m module``, read from /proc)."""
    pid = recorded.pid
    if pid <= 1:
        return "other", f"pid {pid} is never signalled"
    if recorded.boot and boot_id() and recorded.boot != boot_id():
        return "gone", f"pid {pid} was started before this machine rebooted"
    start = process_start(pid)
    if not start:
        return "gone", f"pid {pid} has ended"
    if start != recorded.start:
        return "other", (
            f"pid {pid} now belongs to another process (started at tick {start}, not "
            f"{recorded.start}): the pid was reused"
        )
    cmdline = process_cmdline(pid)
    if cmdline != recorded.cmdline:
        return "other", f"pid {pid} runs another command line than the one recorded"
    if module is not None and not runs_module(cmdline, module):
        return "other", f"pid {pid} does not run `python -m {module}`"
    return "ours", f"pid {pid} is the process we started"


def signal_ours(
    recorded: ProcessIdentity, signum: int, *, group: bool = False, module: str | None = None
) -> bool:
    """Sends ``signum`` to the recorded process (its group with ``group``) only if it is
    still ours (see :func:`ownership`), checked right before; True when it was sent."""
    pid = recorded.pid
    if pid <= 1 or pid == os.getpid() or ownership(recorded, module=module)[0] != "ours":
        return False
    try:
        if group:
            if os.getpgid(pid) != pid:  # not the leader of a group we created: its pid only
                os.kill(pid, signum)
            else:
                os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_ours(
    recorded: ProcessIdentity, timeout_s: float = 60.0, *, module: str | None = None
) -> bool:
    """SIGTERM to the recorded process, then SIGKILL to its group at ``timeout_s``: each only
    while it is still ours (see :func:`ownership`). True when it was running (and was asked
    to stop)."""
    if not signal_ours(recorded, signal.SIGTERM, module=module):
        return False
    deadline = time.monotonic() + timeout_s
    while ownership(recorded, module=module)[0] == "ours" and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(recorded.pid, os.WNOHANG)[0] == recorded.pid:
                break
        time.sleep(0.05)
    signal_ours(recorded, signal.SIGKILL, group=True, module=module)
    return True


__all__ = [
    "NotOurProcess",
    "ProcessIdentity",
    "boot_id",
    "identity_of",
    "identity_of_started",
    "ownership",
    "process_cmdline",
    "process_start",
    "runs_module",
    "signal_ours",
    "stop_ours",
]
