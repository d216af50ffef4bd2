"""Deliberately broken trainers: each a real bug, each one a property must catch."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.reference.trainer import ReferenceTrainer


class IteratorRestoredFromCurrentPosition(ReferenceTrainer):
    """Restores the model from the snapshot but leaves the data iterator where it is.

    A fresh iterator starts at sample 0, so every sample since the start is eaten again.
    """

    def restore_snapshot(self, snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        restored = snapshotter.load(
            {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
        )
        return restored["state"], int(restored["step"]) + 1
