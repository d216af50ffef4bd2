"""Faults of the in-process fake cluster: slices lost, repaired, slow; errors; preemption.

Losses and repairs take any ``ClusterBackend``; flapping and slow health need the ``FakeCluster``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import TYPE_CHECKING

from pathways_chaos.faults.model import Fault, FaultSpecError
from pathways_chaos.harness.engine.backend import SaveGated, TimedRepair

#: The errors ``is_error_due_to_slice_down`` counts as a lost slice: what a slice loss raises.
SLICE_DOWN_CODES = ("DATA_LOSS", "DEADLINE_EXCEEDED", "NOT_FOUND", "INTERNAL")
#: The most elastic attempts one run of a loop is let make (the observer stops it after them:
#: it would retry forever); a ``raise_error`` in this many attempts outlasts any retry.
PERSISTENT_ATTEMPTS = 40
#: Every XLA (absl) status an error can carry: ``raise_error`` takes any but OK.
ERROR_CODES = (
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

if TYPE_CHECKING:
    from pathways_chaos.harness.engine.backend import ClusterBackend
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster


@dataclasses.dataclass(frozen=True)
class SliceLoss(Fault["ClusterBackend"]):
    """A slice fails; the trainer sees ``code`` the next time it touches the slice."""

    kind = "slice_loss"
    slice: int = 0
    code: str = "DATA_LOSS"
    repair_after_polls: int = 0  # 0: stays down until a repair fault

    def __post_init__(self) -> None:
        if self.code not in SLICE_DOWN_CODES:
            raise FaultSpecError(
                f"{self.kind}: code={self.code!r} is not a slice-down error: use one of "
                f"{', '.join(SLICE_DOWN_CODES)} (raise_error injects other errors)"
            )

    def inject(self, target: ClusterBackend) -> list[str]:
        polls = self.repair_after_polls or None
        return target.lose_slice(self.slice, self.code, repair_after_polls=polls)

    def heal(self, target: ClusterBackend) -> list[str]:
        return target.repair_slice(self.slice)

    def describe(self) -> str:
        back = (
            f", back after {self.repair_after_polls} health polls"
            if self.repair_after_polls
            else ""
        )
        return f"slice {self.slice} lost with {self.code}{back}"


@dataclasses.dataclass(frozen=True)
class DataLoss(SliceLoss):
    """A slice lost with ``DATA_LOSS``, a code ``elastic_retry`` retries."""

    kind = "data_loss"
    code: str = "DATA_LOSS"


@dataclasses.dataclass(frozen=True)
class DeadlineExceeded(SliceLoss):
    """A slice lost with ``DEADLINE_EXCEEDED``, a code ``elastic_retry`` retries."""

    kind = "deadline_exceeded"
    code: str = "DEADLINE_EXCEEDED"


@dataclasses.dataclass(frozen=True)
class NotFound(SliceLoss):
    """A slice lost with ``NOT_FOUND``, a code ``elastic_retry`` retries."""

    kind = "not_found"
    code: str = "NOT_FOUND"


@dataclasses.dataclass(frozen=True)
class Internal(SliceLoss):
    """A slice lost with ``INTERNAL``, a code ``elastic_retry`` retries."""

    kind = "internal"
    code: str = "INTERNAL"


@dataclasses.dataclass(frozen=True)
class RepairSlice(Fault["ClusterBackend"]):
    """A lost slice becomes healthy (available to rejoin) after ``after_polls`` health polls,
    or, on the fake, for every health poll from ``after_seconds`` on the episode clock on (a
    clean rerun gives a slice back where the faulted run's clock stood when it came back)."""

    kind = "repair"
    slice: int = 0
    after_polls: int = 0
    after_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.after_polls and self.after_seconds:
            raise FaultSpecError(
                f"repair after_polls={self.after_polls} after_seconds={self.after_seconds}: "
                "give one of them"
            )

    def inject(self, target: ClusterBackend) -> list[str]:
        if not self.after_seconds:
            return target.repair_slice(self.slice, self.after_polls)
        if not isinstance(target, TimedRepair):
            raise FaultSpecError(
                f"repair after_seconds={self.after_seconds:g} plays on the fake cluster's clock "
                "only: use after_polls= on a real cluster"
            )
        return target.repair_slice_after(self.slice, self.after_seconds)

    def describe(self) -> str:
        if self.after_seconds:
            when = f" for health polls {self.after_seconds:g} s on"
        else:
            when = f" after {self.after_polls} health polls" if self.after_polls else ""
        return f"slice {self.slice} repaired{when}"


@dataclasses.dataclass(frozen=True)
class FlappingSlice(Fault["FakeCluster"]):
    """A slice lost ``times`` times: back after ``repair_after_polls`` health polls, it fails
    again once the trainer has touched it ``up_accesses`` times."""

    kind = "flapping"
    slice: int = 0
    times: int = 3
    up_accesses: int = 5
    repair_after_polls: int = 1

    def __post_init__(self) -> None:
        if self.times < 1 or self.up_accesses < 1 or self.repair_after_polls < 1:
            raise FaultSpecError("flapping: times, up_accesses and repair_after_polls must be >= 1")

    def inject(self, target: FakeCluster) -> list[str]:
        return target.flap_slice(self.slice, self.times, self.up_accesses, self.repair_after_polls)

    def describe(self) -> str:
        return f"slice {self.slice} flaps: lost {self.times} times"


@dataclasses.dataclass(frozen=True)
class SlowHealth(Fault["FakeCluster"]):
    """The next ``polls`` health checks of the slice take ``seconds``, then DEADLINE_EXCEEDED."""

    kind = "slow_health"
    slice: int = 0
    seconds: float = 30.0
    polls: int = 1

    def inject(self, target: FakeCluster) -> list[str]:
        return target.slow_health(self.slice, self.seconds, self.polls)

    def describe(self) -> str:
        return (
            f"slice {self.slice}'s next {self.polls} health checks time out after {self.seconds}s"
        )


@dataclasses.dataclass(frozen=True)
class RaiseError(Fault["FakeCluster"]):
    """The trainer's next access raises ``code`` without any slice being lost.

    With a slice-down code (``INTERNAL``, say, as a Python exception in a host callback
    surfaces) ``elastic_retry`` retries; with any other it must propagate.
    """

    kind = "raise_error"
    #: ``attempts`` is checked by the fault itself (>= 1), not as any count (>= 0).
    signed_params = frozenset({"attempts"})
    code: str = "INVALID_ARGUMENT"
    message: str = "injected error"
    #: Raised again at the start of each of the next ``attempts - 1`` elastic attempts: an
    #: error that persists (a host callback that fails every time) needs a retry policy that
    #: gives up; ``attempts`` past the attempts any loop is let make
    #: (``PERSISTENT_ATTEMPTS``) outlasts every retry.
    attempts: int = 1

    def __post_init__(self) -> None:
        if self.code not in ERROR_CODES:
            raise FaultSpecError(
                f"{self.kind}: code={self.code!r} is not an XLA error status: use one of "
                f"{', '.join(ERROR_CODES)} (OK is not an error)"
            )
        if self.attempts < 1:
            raise FaultSpecError(
                f"{self.kind}: attempts={self.attempts}: use >= 1 (the attempt it fires in, "
                "and the ones after it to raise it again in)"
            )
        if self.attempts > 1 and self.code not in SLICE_DOWN_CODES:
            raise FaultSpecError(
                f"{self.kind}: attempts={self.attempts} with code={self.code}: an error that is "
                "not a slice-down error ends the run the first time (elastic_retry does not "
                "retry it), so it is never raised again: drop attempts, or use a slice-down "
                f"code ({', '.join(SLICE_DOWN_CODES)})"
            )

    def error(self) -> BaseException:
        """The error it raises: ``code`` in a ``JaxRuntimeError``, as XLA reports a status."""
        import jax

        error: BaseException = jax.errors.JaxRuntimeError(
            f"{self.code}: {self.message} (pathways-chaos)"
        )
        return error

    def inject(self, target: FakeCluster) -> list[str]:
        raise self.error()

    def describe(self) -> str:
        again = f", and again in each of the next {self.attempts - 1} attempts"
        return f"the next access raises {self.code}" + (again if self.attempts > 1 else "")


@dataclasses.dataclass(frozen=True)
class Preemption(Fault["FakeCluster"]):
    """A preemption notice: SIGTERM to this process, which the trainer answers by suspending."""

    kind = "preemption"

    def inject(self, target: FakeCluster) -> list[str]:
        del target
        os.kill(os.getpid(), signal.SIGTERM)
        return [f"SIGTERM sent to pid {os.getpid()}"]

    def describe(self) -> str:
        return "preemption notice (SIGTERM)"


@dataclasses.dataclass(frozen=True)
class SlowSave(Fault["FakeCluster"]):
    """The next ``saves`` snapshot saves stay in flight for ``seconds`` on the episode clock (or
    ``polls`` health polls), unless the trainer waits for them; a loss meanwhile drops them."""

    kind = "slow_save"
    seconds: float = 0.0
    polls: int = 0
    saves: int = 1

    def __post_init__(self) -> None:
        if (self.seconds > 0) == (self.polls > 0) or self.saves < 1:
            raise FaultSpecError(
                f"slow_save seconds={self.seconds} polls={self.polls} saves={self.saves}: give "
                "exactly one of seconds or polls (> 0) and saves >= 1, "
                "e.g. slow_save@step=3:seconds=4"
            )

    def inject(self, target: FakeCluster) -> list[str]:
        if not isinstance(target, SaveGated):
            raise FaultSpecError(
                f"slow_save needs the in-process fake cluster's save gate; {type(target).__name__} "
                "has none: run the episode on FakeCluster"
            )
        return list(target.save_gate.arm(self.seconds, self.polls, self.saves))

    def describe(self) -> str:
        what = f"{self.seconds:g} s" if self.seconds else f"{self.polls} health polls"
        return f"the next {self.saves} snapshot save(s) held in flight for {what}"


@dataclasses.dataclass(frozen=True)
class Stall(Fault["ClusterBackend"]):
    """The training thread stalls ``seconds`` on the episode clock: time passes (the elastic
    monitor's polls come due, a held save's time runs out) and nothing is trained, as in a
    slow host-side step. A clean rerun uses it to stand where the faulted run's clock stood."""

    kind = "stall"
    seconds: float = 1.0

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise FaultSpecError(f"stall seconds={self.seconds}: use seconds > 0")

    def inject(self, target: ClusterBackend) -> list[str]:
        target.clock.sleep(self.seconds)
        return [f"the training thread stalled {self.seconds:g} s on the episode clock"]

    def describe(self) -> str:
        return f"the training thread stalls {self.seconds:g} s"


@dataclasses.dataclass(frozen=True)
class CallbackError(RaiseError):
    """``code`` raised inside the trainer's elastic-event callback (trigger ``callback=N``: the
    Nth call), as a callback that touches a lost slice sees it."""

    kind = "callback_error"
    only_trigger = "callback"
    code: str = "INTERNAL"
    message: str = "injected error in the elastic-event callback"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attempts != 1:
            raise FaultSpecError(
                f"{self.kind}: attempts={self.attempts}: a callback error fires in one callback "
                "(give each call its own callback=N entry)"
            )

    def describe(self) -> str:
        return f"the elastic-event callback raises {self.code}"
