"""The only places pathwaysutils and JAX are patched, each installed and removed as one unit.

Two seams (see the README) let the real ``Manager`` and ``elastic_retry`` run on CPU slices:

- ``elastic.get_slice_to_devices``: CPU devices have no ``slice_index``; group them by slice.
- ``elastic.DefaultSliceHealthChecker._simple_execution``: a dead slice's result raises a
  slice-down ``JaxRuntimeError`` on ``block_until_ready``, as a real dead slice does.

With a fake clock, two more module attributes of the same package are swapped so that its
waits cost no real time: ``elastic.time`` (``wait_for_slices`` reads ``time.time`` and calls
``time.sleep``) and ``manager.threading`` (its ``Event``, which the monitor thread waits on
between polls, and its ``Thread``, so the clock holds time still until the monitor thread first
waits). Everything else runs unchanged: ``wait_for_slices``, ``get_active_slice_indices``,
``validate``, ``is_error_due_to_slice_down``, the monitor thread and the retry loop.

A third, ``JaxDeviceLossSeam``, makes any code (a user's own loop, not only the reference
trainer) see a lost slice as Pathways shows it: a slice-down ``JaxRuntimeError``.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pathways_chaos.harness.engine.clock import Clock
from pathways_chaos.harness.errors import ChaosConfigError

SliceOf = Callable[[Any], int]
HealthCheck = Callable[[int, Sequence[Any]], Any]


class _ThreadingWithClock(types.ModuleType):
    """``threading`` with ``Event`` taken from the clock; every other name is the real one."""

    def __init__(self, clock: Clock) -> None:
        super().__init__("threading")
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(threading, name)

    def Event(self) -> Any:
        return self._clock.make_event()

    def Thread(self, *args: Any, **kwargs: Any) -> Any:
        # The monitor thread: the fake clock holds time still until it first waits.
        return self._clock.make_thread(*args, **kwargs)


class _TimeWithClock(types.ModuleType):
    def __init__(self, clock: Clock) -> None:
        super().__init__("time")
        self.time = clock.time
        self.sleep = clock.sleep


class PathwaysCpuSeams:
    """Installs the seams on enter and restores the originals on exit, whatever happened."""

    def __init__(self, slice_of: SliceOf, health_check: HealthCheck, clock: Clock) -> None:
        self._slice_of = slice_of
        self._health_check = health_check
        self._clock = clock
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> PathwaysCpuSeams:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def start(self) -> None:
        if self._saved:
            raise RuntimeError("pathwaysutils seams are already installed by this object")
        from pathwaysutils.elastic import elastic, manager

        if _ACTIVE:
            raise RuntimeError(
                "pathwaysutils is already patched by another fake cluster in this process: "
                "leave that one's `with` block first"
            )
        slice_of = self._slice_of
        health_check = self._health_check

        def get_slice_to_devices(devices: Sequence[Any]) -> Mapping[int, Sequence[Any]]:
            grouped: dict[int, list[Any]] = {}
            for device in devices:
                grouped.setdefault(slice_of(device), []).append(device)
            return grouped

        def _simple_execution(checker: Any, devices: Sequence[Any]) -> Any:
            del checker
            return health_check(slice_of(devices[0]), devices)

        self._patch(elastic, "get_slice_to_devices", get_slice_to_devices)
        self._patch(elastic.DefaultSliceHealthChecker, "_simple_execution", _simple_execution)
        if self._clock.fake:
            self._patch(elastic, "time", _TimeWithClock(self._clock))
            self._patch(manager, "threading", _ThreadingWithClock(self._clock))

    def stop(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
            _ACTIVE.remove((owner, name, value))

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        entry = (owner, name, getattr(owner, name))
        self._saved.append(entry)
        _ACTIVE.append(entry)
        setattr(owner, name, value)


def defining_class(cls: type, name: str) -> type:
    """The class in ``cls``'s MRO whose own ``__dict__`` holds ``name`` (what to patch so the
    class and every subclass that inherits ``name`` see the wrapper)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    raise AttributeError(f"{cls.__qualname__} has no attribute {name!r} to wrap")


# Seams currently installed in this process (a second fake cluster must not stack on top).
_ACTIVE: list[tuple[Any, str, Any]] = []


# -- the JAX device-loss seam ----------------------------------------------------------------
#: JAX releases the device-loss seam was written and tested against; another release installs
#: it only if every target is still where it was (a warning says so), else refuses by name.
JAX_TESTED = ("0.12.",)

#: (module, owner attribute or "", name): the private JAX names the device-loss seam replaces.
DEVICE_LOSS_TARGETS = (
    ("jax._src.array", "ArrayImpl", "_check_if_deleted"),
    ("jax._src.array", "ArrayImpl", "block_until_ready"),
    ("jax._src.interpreters.pxla", "", "shard_args"),
    ("jax._src.interpreters.pxla", "ExecuteReplicated", "__call__"),
    ("jax", "", "block_until_ready"),
    ("jax._src.api", "", "copy_to_host_async"),
    ("jax._src.interpreters.pxla", "", "batched_device_put"),
)

#: Device id -> a maker of the slice-down error to raise for it; the fake cluster owns the
#: mapping and changes it in place, so the hot path reads one dict.
LostDevices = Mapping[int, Callable[[], BaseException | None]]


class SeamUnavailableError(ChaosConfigError):
    """A JAX upgrade moved a name the device-loss seam needs; the message names it."""


def missing_device_loss_targets() -> list[str]:
    """The targets of the device-loss seam this JAX no longer has (empty: all present)."""
    import importlib

    missing = []
    for module_name, owner_name, name in DEVICE_LOSS_TARGETS:
        try:
            owner: Any = importlib.import_module(module_name)
            if owner_name:
                owner = getattr(owner, owner_name)
            if not callable(getattr(owner, name)):
                raise AttributeError(name)
        except (ImportError, AttributeError):
            missing.append(".".join(filter(None, (module_name, owner_name, name))))
    return missing


class JaxDeviceLossSeam:
    """Makes every use of a lost slice's devices fail as Pathways fails it.

    On Pathways, touching data on a lost slice, or sending it new work, raises a
    ``JaxRuntimeError`` whose message carries the slice-down status, which ``elastic_retry``
    retries. The fake deletes a lost slice's arrays, and plain JAX then raises
    ``RuntimeError: Array has been deleted`` (or ``INVALID_ARGUMENT`` from
    ``block_until_ready``), which it does not. No public JAX hook exists, so these JAX names
    (all but two private) are replaced while a fake cluster is active:

    - ``ArrayImpl._check_if_deleted``: every Python path through an existing array (a jitted
      call's arguments, ``np.asarray``, ``device_get``, ``device_put``, arithmetic);
    - ``ArrayImpl.block_until_ready`` and ``jax.block_until_ready``: the C++ wait paths;
    - ``api.copy_to_host_async`` (and ``jax.copy_to_host_async``): the batched host copy
      ``jax.device_get`` of a tree starts in C++ before any leaf is checked;
    - ``pxla.batched_device_put``: per-device host values placed in C++
      (``make_array_from_callback``);
    - ``pxla.shard_args``: new data sent to the lost devices (``device_put`` of host data, the
      arguments of a jitted call whose shardings name them);
    - ``pxla.ExecuteReplicated.__call__``: a compiled program that runs on them (a collective
      included). JAX's C++ fast path skips Python, so a loss also clears the fast-path caches
      (not the compiled executables): the next call of each jitted function comes through here;
    - and the public Orbax ``Snapshotter.load``: a restore onto a lost slice's devices fails
      before it donates the snapshot's replicas.

    An array some path still makes on a lost device fails at its first use. Only arrays whose
    devices include a lost one are touched; a donated array elsewhere still raises JAX's own
    error. pmap's own C++ path is not covered.
    """

    def __init__(self, lost_devices: LostDevices) -> None:
        self._lost = lost_devices
        self._saved: list[tuple[Any, str, Any]] = []
        #: Called with each sharding new data is placed on (the black-box recorder's meshes).
        self.placement_listeners: list[Callable[[Any], None]] = []
        #: Called with each slice-down error raised to the workload (before it is raised).
        self.error_listeners: list[Callable[[BaseException], None]] = []

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def start(self) -> None:
        # One piece (over 80 lines): every replacement closes over the same raise_if_lost and
        # the originals saved for stop(); split, a half-installed seam could not be undone.
        import warnings

        import jax
        from jax._src import array as jax_array
        from jax._src.interpreters import pxla

        missing = missing_device_loss_targets()
        if missing:
            raise SeamUnavailableError(
                f"the JAX device-loss seam cannot be installed on jax {jax.__version__}: "
                f"{', '.join(missing)} moved; pathways-chaos supports jax "
                f"{'/'.join(v + 'x' for v in JAX_TESTED)} "
                "(pin it, or update harness/engine/seams.py)"
            )
        if not jax.__version__.startswith(JAX_TESTED):
            warnings.warn(
                f"the JAX device-loss seam was tested on jax {'/'.join(JAX_TESTED)}x, not "
                f"{jax.__version__}: its targets exist, but check test_device_loss_seam.py",
                stacklevel=2,
            )
        lost = self._lost
        listeners = self.placement_listeners
        error_listeners = self.error_listeners
        check_if_deleted = jax_array.ArrayImpl._check_if_deleted
        array_block = jax_array.ArrayImpl.block_until_ready
        shard_args = pxla.shard_args
        execute = pxla.ExecuteReplicated.__call__
        block_until_ready = jax.block_until_ready
        from jax._src import api as jax_api

        copy_to_host_async = jax_api.copy_to_host_async
        batched_device_put = pxla.batched_device_put

        def raise_if_lost(devices: Any) -> None:
            if lost:
                for device in devices:
                    make_error = lost.get(device.id)
                    error = make_error() if make_error is not None else None
                    if error is not None:  # None: an armed error not for this thread
                        for listener in error_listeners:
                            listener(error)
                        try:
                            raise error
                        finally:
                            # no frame <-> error cycle: it would keep the callers' arrays
                            # (a lost slice's, deleted) alive until a collection, and JAX's
                            # CPU client crashes in live_arrays() when it then frees them
                            del error

        def checked_if_deleted(self: Any) -> None:
            if lost:
                raise_if_lost(self.sharding.device_set)
            check_if_deleted(self)

        def checked_block(self: Any) -> Any:
            if lost:
                raise_if_lost(self.sharding.device_set)
            return array_block(self)

        def checked_shard_args(shardings: Any, *args: Any, **kwargs: Any) -> Any:
            for listener in listeners:
                for sharding in shardings:
                    listener(sharding)
            if lost:
                for sharding in shardings:
                    raise_if_lost(sharding.device_set)
            return shard_args(shardings, *args, **kwargs)

        def checked_execute(self: Any, *args: Any) -> Any:
            if lost:
                raise_if_lost(self._local_devices)
            return execute(self, *args)

        def checked_block_until_ready(x: Any) -> Any:
            if lost:
                for leaf in jax.tree_util.tree_leaves(x):
                    if isinstance(leaf, jax_array.ArrayImpl):
                        raise_if_lost(leaf.sharding.device_set)
            return block_until_ready(x)

        self._patch(jax_array.ArrayImpl, "_check_if_deleted", checked_if_deleted)
        self._patch(jax_array.ArrayImpl, "block_until_ready", checked_block)
        self._patch(pxla, "shard_args", checked_shard_args)
        self._patch(pxla.ExecuteReplicated, "__call__", checked_execute)

        def checked_copy_to_host_async(x: Any) -> Any:
            # jax.device_get of a tree starts every leaf's copy here, in one C++ call
            if lost:
                for leaf in jax.tree_util.tree_leaves(x):
                    if isinstance(leaf, jax_array.ArrayImpl):
                        raise_if_lost(leaf.sharding.device_set)
            return copy_to_host_async(x)

        def checked_batched_device_put(aval: Any, sharding: Any, *args: Any, **kw: Any) -> Any:
            # make_array_from_callback and friends place per-device values in C++
            if lost:
                raise_if_lost(sharding.device_set)
            return batched_device_put(aval, sharding, *args, **kw)

        self._patch(jax, "block_until_ready", checked_block_until_ready)
        self._patch(jax_api, "copy_to_host_async", checked_copy_to_host_async)
        if jax.copy_to_host_async is copy_to_host_async:
            self._patch(jax, "copy_to_host_async", checked_copy_to_host_async)
        self._patch(pxla, "batched_device_put", checked_batched_device_put)
        self._guard_snapshot_restore(raise_if_lost)

    def _guard_snapshot_restore(self, raise_if_lost: Callable[[Any], None]) -> None:
        """A restore onto a lost slice fails before it touches the snapshot.

        ``Snapshotter.load`` donates the surviving replicas (pathwaysutils'
        ``concatenate_by_mesh_axis`` always donates) before it places the result on the target
        shardings. Failing only at that placement would leave the snapshot pointing at donated
        buffers, which on CPU crash the process at the next restore; Pathways fails the
        restore as a whole. A public method of a public class, wrapped like the rest.
        """
        import jax

        try:
            from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
        except ImportError:
            return
        # The class that defines ``load``: a subclass put in orbax's place that only inherits
        # it has no ``load`` of its own (``__dict__["load"]`` raised KeyError there).
        owner = defining_class(Snapshotter, "load")
        load = owner.__dict__["load"]
        lost = self._lost
        listeners = self.placement_listeners

        def checked_load(snapshotter: Any, abstract_state: Any, **kwargs: Any) -> Any:
            if lost:
                shardings = [getattr(x, "sharding", None) for x in jax.tree.leaves(abstract_state)]
                for sharding in filter(None, shardings):
                    for listener in listeners:
                        listener(sharding)  # the restore's placement, seen before it fails
                    raise_if_lost(sharding.device_set)
            return load(snapshotter, abstract_state, **kwargs)

        self._patch(owner, "load", checked_load)

    def on_loss(self) -> None:
        """Drops JAX's C++ jit fast paths, so the next call of each function is checked."""
        from jax._src.lib import _jax

        _jax.PjitFunctionCache.clear_all()

    def stop(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)
            _ACTIVE.remove((owner, name, value))

    def __enter__(self) -> JaxDeviceLossSeam:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        entry = (owner, name, getattr(owner, name))
        self._saved.append(entry)
        _ACTIVE.append(entry)
        setattr(owner, name, value)
