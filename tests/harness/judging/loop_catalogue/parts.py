"""Pieces every catalogue loop shares: synthetic data, a tiny model, the mesh of the active slices.

Loops load this file by path (``use_parts`` below): the toolkit imports a loop from its file
alone, so a sibling ``import`` would fail. Nothing here imports pathways-chaos; each loop is
what a team would write with the real libraries.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np

FEATURES, HIDDEN = 4, 8
TEACHER = np.array([0.5, -0.25, 0.125, 1.0], np.float32)


# -- data -------------------------------------------------------------------------------------
def record(i: int) -> dict[str, Any]:
    """One sample that carries its id, so a tester can see which samples a step trained."""
    phase = np.arange(1, FEATURES + 1, dtype=np.float64)
    x = np.sin(i * 0.37 * phase).astype(np.float32)
    y = np.float32(np.tanh(x @ TEACHER))
    return {"id": np.int64(i), "x": x, "y": y}


def record_without_id(i: int) -> dict[str, Any]:
    """The same sample without its id (a team whose records carry only features and label)."""
    r = record(i)
    return {"x": r["x"], "y": r["y"]}


def dataset(size: int = 4096, *, with_id: bool = True) -> Any:
    import grain

    make = record if with_id else record_without_id
    return grain.MapDataset.range(size).map(lambda i: make(int(i)))


# -- model ------------------------------------------------------------------------------------
def init_params(seed: int = 0, hidden: int = HIDDEN) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(seed))
    return {
        "w1": jax.random.normal(k1, (FEATURES, hidden), jnp.float32) * 0.3,
        "b1": jnp.zeros((hidden,), jnp.float32),
        "w2": jax.random.normal(k2, (hidden,), jnp.float32) * 0.3,
    }


def loss(params: Any, x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def grads(params: Any, x: Any, y: Any) -> Any:
    import jax

    return jax.grad(loss)(params, x, y)


# -- mesh and placement -----------------------------------------------------------------------
def active_devices(manager: Any) -> list[Any]:
    """The active slices' devices in slice order (0.1.13 has no Manager.active_devices)."""
    return [d for s in sorted(manager.active_slice_indices) for d in manager.slice_to_devices[s]]


def slice_mesh(manager: Any, devices: list[Any] | None = None) -> Any:
    """A (slices, devices per slice) mesh named ("replica", "model")."""
    import jax

    devs = active_devices(manager) if devices is None else devices
    per_slice = len(manager.slice_to_devices[next(iter(manager.slice_to_devices))])
    grid = np.asarray(devs, dtype=object).reshape((len(devs) // per_slice, per_slice))
    return jax.sharding.Mesh(grid, ("replica", "model"))


def replicated(mesh: Any) -> Any:
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec())


def put_batch(batch: dict[str, Any], mesh: Any) -> tuple[Any, Any]:
    """Shards the batch over the replicas when it divides, else replicates it."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    n = len(batch["y"])
    spec = PartitionSpec("replica") if n % mesh.shape["replica"] == 0 else PartitionSpec()
    sharding = NamedSharding(mesh, spec)
    return jax.device_put(batch["x"], sharding), jax.device_put(batch["y"], sharding)


def abstract_of(tree: Any, sharding: Any) -> Any:
    """ShapeDtypeStructs of ``tree`` (arrays or structs) with one sharding for every leaf."""
    import jax

    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), tree)


# -- preemption -------------------------------------------------------------------------------
class SigtermFlag:
    """Sets ``requested`` on SIGTERM while active (main thread only), restores the old handler."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: Any = None

    def __enter__(self) -> SigtermFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, lambda *_: self.requested.set())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def save_checkpoint(directory: str | None, step: int, tree: Any) -> None:
    from orbax.checkpoint import v1 as ocp

    if directory is None:
        raise RuntimeError("preempted, but no checkpoint_dir to save to: pass checkpoint_dir")
    ocp.save_pytree(Path(directory) / f"step_{step:08d}", tree)


def latest_checkpoint(directory: str | None) -> Path | None:
    if directory is None or not os.path.isdir(directory):
        return None
    found = sorted(p for p in Path(directory).iterdir() if p.name.startswith("step_"))
    return found[-1] if found else None


def load_checkpoint(path: Path, abstract: Any) -> Any:
    from orbax.checkpoint import v1 as ocp

    return ocp.load_pytree(path, abstract)
