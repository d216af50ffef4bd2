"""A final state's values as the judge reads them: from the ``.npy`` files a child wrote beside
the log (memory-mapped, never unpickled) or from an event, compared chunk by chunk so two
whole states of a large model never sit on the host at once."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
from typing import Any

import numpy as np

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.replay import REPLAY_ATOL, REPLAY_RTOL
from pathways_chaos.harness.judging.wording import leaf_name

#: What a values file changed under the judge says, whichever judge read it.
CHANGED = "was changed after the run that wrote it ended"


class ValuesChanged(Exception):
    """A values file differs from what its run wrote: a judge reading it cannot judge."""


def file_sha256(path: str) -> str:
    """The file's SHA-256, read in chunks (a large state never sits whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def seal(end: dict[str, Any]) -> None:
    """Notes, in the judging process's copy of a ``run_end``, the SHA-256 of each values file
    as the run left it: the loop of a later episode may write into that folder too."""
    for leaf in (end.get("final_state") or {}).values():
        if isinstance(leaf, dict) and isinstance(leaf.get("file"), str):
            with contextlib.suppress(OSError):
                leaf["sha256"] = file_sha256(leaf["file"])


def leaf_array(leaf: dict[str, Any]) -> np.ndarray:
    """A final-state leaf: from its ``.npy`` file beside the log (memory-mapped, never
    unpickled: the child that wrote it ran the loop), or from the values in the event."""
    if "sha256" in leaf and file_sha256(str(leaf["file"])) != leaf["sha256"]:
        raise ValuesChanged(
            f"{leaf['file']} {CHANGED} (its SHA-256 "
            "differs): a later run of the loop wrote into pathways-chaos's folder, where only "
            "its recorder writes"
        )
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


def compare_final_states(
    end: Event | None,
    base_end: Event | None,
    completed: bool,
    against: str = "the fault-free run",
) -> list[str] | str:
    """A run's final state against ``against``'s, leaf by leaf within the replay tolerance:
    violations, or why it cannot be compared."""
    if not completed:
        return "the run did not complete"
    if end is None or not end.get("final_state"):
        return "the loop returned no state (return the final train state to have it compared)"
    if base_end is None or not base_end.get("final_state"):
        return f"{against} returned no state"
    got, want = end["final_state"], base_end["final_state"]
    if sorted(got) != sorted(want):
        return [f"final state leaves {sorted(got)} differ from those of {against} {sorted(want)}"]
    for path in sorted(got):
        if "unreadable" in want[path]:
            why = want[path]["unreadable"]
            return f"{against}'s final state cannot be read at {leaf_name(path)}: {why}"
        if "unreadable" in got[path]:  # the completed judge names a returned one
            return f"the final state cannot be read at {leaf_name(path)}: {got[path]['unreadable']}"
        try:
            a, b = leaf_array(got[path]), leaf_array(want[path])
        except ValuesChanged as changed:  # evidence changed under the judge: the loop's doing
            return [str(changed)]
        if a.shape != b.shape:
            return [f"{leaf_name(path)}: shape {a.shape} differs from {against}'s {b.shape}"]
        worst = worst_outside_tolerance(a, b)
        if worst is not None:
            counter = ""
            if a.dtype.kind in "iu" and a.size == 1:
                got_n, want_n = int(a.ravel()[0]), int(b.ravel()[0])
                counter = f": an integer counter at {got_n} where {against} has {want_n}, " + (
                    "so it was re-initialised or not restored after a recovery (is it in the "
                    "snapshot? was it rebuilt, at a restore or a scale-up?), or updates were "
                    "skipped"
                    if got_n < want_n
                    else "so it also counted work a failure threw away (is it restored from "
                    "the snapshot?)"
                )
            return [
                f"final state differs from {against} at {leaf_name(path)}: max abs diff "
                f"{worst:.3g} (tolerance rtol={REPLAY_RTOL}, atol={REPLAY_ATOL}){counter}"
            ]
    return []
