"""What an episode and its slice faults need of a cluster: the fake, the bridged one, or Pathways.

Its own light module, so ``faults`` can type against it without importing JAX or the trainer.
``ClusterBackend`` is what every backend has; the ``runtime_checkable`` protocols after it are
what only some have, so a caller asks ``isinstance(cluster, KubeBacked)`` (checked by mypy and
found by a reader) instead of probing for an attribute by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pathways_chaos.harness.engine.clock import Clock
    from pathways_chaos.harness.engine.fake_cluster import SliceState
    from pathways_chaos.harness.engine.save_gate import SaveGate
    from pathways_chaos.harness.engine.topology import SliceTopology


class ClusterBackend(Protocol):
    """Slices that can be lost and repaired, on devices an episode's trainer runs on."""

    # Read-only: a backend that wraps another (MtcCluster) forwards them as properties.
    @property
    def clock(self) -> Clock: ...
    @property
    def devices(self) -> list[Any]: ...
    @property
    def topology(self) -> SliceTopology: ...

    def check_access(self, slices: Iterable[int]) -> None: ...
    def lose_slice(
        self, slice_index: int, code: str = ..., repair_after_polls: int | None = ...
    ) -> list[str]: ...
    def repair_slice(self, slice_index: int, after_polls: int = ...) -> list[str]: ...


@runtime_checkable
class KubeBacked(Protocol):
    """Bridged to Kubernetes (``--cluster``): Kubernetes faults act through ``target``, and
    unarmed it only says what a schedule would do."""

    @property
    def target(self) -> object: ...  # a faults.KubeTarget (a higher room: not named here)
    def dry_run(self, plan: Any, initially_down: Iterable[int] = ...) -> list[str]: ...


@runtime_checkable
class SaveGated(Protocol):
    """The fake's: each snapshot save finishes before training goes on, and ``slow_save``
    holds one in flight on the episode clock."""

    @property
    def save_gate(self) -> SaveGate: ...


@runtime_checkable
class SliceStates(Protocol):
    """Says which slices are up and which are down (the fake; real Pathways does not)."""

    def states(self) -> dict[int, SliceState]: ...
    def down_slices(self) -> frozenset[int]: ...


@runtime_checkable
class Unguardable(Protocol):
    """Can lift its guard on lost slices for a while (the one-device replay runs on device 0,
    whatever the episode did to its slice)."""

    def unguarded(self) -> AbstractContextManager[None]: ...


@runtime_checkable
class DeviceListeners(Protocol):
    """Tells listeners where arrays are placed and which slice-down errors it raised (the
    black-box observer's view of a user's loop on the fake)."""

    def add_placement_listener(self, listener: Callable[[Any], None]) -> None: ...
    def remove_placement_listener(self, listener: Callable[[Any], None]) -> None: ...
    def add_error_listener(self, listener: Callable[[BaseException], None]) -> None: ...
    def remove_error_listener(self, listener: Callable[[BaseException], None]) -> None: ...


@runtime_checkable
class RepairListeners(Protocol):
    """Says when a lost slice came back by itself, after its health polls: where that fell in
    the subject's events is what a clean rerun gives the slice back after (``clean_rerun``)."""

    def add_repair_listener(self, listener: Callable[[int], None]) -> None: ...
    def remove_repair_listener(self, listener: Callable[[int], None]) -> None: ...


@runtime_checkable
class TimedRepair(Protocol):
    """Gives a lost slice back for every health poll from some seconds on its clock on."""

    def repair_slice_after(self, slice_index: int, seconds: float) -> list[str]: ...


@runtime_checkable
class ErrorArming(Protocol):
    """Makes the next use of a device raise an error once, no slice lost (``raise_error`` on
    a loop: a program error comes from a computation, not from the draw that triggered it)."""

    def arm_error(self, make_error: Callable[[], BaseException]) -> None: ...
    def disarm_error(self) -> bool: ...


@runtime_checkable
class AccessCounting(Protocol):
    """Counts each batch's use of the mesh's slices: a flapping slice fails again after so many."""

    def count_access(self, slices: Iterable[int]) -> list[int]: ...


@runtime_checkable
class MtcHosts(Protocol):
    """Has Multi-Tier Checkpointing hosts, which an MTC fault may name."""

    @property
    def mtc_hosts(self) -> int: ...


@runtime_checkable
class DeviceSlices(Protocol):
    """Knows the slice of each of its devices (the fake's hosts; MTC scenarios need them)."""

    def slice_of(self, device: Any) -> int: ...
