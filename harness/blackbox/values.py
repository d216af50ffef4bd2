"""What the black-box observer reads off a value a loop hands it: a data position, a batch's
size and sample ids, a tree's shapes and values, and where an error was raised in the loop's own
code (not in the libraries' plumbing)."""

from __future__ import annotations

import json
import os
import re
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

POSITION_KEY = "global_next_index"  # grain ElasticIterator's whole state
#: A grain dataset iterator's state (``MapDataset.to_iter_dataset()``, ``.batch``, ``.map``).
NEXT_INDEX = "next_index"
#: A grain ``DataLoaderIterator``'s state (JSON bytes): each worker's last record index.
LAST_SEEN = "last_seen_indices"


def position_of(state: Any) -> int | None:
    """The global data position (records drawn) a grain iterator state holds: the
    ElasticIterator's, a plain dataset iterator's lone ``next_index``, or a DataLoader's."""
    if isinstance(state, bytes | str) and LAST_SEEN in str(state[:200]):
        try:
            state = json.loads(state)
        except ValueError:
            return None
    if not isinstance(state, Mapping):
        return None
    if POSITION_KEY in state:
        return int(np.asarray(state[POSITION_KEY]))
    if set(state) == {NEXT_INDEX}:  # nested or mixed pipelines hold more: not a position
        return int(np.asarray(state[NEXT_INDEX]))
    return _data_loader_position(state)


def _data_loader_position(state: Mapping[str, Any]) -> int | None:
    """Records a one-host DataLoader drew: worker ``i`` of ``W`` reads records ``i, i+W, ...``
    and last saw ``last``, so it drew ``(last - i) // W + 1`` of them."""
    seen = state.get(LAST_SEEN)
    if not isinstance(seen, Mapping) or "worker_count" not in state:
        return None
    match = re.search(r"shard_count=(\d+)", str(state.get("sampler", "")))
    if match is not None and match.group(1) != "1":
        return None  # a shard's indices interleave with other hosts': not a global position
    workers = max(int(np.asarray(state["worker_count"])), 1)
    return sum((int(np.asarray(last)) - int(i)) // workers + 1 for i, last in seen.items())


def find_position(tree: Any) -> int | None:
    """The grain position stored anywhere in a saved or restored tree."""
    for node in _walk(tree):
        position = position_of(node)
        if position is not None:
            return position
    return None


def _walk(tree: Any) -> Iterator[Any]:
    yield tree
    if isinstance(tree, Mapping):
        for value in tree.values():
            yield from _walk(value)
    elif isinstance(tree, list | tuple):
        for value in tree:
            yield from _walk(value)


def batch_size_of(batch: Any) -> int | None:
    """Rows in a batch; of a tuple's first element (``(batch, iterator state)`` pairs)."""
    import jax

    if isinstance(batch, tuple) and batch:
        batch = batch[0]
    leaves = jax.tree_util.tree_leaves(batch)
    return int(np.shape(leaves[0])[0]) if leaves and np.ndim(leaves[0]) else None


def sample_ids_of(batch: Any) -> list[int] | None:
    """The ``id`` (or ``ids``) field of a batch, or of a tuple's first element."""
    if isinstance(batch, tuple) and batch:
        batch = batch[0]
    if not isinstance(batch, Mapping):
        return None
    for key in ("id", "ids"):
        if key in batch:
            try:
                return [int(i) for i in np.asarray(batch[key]).ravel()]
            except (TypeError, ValueError):  # ids that are not integers: none to judge by
                return None
    return None


def describe_state(tree: Any, values_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """Each array leaf's dtype, shape and values, for the comparison with a fault-free run; a
    leaf that cannot be read (it lives on a lost slice) says why instead of its values.

    With ``values_dir`` the values go to one ``.npy`` file per leaf there (the event holds the
    file's path): a large state never enters the JSON log.
    """
    import jax

    from pathways_chaos.harness.engine.digest import host_array

    out = {}
    for i, (path, leaf) in enumerate(jax.tree_util.tree_flatten_with_path(tree)[0]):
        if not hasattr(leaf, "shape"):
            continue
        dtype = str(getattr(leaf, "dtype", ""))
        try:
            array = host_array(leaf)
        except RuntimeError as unreadable:  # on a lost slice, or deleted: the loop returned it
            shape = [int(n) for n in getattr(leaf, "shape", ())]
            why = f"{type(unreadable).__name__}: {unreadable}"[:300]
            out[jax.tree_util.keystr(path)] = {"dtype": dtype, "shape": shape, "unreadable": why}
            continue
        entry: dict[str, Any] = {"dtype": dtype or array.dtype.name, "shape": list(array.shape)}
        if values_dir is None:
            entry["values"] = array.ravel().tolist()
        else:
            values_dir.mkdir(parents=True, exist_ok=True)
            file = values_dir / f"leaf-{i}.npy"
            np.save(file, array, allow_pickle=False)
            entry["file"] = str(file)
            entry["stored_dtype"] = array.dtype.name
        out[jax.tree_util.keystr(path)] = entry
    return out


#: Frames of these modules are plumbing, not the line a loop's failure came from.
PLUMBING = ("/jax/", "/jaxlib/", "/pathwaysutils/", "/orbax/", "/grain/")
#: The toolkit's own rooms that run inside an episode (the observer, its recorder, clock and
#: fake cluster, the child that hosts the loop): never the loop's line. Anchored at this
#: checkout or install, so a test folder of the same name (tests/harness/blackbox) is not.
_HARNESS = Path(__file__).resolve().parents[1]
TOOLKIT_ROOMS = tuple(f"{_HARNESS / room}{os.sep}" for room in ("blackbox", "engine", "episodes"))


def is_plumbing(filename: str) -> bool:
    """A library's, the standard library's or this toolkit's frame: not the loop's line."""
    if any(p in filename for p in PLUMBING) or filename.startswith(TOOLKIT_ROOMS):
        return True
    return is_standard_library(filename)


def is_standard_library(filename: str) -> bool:
    """A frame of Python's own library (frozen modules included), not of a package installed
    beside it."""
    import sysconfig

    if filename.startswith("<frozen"):
        return True
    stdlib = sysconfig.get_paths()["stdlib"]
    return filename.startswith(stdlib) and "site-packages" not in filename


def installed_package(filename: str) -> str | None:
    """The top-level package of an installed library's file (``site-packages`` or Debian's
    ``dist-packages``), or None for any other file."""
    for folder in ("/site-packages/", "/dist-packages/"):
        if folder in filename:
            return filename.split(folder, 1)[1].split("/")[0].removesuffix(".py")
    return None


def own_frame(frames: list[traceback.FrameSummary]) -> str | None:
    own = [f for f in frames if not is_plumbing(f.filename)]
    if not own:
        return None
    f = own[-1]
    return f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"


def where_raised(error: BaseException) -> str | None:
    """``file:line in function: code`` of the innermost frame of the loop's own code (the
    line that called into a library, never a library's, the standard library's or this
    toolkit's), in the root cause first (``ElasticRuntimeError`` wraps the error the loop met,
    ``raise ... from``). An error raised while another was handled (its ``__context__``: an
    elastic-event callback's, inside pathwaysutils' handler) is its own cause: the one it
    happened during is looked in only when it shows none of the loop's frames."""
    for follow in ("__cause__", "__context__"):
        chain: list[BaseException] = []
        current: BaseException | None = error
        while current is not None and current not in chain:
            chain.append(current)
            current = current.__cause__ or (
                current.__context__ if follow == "__context__" else None
            )
        for e in reversed(chain):
            where = own_frame(traceback.extract_tb(e.__traceback__))
            if where:
                return where
    return None


def shapes(tree: Any) -> dict[str, list[Any]]:
    """Each array leaf's shape and dtype by path (a restore that changes one is named)."""
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is not None and dtype is not None:
            out[jax.tree_util.keystr(path)] = [list(shape), str(dtype)]  # key<fry> too
    return out


def elastic_inner_iterator() -> Any:
    """The class ElasticIterator hands out from ``iter()`` and delegates ``next()`` to."""
    try:
        from grain._src.python.dataset import elastic_iterator
    except ImportError:
        return None
    inner = getattr(elastic_iterator, "_ElasticMapDatasetIterator", None)
    if inner is None or "__next__" not in inner.__dict__ or "set_state" not in inner.__dict__:
        return None
    return inner
