"""Which arrays each execution consumed and produced, so the judge can follow what a loop trains.

Draws and saves say what a loop *touched*; only the data flow says what its final state was
*trained on*. While an episode runs, the lineage seam gives every array the loop's code makes a
node id and writes, as events of the oracle's log:

- ``exec``: one per compiled program run on the main thread (a jitted step, an eager op), its
  input and output nodes and the devices it ran on;
- ``placed``: an array made from host data (``device_put``, a host argument of a jitted call),
  linked to the batch draw whose buffers it came from when it did, or a copy of another array
  (a reshard, a move to pinned host);
- node ids on ``snapshot_save`` / ``checkpoint_save`` (what was saved, by path), on
  ``restore_end`` (the restored leaves get fresh nodes: the judge links them to the save), and
  on ``run_end`` (the state ``main`` returned, traced through the host copy it made).

Identity is by object (weak references, never kept alive); values are never read. JAX's C++
jit fast path skips Python, so while the seam is installed no fast path is kept (every call of
a jitted function goes through the Python dispatch, where the execution is seen); the compiled
programs themselves are reused. Six JAX names are replaced, all private but
``ArrayImpl.__array__``, and all restored on exit:
``pjit._get_fastpath_data``, ``pxla.MeshExecutable.create_cpp_call``,
``pxla.ExecuteReplicated.__call__``,
``dispatch._batched_device_put_impl`` (``jax.device_put``),
``pxla.batched_device_put`` (an array assembled from per-device pieces outside
``device_put``: ``multihost_utils.host_local_array_to_global_array``,
``jax.make_array_from_callback``, ``make_array_from_process_local_data``, as ported
multi-controller code places its batches) and ``ArrayImpl.__array__``.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

#: Draws whose host buffers are remembered for linking placements (older ones are dropped).
DRAWS_REMEMBERED = 64

Emit = Callable[..., object]  # the recorder's emit, whose returned event is not needed here


class LineageSeam:
    """Installs the hooks on enter and removes them on exit, whatever happened."""

    def __init__(self, emit: Emit, ids: Callable[[], dict[str, int]]) -> None:
        self._emit = emit
        self._ids = ids
        self._main = threading.get_ident()
        self._saved: list[tuple[Any, str, Any]] = []
        self._node_of: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._host_of: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._next_node = 0
        self._next_exec = 0
        self._draws: collections.deque[tuple[int, list[tuple[int, int, Callable[[], Any]]]]] = (
            collections.deque(maxlen=DRAWS_REMEMBERED)
        )
        self._busy = False  # inside an execution (its argument handling is not a placement)
        self._putting = False  # inside jax.device_put (its pieces are not placements)
        self.paused = 0  # the toolkit's own reads (digests) are not the loop's
        self.failed = ""  # why the recording stopped (a bug of this toolkit's), if it did
        self._made_in: dict[int, str] = {}  # node -> "run:attempt" that made it

    # -- install / remove -------------------------------------------------------------------

    def numbering(self) -> tuple[int, int]:
        """The next node and execution numbers: a preemption's next run goes on from them, so
        the judge's graph spans every run."""
        return self._next_node, self._next_exec

    def go_on_from(self, nodes: int, execs: int) -> None:
        self._next_node, self._next_exec = nodes, execs

    def __enter__(self) -> LineageSeam:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from jax._src import array as jax_array
        from jax._src import dispatch, pjit
        from jax._src.interpreters import pxla

        seam = self
        execute = pxla.ExecuteReplicated.__call__
        device_put = dispatch._batched_device_put_impl
        assemble = pxla.batched_device_put
        to_host = jax_array.ArrayImpl.__array__

        def no_fastpath(*args: Any, **kwargs: Any) -> None:
            return None

        def traced_execute(executable: Any, *args: Any) -> Any:
            if seam.paused or threading.get_ident() != seam._main:
                return execute(executable, *args)
            seam._busy = True
            try:
                out = execute(executable, *args)
            finally:
                seam._busy = False
            seam._guarded(seam._executed, executable, args, out)
            return out

        def traced_device_put(*xs: Any, **kwargs: Any) -> Any:
            outer, seam._putting = seam._putting, True
            try:
                out = device_put(*xs, **kwargs)
            finally:
                seam._putting = outer
            if not seam._busy and not seam.paused and threading.get_ident() == seam._main:
                seam._guarded(seam._placed, xs, out)
            return out

        def traced_assemble(*args: Any, **kwargs: Any) -> Any:
            out = assemble(*args, **kwargs)
            if (
                not seam._busy
                and not seam._putting
                and not seam.paused
                and threading.get_ident() == seam._main
            ):
                pieces = args[2] if len(args) > 2 else kwargs.get("xs", ())
                seam._guarded(seam._assembled, pieces, out)
            return out

        def traced_to_host(array: Any, *args: Any, **kwargs: Any) -> Any:
            host = to_host(array, *args, **kwargs)
            if not seam.paused and threading.get_ident() == seam._main:
                node = seam._known(array)
                if node is not None:
                    with contextlib.suppress(TypeError):
                        seam._host_of[id(host)] = (weakref.ref(host), node)
            return host

        self._patch(pjit, "_get_fastpath_data", no_fastpath)
        # An ahead-of-time compiled step (jit(f).lower(...).compile()) makes its own C++ call
        # at its first call; without one it calls through Python, where it is seen.
        self._patch(pxla.MeshExecutable, "create_cpp_call", no_fastpath)
        self._patch(pxla.ExecuteReplicated, "__call__", traced_execute)
        self._patch(dispatch, "_batched_device_put_impl", traced_device_put)
        self._patch(pxla, "batched_device_put", traced_assemble)
        self._patch(jax_array.ArrayImpl, "__array__", traced_to_host)
        _clear_fast_paths()

    def stop(self) -> None:
        if not self._saved:
            return
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
        _clear_fast_paths()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def _guarded(self, record: Callable[..., None], *args: Any) -> None:
        """A failure of the recording is this toolkit's bug: it turns the seam off (the chain
        judges then say so), never reaches the loop."""
        if self.failed:
            return
        try:
            record(*args)
        except Exception as error:
            self.failed = f"{type(error).__name__}: {error}"[:300]
            self._emit("lineage_failed", **self._ids(), error=self.failed)

    # -- nodes ----------------------------------------------------------------------------------
    def _known(self, array: Any) -> int | None:
        array = _physical(array)
        entry = self._node_of.get(id(array))
        if entry is not None and entry[0]() is array:
            return entry[1]
        return None

    def _new(self, array: Any) -> int:
        node = self._next_node
        self._next_node += 1
        ids = self._ids()
        self._made_in[node] = f"{ids['run']}:{ids['attempt']}"
        array = _physical(array)
        with contextlib.suppress(TypeError):
            self._node_of[id(array)] = (weakref.ref(array), node)
        return node

    def node(self, array: Any) -> int:
        """The array's node; an array made outside the seam's sight gets one (``unknown``)."""
        known = self._known(array)
        if known is not None:
            return known
        node = self._new(array)
        self._emit("placed", **self._ids(), node=node, source="unknown")
        return node

    def _host_arg(self, value: Any) -> dict[str, Any]:
        """Where a host value placed on devices came from: a drawn batch's buffers, or not."""
        if isinstance(value, np.ndarray) and value.size:
            start = value.__array_interface__["data"][0]
            for draw, ranges in reversed(self._draws):
                # Only while the batch's memory is alive: once freed, a later array may be
                # given the same addresses, and is no sample of that batch.
                if any(lo <= start < hi and owner() is not None for lo, hi, owner in ranges):
                    return {"source": "batch", "batch": draw}
        return {"source": "host"}

    # -- what the hooks record -------------------------------------------------------------------
    def _placed(self, args: Any, out: Any) -> None:
        ids = self._ids()
        for arg, array in zip(args, out, strict=False):
            if array is arg or self._known(array) is not None or not hasattr(array, "sharding"):
                continue  # not moved, or already made by an execution (a reshard)
            node = self._new(array)
            src = self._known(arg) if not isinstance(arg, np.ndarray) else None
            if src is not None:
                self._emit("placed", **ids, node=node, source="array", src=src)
            else:
                self._emit("placed", **ids, node=node, **self._host_arg(arg))

    def _assembled(self, pieces: Any, out: Any) -> None:
        """One array made from per-device pieces: from a known array's (a reshard), else from a
        drawn batch's host buffers (views of it, as ``host_local_array_to_global_array`` cuts
        them), else from other host values."""
        if not hasattr(out, "sharding") or self._known(out) is not None:
            return
        ids, node = self._ids(), self._new(out)
        pieces = list(pieces)
        for piece in pieces:
            src = None if isinstance(piece, np.ndarray) else self._known(piece)
            if src is not None:
                self._emit("placed", **ids, node=node, source="array", src=src)
                return
        for piece in pieces:
            if isinstance(piece, np.ndarray):
                where = self._host_arg(piece)
                if where["source"] == "batch":
                    self._emit("placed", **ids, node=node, **where)
                    return
        self._emit("placed", **ids, node=node, source="host")

    def _executed(self, executable: Any, args: Any, out: Any) -> None:
        ids = self._ids()
        inputs = []
        for arg in args:
            if isinstance(arg, np.ndarray):
                node = self._new(arg)  # a host argument: placed by the call itself
                self._emit("placed", **ids, node=node, **self._host_arg(arg))
                inputs.append(node)
            elif hasattr(arg, "sharding"):
                inputs.append(self.node(arg))
        outputs = [self._new(o) for o in out if hasattr(o, "sharding")]
        devices = sorted(d.id for d in getattr(executable, "_local_devices", ()) or ())
        n = self._next_exec
        self._next_exec += 1
        self._emit(
            "exec",
            **ids,
            n=n,
            name=str(getattr(executable, "name", "?")),
            inputs=inputs,
            outputs=outputs,
            devices=devices,
        )

    # -- what the observer tells it --------------------------------------------------------------
    def drawn(self, batch_number: int, batch: Any) -> None:
        """A batch left the iterator: remember its host buffers for linking placements."""
        import jax

        ranges = []
        for leaf in jax.tree_util.tree_leaves(batch):
            if isinstance(leaf, np.ndarray) and leaf.size:
                start = leaf.__array_interface__["data"][0]
                ranges.append((start, start + leaf.nbytes, _memory_owner(leaf)))
        self._draws.append((batch_number, ranges))

    def nodes_of(self, tree: Any, *, fresh: bool = False) -> dict[str, int]:
        """Each device-array leaf's node by path; ``fresh`` gives restored leaves new nodes."""
        import jax

        out = {}
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if not hasattr(leaf, "sharding") or isinstance(leaf, jax.ShapeDtypeStruct):
                continue
            out[jax.tree_util.keystr(path)] = self._new(leaf) if fresh else self.node(leaf)
        return out

    def final_nodes(self, tree: Any) -> dict[str, int | None]:
        """The node behind each leaf ``main`` returned: the array itself, or the array whose
        host copy it is (``jax.device_get``); ``None`` for a leaf never seen on a device."""
        import jax

        out: dict[str, int | None] = {}
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if not hasattr(leaf, "shape"):
                continue
            node = self._known(leaf)
            if node is None:
                entry = self._host_of.get(id(leaf))
                if entry is None and isinstance(leaf, np.ndarray) and leaf.base is not None:
                    entry = self._host_of.get(id(leaf.base))
                    if entry is not None and entry[0]() is not leaf.base:
                        entry = None
                elif entry is not None and entry[0]() is not leaf:
                    entry = None
                node = None if entry is None else entry[1]
            out[jax.tree_util.keystr(path)] = node
        return out

    def alive_from(self, attempts: set[str]) -> dict[str, int]:
        """Live device arrays made by these attempts (``"run:attempt"``), after a garbage
        collection: a transient holder (a worker thread, a log record) is gone, a leak is not."""
        if not attempts:
            return {}
        gc.collect()
        return {k: n for k, n in self.live_by_attempt().items() if k in attempts}

    def live_by_attempt(self) -> dict[str, int]:
        """Device arrays the loop made that are still alive, by ``"run:attempt"`` of the
        attempt that made them: logical arrays only (per-device shards never get a node), 0-d
        ones left out. An array the fake deleted with a lost slice counts while the loop still
        holds it: on Pathways its buffers on the slices that stayed are still allocated."""
        import jax

        counts: dict[str, int] = {}
        for ref, node in list(self._node_of.values()):
            live: Any = ref()
            if not isinstance(live, jax.Array):  # gone, or a drawn batch's host buffer
                continue
            try:
                if str(live.sharding.memory_kind) != "device" or not live.shape:
                    continue
            except RuntimeError:
                continue
            key = self._made_in.get(node)
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
        return counts


def _clear_fast_paths() -> None:
    from jax._src.lib import _jax

    _jax.PjitFunctionCache.clear_all()


def _physical(array: Any) -> Any:
    """A typed PRNG key array's buffer (what executions consume, and what ``key_data`` and
    ``wrap_key_data`` pass along unchanged); any other array itself. One node for both, so a
    key saved as ``key_data`` and wrapped back after the restore is followed, not re-made."""
    base = getattr(array, "_base_array", None)
    return array if base is None or not hasattr(array, "_impl") else base


def _memory_owner(leaf: np.ndarray) -> Callable[[], Any]:
    """A weak reference to the array that owns ``leaf``'s memory (a view's base), so a drawn
    batch's addresses are trusted only while that memory is alive."""
    owner: Any = leaf
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    try:
        return weakref.ref(owner)
    except TypeError:  # not weakly referable: trusted as long as the draw is remembered
        return lambda: owner
