"""What an episode and its slice faults need of a cluster: the fake, the bridged one, or Pathways.

Its own light module, so ``faults`` can type against it without importing JAX or the trainer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathways_chaos.harness.engine.clock import Clock
    from pathways_chaos.harness.engine.topology import SliceTopology


class ClusterBackend(Protocol):
    """Slices that can be lost and repaired, on devices an episode's trainer runs on."""

    clock: Clock
    devices: list[Any]
    topology: SliceTopology

    def check_access(self, slices: Iterable[int]) -> None: ...
    def lose_slice(
        self, slice_index: int, code: str = ..., repair_after_polls: int | None = ...
    ) -> list[str]: ...
    def repair_slice(self, slice_index: int, after_polls: int = ...) -> list[str]: ...
