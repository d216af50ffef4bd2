"""A final state's values as the judge reads them: from the ``.npy`` files a child wrote beside
the log (memory-mapped, never unpickled) or from an event, compared chunk by chunk so two
whole states of a large model never sit on the host at once."""

from __future__ import annotations

import contextlib
import mmap
from typing import Any

import numpy as np

from pathways_chaos.harness.judging.replay import REPLAY_ATOL, REPLAY_RTOL


def leaf_array(leaf: dict[str, Any]) -> np.ndarray:
    """A final-state leaf: from its ``.npy`` file beside the log (memory-mapped, never
    unpickled: the child that wrote it ran the loop), or from the values in the event."""
    if "file" in leaf:
        # a 0-d array maps as shape (1,): read it whole
        mapped = bool(leaf["shape"])
        array = np.load(str(leaf["file"]), mmap_mode="r" if mapped else None, allow_pickle=False)
        if list(array.shape) != list(leaf["shape"]):
            raise ValueError(f"{leaf['file']} holds shape {array.shape}, the log {leaf['shape']}")
        return array
    return np.asarray(leaf["values"], dtype=leaf["dtype"]).reshape(leaf["shape"])


#: Elements compared at a time (8 MiB per float64 temporary): two whole states of a large
#: model never sit on the host.
_CHUNK = 1 << 20


def worst_outside_tolerance(a: np.ndarray, b: np.ndarray) -> float | None:
    """The largest absolute difference when ``a`` and ``b`` differ beyond the replay
    tolerance, else None; compared chunk by chunk, and the pages of a memory-mapped file
    already compared are let go (a mapped file's pages read count as this process's memory
    until then)."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    worst, differ = 0.0, False
    for start in range(0, flat_a.size, _CHUNK):
        x = np.asarray(flat_a[start : start + _CHUNK], dtype=np.float64)
        y = np.asarray(flat_b[start : start + _CHUNK], dtype=np.float64)
        if not np.allclose(x, y, rtol=REPLAY_RTOL, atol=REPLAY_ATOL, equal_nan=True):
            differ = True
        diff = np.abs(x - y)
        if diff.size:
            worst = max(worst, float(np.nanmax(diff)) if not np.all(np.isnan(diff)) else 0.0)
        del x, y, diff
        _release(a)
        _release(b)
    return worst if differ else None


def _release(array: np.ndarray) -> None:
    """Drops the pages of a read-only memory-mapped array from this process (read again from
    the file if touched again); nothing for any other array."""
    mapping = getattr(array, "_mmap", None)
    if isinstance(mapping, mmap.mmap) and hasattr(mapping, "madvise"):
        with contextlib.suppress(OSError, ValueError):
            mapping.madvise(mmap.MADV_DONTNEED)
