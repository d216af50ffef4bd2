"""A final state's values as the judge reads them: from the ``.npy`` files a child wrote beside
the log (memory-mapped, never unpickled) or from an event, compared chunk by chunk so two
whole states of a large model never sit on the host at once."""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Literal, cast

import numpy as np

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.engine.untrusted_files import UntrustedFileError, open_regular, shown
from pathways_chaos.harness.errors import ChaosError
from pathways_chaos.harness.judging.replay import REPLAY_ATOL, REPLAY_RTOL
from pathways_chaos.harness.judging.wording import leaf_name

#: What a values file changed under the judge says, whichever judge read it.
CHANGED = "was changed after the run that wrote it ended"
#: Why a value file a log names is not read: not one its runs wrote beside it.
NOT_IN_FOLDER = (
    "is not a regular file in the log's values folder (the log was edited or moved: keep it "
    "beside its values folder, as the episode left them)"
)
#: A leaf's key (set by ``vet_value_files``, never taken from a log) holding the folders its
#: value file must lie in.
FOLDERS = "_values_folders"


class ValuesChanged(Exception):
    """A values file differs from what its run wrote: a judge reading it cannot judge."""


class ValueFileRefused(Exception):
    """A value file a log names that is not one its run wrote (a FIFO, a device, a file out of
    the log's values folder, a file of another shape): the comparison is not judged."""

    def __init__(self, file: object, why: str = NOT_IN_FOLDER) -> None:
        super().__init__(f"names value file {shown(file)}, which {why}")


def vet_value_files(events: Iterable[Event], log: str | os.PathLike[str]) -> None:
    """Ties each final-state leaf's value file of a log read from ``log`` to the values folder
    beside it (``values_folders``): a log anyone may edit could name a FIFO (the judge would
    block for ever), ``/dev/zero`` or ``/etc/passwd``; ``leaf_array`` reads none of them."""
    from pathways_chaos.harness.engine.recorder import values_folders

    folders = [str(_resolved(folder)) for folder in values_folders(Path(log))]
    for end in events:
        final = end.get("final_state") if end.get("kind") == "run_end" else None
        for leaf in (final or {}).values() if isinstance(final, dict) else ():
            if isinstance(leaf, dict):
                leaf[FOLDERS] = folders
                leaf.pop("sha256", None)  # a seal is the judging process's own, never a log's


def _resolved(path: Path) -> Path:
    """``path`` with every symlink resolved (relative to the working folder, as the writer's
    were); a loop of symlinks or a name too long is left as given (nothing is inside it)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def _open_value_file(leaf: dict[str, Any]) -> int:
    """An open descriptor of the leaf's value file, checked before any read: inside the
    folders ``vet_value_files`` named (when it was called), a regular file (opened with
    ``O_NOFOLLOW | O_NONBLOCK``: a FIFO never blocks), or ``ValueFileRefused``."""
    name = leaf["file"]
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueFileRefused(name)
    path = Path(name)
    folders = leaf.get(FOLDERS)
    if folders is not None:
        path = _resolved(path)
        if not any(path.is_relative_to(folder) for folder in folders):
            raise ValueFileRefused(name)
    try:
        return open_regular(path, what="value file", follow_symlinks=False)
    except UntrustedFileError:  # a folder, FIFO, device, symlink, or no such file
        raise ValueFileRefused(name) from None
    except ChaosError as unreadable:  # permission denied...
        raise ValueFileRefused(
            name, f"cannot be read ({unreadable}): fix its permissions"
        ) from None


def _sha256(f: IO[bytes]) -> str:
    """The open file's SHA-256, read in chunks (a large state never sits whole in memory)."""
    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 22), b""):
        h.update(chunk)
    f.seek(0)
    return h.hexdigest()


def file_sha256(path: str) -> str:
    """The value file's SHA-256, opened as ``leaf_array`` opens it (never blocks on a FIFO)."""
    with os.fdopen(open_regular(Path(path), what="value file", follow_symlinks=False), "rb") as f:
        return _sha256(f)


def seal(end: dict[str, Any]) -> None:
    """Notes, in the judging process's copy of a ``run_end``, the SHA-256 of each values file
    as the run left it: the loop of a later episode may write into that folder too."""
    for leaf in (end.get("final_state") or {}).values():
        if not isinstance(leaf, dict):
            continue
        leaf.pop("sha256", None)  # only the judging process's own seal counts
        if isinstance(leaf.get("file"), str):
            with contextlib.suppress(OSError, ChaosError):  # not a file: leaf_array says so
                leaf["sha256"] = file_sha256(leaf["file"])


def leaf_array(leaf: dict[str, Any]) -> np.ndarray:
    """A final-state leaf: from its ``.npy`` file beside the log (memory-mapped, never
    unpickled: the child that wrote it ran the loop), or from the values in the event. A value
    file that is not one its run wrote raises ``ValueFileRefused``."""
    if "file" not in leaf:
        return np.asarray(leaf["values"], dtype=leaf["dtype"]).reshape(leaf["shape"])
    try:
        fd = _open_value_file(leaf)
    except ValueFileRefused:
        if "sha256" not in leaf:
            raise
        raise ValuesChanged(  # it was a regular file there when its run ended
            f"{leaf['file']} was removed or replaced after the run that wrote it ended: a "
            "later run of the loop changed pathways-chaos's folder, where only its recorder "
            "writes"
        ) from None
    with os.fdopen(fd, "rb") as f:
        if "sha256" in leaf and _sha256(f) != leaf["sha256"]:
            raise ValuesChanged(
                f"{leaf['file']} {CHANGED} (its SHA-256 "
                "differs): a later run of the loop wrote into pathways-chaos's folder, where only "
                "its recorder writes"
            )
        return _load_npy(f, leaf)


def _load_npy(f: IO[bytes], leaf: dict[str, Any]) -> np.ndarray:
    """The array of an open ``.npy`` file whose header, dtype and size agree with the leaf's
    shape (memory-mapped; a 0-d or empty one read whole), or ``ValueFileRefused``."""
    fmt = np.lib.format
    name = leaf["file"]
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"npy format {version}")
    except (ValueError, EOFError, SyntaxError, TypeError):
        raise ValueFileRefused(
            name, "is not a .npy file (the log or the file was edited)"
        ) from None
    if dtype.hasobject:
        raise ValueFileRefused(name, "holds pickled objects, not numbers: it is never unpickled")
    if list(shape) != leaf.get("shape"):  # a list, as the log holds it
        raise ValueFileRefused(
            name,
            f"holds shape {list(shape)} where the log says {shown(leaf.get('shape'))} (edited?)",
        )
    offset, nbytes = f.tell(), math.prod(shape) * dtype.itemsize
    size = os.fstat(f.fileno()).st_size
    if size != offset + nbytes:
        raise ValueFileRefused(
            name, f"is {size} bytes, not the {offset + nbytes} its header says (edited or cut?)"
        )
    order: Literal["C", "F"] = "F" if fortran else "C"
    dims = tuple(int(n) for n in shape)
    if not dims or not nbytes:  # a 0-d array maps as shape (1,), an empty one not at all
        return np.frombuffer(f.read(nbytes), dtype=dtype).reshape(dims, order=order).copy()
    # np.memmap maps the open descriptor (the file checked above), never the name again
    return np.memmap(cast(Any, f), dtype=dtype, mode="r", offset=offset, shape=dims, order=order)


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
        what = (end or {}).get("returned")
        said = "no state" if what in (None, "NoneType") else f"a value with no array in it ({what})"
        return (
            f"the loop returned {said} and saved nothing (return the final train state, a "
            "pytree of arrays, to have it compared)"
        )
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
            a = leaf_array(got[path])
        except ValueFileRefused as refused:
            return f"the log {refused}"
        except ValuesChanged as changed:  # evidence changed under the judge: the loop's doing
            return [str(changed)]
        try:
            b = leaf_array(want[path])
        except ValueFileRefused as refused:
            return f"the log of {against} {refused}"
        except ValuesChanged as changed:
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
