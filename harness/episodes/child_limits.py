"""What one episode's children may use (memory, output, grace periods), and the session's
default, which the plugin's ``--chaos-memory-limit`` sets."""

from __future__ import annotations

import dataclasses
import re

from pathways_chaos.harness.errors import ChaosConfigError

GIB = 1 << 30
MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ChildLimits:
    """What one episode's children may use; past a limit the child is ended and named."""

    #: Resident memory of the child and everything it started, together.
    memory_bytes: int = 4 * GIB
    #: What the child may write to its stdout and stderr (kept in a file beside the log).
    output_bytes: int = 256 * MIB
    #: Seconds a child may take to exit after its end marker (atexit, non-daemon threads).
    exit_grace_s: float = 10.0
    #: Seconds given to faulthandler to write the stacks before the SIGKILL (a loaded CI
    #: machine took more than one to write the main thread's).
    stack_grace_s: float = 3.0
    #: Seconds a child may take to import the toolkit and its libraries before it loads the
    #: loop: ours, so never counted against the loop's wall deadline (a spawned child on a
    #: busy CI machine takes tens of seconds), and past it the toolkit failed, not the loop.
    startup_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.memory_bytes > 0 or not self.output_bytes > 0:
            raise ChaosConfigError("a child limit must be > 0")


_default_limits = ChildLimits()


def default_limits() -> ChildLimits:
    """The session's limits (``set_default_limits``)."""
    return _default_limits


def set_default_limits(limits: ChildLimits) -> ChildLimits:
    """Sets the session's limits (the plugin's ``--chaos-memory-limit``); returns the old."""
    global _default_limits
    previous, _default_limits = _default_limits, limits
    return previous


def parse_bytes(raw: str, flag: str) -> int:
    """``4GiB``, ``512MiB``, ``2G``, ``1000000`` -> bytes; anything else: one line."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*", str(raw), re.IGNORECASE)
    if match is None:
        raise ChaosConfigError(f"{flag}={raw!r}: write a size such as 4GiB, 512MiB or 8G")
    number = float(match.group(1))
    scale = 1024 ** " KMGT".index(match.group(2).upper() or " ")
    value = int(number * scale)
    if value < 64 * MIB:
        raise ChaosConfigError(f"{flag}={raw!r}: use at least 64MiB (JAX alone needs more)")
    return value
