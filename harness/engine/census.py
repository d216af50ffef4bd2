"""The live-array census: what an attempt still holds, for the no-leak and dead-device checks.

A full ``gc.collect()`` costs ~90 ms in a test process (every JAX, hypothesis and pytest object
is scanned), and most censuses need none: garbage only ever adds to a count. So a ``Census``
collects on its first count (the baseline must not include an earlier test's garbage) and then
only when a quick count finds more device arrays than the baseline, recording the recount.
A quick count at or under the baseline can only overstate, never hide, what is alive, so the
no-leak verdict is the same. Arrays on a lost slice are deleted when it is lost (garbage
included), so they never reach a count either way.
"""

from __future__ import annotations

import gc
from typing import Any

PINNED_HOST = "pinned_host"


def count_live_arrays() -> dict[str, Any]:
    """Live arrays by memory kind, and every device they have a shard on (no collection)."""
    import jax

    kinds: dict[str, int] = {}
    devices: set[int] = set()
    for array in jax.live_arrays():
        try:
            kind = str(array.sharding.memory_kind)
            devices |= {d.id for d in array.devices()}
        except RuntimeError:  # deleted (a lost slice's array)
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"by_kind": kinds, "device_ids": sorted(devices)}


def live_census() -> dict[str, Any]:
    """A full collection, then the count: exact, and the price of one full ``gc``."""
    gc.collect()
    return count_live_arrays()


def pinned_host_arrays() -> int:
    """Live pinned-host arrays (what a Snapshotter's snapshots are made of), exactly."""
    census = count_live_arrays()
    if census["by_kind"].get(PINNED_HOST, 0):
        census = live_census()  # only garbage could make a non-zero count wrong
    return int(census["by_kind"].get(PINNED_HOST, 0))


class Census:
    """One trainer run's censuses: a full collection only when the quick count is suspect."""

    def __init__(self) -> None:
        self.baseline: int | None = None  # device arrays at the first census
        self.collections = 0

    def __call__(self, judged: bool = True) -> dict[str, Any]:
        """``judged=False``: a count the no-leak check skips (an in-loop scale-up, where the
        last batch is legitimately alive) is taken quick, never collected."""
        census = None
        if self.baseline is not None and not judged:
            return count_live_arrays()
        if self.baseline is not None:
            census = count_live_arrays()
            if census["by_kind"].get("device", 0) > self.baseline:
                census = None
        if census is None:
            self.collections += 1
            census = live_census()
        if self.baseline is None:
            self.baseline = census["by_kind"].get("device", 0)
        return census
