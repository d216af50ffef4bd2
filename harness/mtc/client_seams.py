"""The named seams that let the real Orbax MTC client run on the fake's CPU hosts, undone on exit.

What cannot run on CPU, and why (orbax-checkpoint 0.12.8, jax 0.12.0.1):

- ``ReplicatorCheckpointManager(options=...(use_colocated_python=True))`` refuses outright:
  ``ValueError: Pathways colocated Python MTC requires a Pathways backend. McJAX MTC must use
  the standard ReplicatorCheckpointManager path with use_colocated_python=False.``
- ``jax.experimental.colocated_python`` does run on CPU, but the whole CPU backend is one worker:
  ``pathways.group_devices_by_worker`` on 8 CPU devices gives ``{(0,): [all 8]}`` and a
  colocated function runs once, in-process, over every device. On Pathways it runs once per
  worker host, on that host's sidecar, which sees its own ramdisk at the mount path.
- The multi-controller path (``use_colocated_python=False``) needs ``jax.distributed`` with one
  process per host, which a single pytest process that already started JAX cannot give.

So the client's per-host code runs for real (``initialize_multi_tier_checkpointing`` with
``use_colocated_python=True``: its ``_setup`` body writes ``replicator.yaml``, waits for the
service, reads the error files and renames the restore marker; and one
``sidecar_worker_checkpoint_manager.WorkerCheckpointManagerRaw`` per host saves and restores), and
only these pieces are emulated:

========================================  ==================================================
seam (module attribute)                   emulation
========================================  ==================================================
``pathways.group_devices_by_worker``      worker key ``(task 0, slice s)`` per fake host
``initialization.colocated_python``       run the function once per worker, each in its own
                                          thread (sidecars run concurrently), with that
                                          worker's shard of the arguments
``initialization.epath``                  the per-host mount: the mount path resolves to the
                                          calling worker's own ramdisk folder
``initialization.time``                   ``sleep`` lets the service take a turn first, then
                                          sleeps at most 10 ms (the client polls every 1 s)
========================================  ==================================================

Orbax's own process-wide switches that the real code flips (the colocated serialization patch,
the "colocated runtime active" flag, the signaling-client cache) are put back on exit too.
"""

from __future__ import annotations

import threading
import time as _time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_local = threading.local()
_active: list[MtcClientSeams] = []


def active() -> MtcClientSeams | None:
    """The installed seams, if any: the trainer's emulated sidecars resolve the mount through it."""
    return _active[-1] if _active else None


class MountTable:
    """The path every host's job sees (the CSI ramdisk mount) -> each host's own folder."""

    def __init__(self, mount: str, host_dirs: Sequence[Path]) -> None:
        self.mount = str(Path(mount))
        self.host_dirs = [Path(p) for p in host_dirs]

    def resolve(self, path: str | Path, host: int | None = None) -> Path:
        host = current_host() if host is None else host
        text = str(path)
        if host is None or not (text == self.mount or text.startswith(self.mount + "/")):
            return Path(text)
        return self.host_dirs[host] / text[len(self.mount) :].lstrip("/")


def current_host() -> int | None:
    """The fake worker host the calling thread acts for (set by the colocated dispatch)."""
    return getattr(_local, "host", None)


class _EpathWithMount(types.ModuleType):
    def __init__(self, real: Any, table: MountTable) -> None:
        super().__init__("epath")
        self._real, self._table = real, table

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Path(self, path: Any = "", *parts: Any) -> Any:
        return self._real.Path(self._table.resolve(str(self._real.Path(path, *parts))))


class _TimeWithService(types.ModuleType):
    def __init__(self, pump: Callable[[], None]) -> None:
        super().__init__("time")
        self._pump = pump
        self.time = _time.time
        self.monotonic = _time.monotonic
        self.perf_counter = _time.perf_counter

    def sleep(self, seconds: float) -> None:
        self._pump()
        _time.sleep(min(seconds, 0.01))


class _PerWorkerColocatedPython(types.ModuleType):
    """``colocated_python`` that runs the function once per worker, as Pathways sidecars do."""

    def __init__(self, real: Any) -> None:
        super().__init__("colocated_python")
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def colocated_python(self, fn: Callable[..., Any]) -> _PerWorkerCall:
        return _PerWorkerCall(fn)


class _PerWorkerCall:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def specialize(self, **_: Any) -> _PerWorkerCall:
        return self

    def __call__(self, dummy: Any, ranks: Any) -> Any:
        import jax
        import numpy as np

        dummy_by_device = {s.device.id: s.data for s in dummy.addressable_shards}
        calls = []
        for shard in ranks.addressable_shards:
            rank = int(np.asarray(shard.data).reshape(-1)[0])
            device = shard.device
            one_rank = jax.device_put(np.asarray(shard.data), device)
            one_dummy = jax.device_put(np.asarray(dummy_by_device[device.id]), device)
            calls.append((rank, one_dummy, one_rank))
        errors: list[BaseException] = []

        def work(rank: int, d: Any, r: Any) -> None:
            _local.host = rank
            try:
                jax.block_until_ready(self._fn(d, r))
            except BaseException as error:  # re-raised in the caller, as colocated_python does
                errors.append(error)
            finally:
                _local.host = None

        threads = [
            threading.Thread(target=work, args=c, name=f"mtc-sidecar-{c[0]}", daemon=True)
            for c in calls
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return dummy


class MtcClientSeams:
    """Installs the four seams and guards Orbax's process-wide switches; undone on exit."""

    def __init__(
        self,
        mount: MountTable,
        worker_of: Callable[[Any], tuple[int, int]],
        pump: Callable[[], None],
    ) -> None:
        self.mount = mount
        self._worker_of = worker_of
        self._pump = pump
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> MtcClientSeams:
        from jax.experimental import colocated_python
        from jax.experimental.colocated_python import func as cp_func
        from jax.experimental.colocated_python import serialization as cp_serialization
        from orbax.checkpoint._src.multihost import colocated_transport, multihost, pathways
        from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
            initialization,
        )

        worker_of = self._worker_of

        def group_devices_by_worker(devices: Sequence[Any]) -> dict[tuple[int, ...], list[Any]]:
            out: dict[tuple[int, ...], list[Any]] = {}
            for d in devices:
                out.setdefault(worker_of(d), []).append(d)
            return out

        # Process-wide switches the real client flips: remembered here, put back on exit.
        for module, name in (
            (cp_serialization, "_reduce_mesh"),
            (cp_serialization, "_reduce_device_list"),
            (cp_serialization, "_reduce_single_device_sharding"),
            (cp_serialization, "_get_cpu_device_map"),
            (cp_func, "_make_prng_wrapped_fun"),
            (colocated_transport, "_PATHWAYS_SERIALIZATION_PATCH_INSTALLED"),
            (multihost, "_PATHWAYS_COLOCATED_RUNTIME_ACTIVE"),
        ):
            self._remember(module, name)
        self._patch(pathways, "group_devices_by_worker", group_devices_by_worker)
        self._patch(initialization, "colocated_python", _PerWorkerColocatedPython(colocated_python))
        self._patch(initialization, "epath", _EpathWithMount(initialization.epath, self.mount))
        self._patch(initialization, "time", _TimeWithService(self._pump))
        _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from orbax.checkpoint._src.futures import signaling_client

        if self in _active:
            _active.remove(self)
        while self._saved:
            module, name, value = self._saved.pop()
            if value is _MISSING:
                if hasattr(module, name):
                    delattr(module, name)
            else:
                setattr(module, name, value)
        signaling_client.get_signaling_client.cache_clear()

    def _remember(self, module: Any, name: str) -> None:
        self._saved.append((module, name, getattr(module, name, _MISSING)))

    def _patch(self, module: Any, name: str, value: Any) -> None:
        self._remember(module, name)
        setattr(module, name, value)


_MISSING = object()
