"""Checks the Pathways Snapshotter does not make: it silently restores a wrong shape otherwise.

The Snapshotter keeps one copy of the state per replica (a row of the mesh along the replica
axis) and restores from any surviving one. That is only right when every replica holds the whole
state: a leaf sharded along the replica axis comes back with the wrong shape after a slice loss,
without an error (orbax 0.12.8 on CPU; suites/properties/test_snapshot_round_trip.py shows it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pathways_chaos.harness.errors import ChaosError


class SnapshotShardingError(ChaosError, ValueError):
    """A leaf the Snapshotter cannot restore correctly after a slice loss."""


class SnapshotLostError(ChaosError, RuntimeError):
    """Every replica of the in-memory snapshot is gone; only a persistent checkpoint can help."""


def check_replicated_along_replica_axis(tree: Any, mesh: Any, replica_axis: int = 0) -> None:
    """Raises ``SnapshotShardingError`` naming the first leaf not whole on every replica.

    ``tree`` holds arrays or ``jax.ShapeDtypeStruct`` with shardings; leaves without a sharding
    (Python scalars, numpy arrays) are host values the Snapshotter saves as they are.
    """
    import jax

    axis_name = mesh.axis_names[replica_axis]
    rows = np.moveaxis(np.asarray(mesh.devices, dtype=object), replica_axis, 0)
    rows = rows.reshape(rows.shape[0], -1)
    mesh_ids = {d.id for d in rows.flat}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        sharding = getattr(leaf, "sharding", None)
        if sharding is None:
            continue
        name = jax.tree_util.keystr(path) or "<root>"
        shape = tuple(leaf.shape)
        if axis_name in _spec_axes(sharding):
            raise SnapshotShardingError(
                f"leaf {name} (shape {shape}, {_describe(sharding)}) is sharded along the "
                f"replica axis {axis_name!r}: each replica holds only a piece, so a restore "
                "from one replica gets the wrong shape; replicate it along the replica axis "
                "(shard only along the other mesh axes)"
            )
        try:
            index_map = sharding.devices_indices_map(shape)
        except ValueError as error:
            raise SnapshotShardingError(f"leaf {name}: {error}") from None
        placed = {d.id: _index_key(index, shape) for d, index in index_map.items()}
        missing = sorted(mesh_ids - set(placed))
        if missing:
            raise SnapshotShardingError(
                f"leaf {name} is not on every replica (no shard on devices {missing}): place it "
                "with a sharding over the whole mesh, replicated along the replica axis"
            )
        first = [placed[d.id] for d in rows[0]]
        for r, row in enumerate(rows[1:], start=1):
            if [placed[d.id] for d in row] != first:
                raise SnapshotShardingError(
                    f"leaf {name} (shape {shape}, {_describe(sharding)}) is sharded along the "
                    f"replica axis: replica {r} holds different pieces than replica 0, so a "
                    "restore from one replica gets the wrong shape; replicate it along the "
                    "replica axis (shard only along the other mesh axes)"
                )


def load_snapshot(snapshotter: Any, abstract: Any, **kwargs: Any) -> Any:
    """``snapshotter.load`` that checks the target shardings and says when no replica is left."""
    mesh = _mesh_of(abstract)
    if mesh is not None:
        check_replicated_along_replica_axis(abstract, mesh)
    try:
        return snapshotter.load(abstract, **kwargs)
    except RuntimeError as error:
        if "No active replicas" not in str(error):
            raise
        step = getattr(snapshotter.latest, "step", None)
        raise SnapshotLostError(
            f"every replica of the in-memory snapshot of step {step} was on a lost slice: "
            "nothing survives in memory; restore from a persistent checkpoint instead"
        ) from error


def _mesh_of(tree: Any) -> Any:
    import jax

    for leaf in jax.tree.leaves(tree):
        mesh = getattr(getattr(leaf, "sharding", None), "mesh", None)
        if mesh is not None:
            return mesh
    return None


def _index_key(index: Sequence[slice], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple(
        (s.start or 0, dim if s.stop is None else s.stop)
        for s, dim in zip(index, shape, strict=False)
    )


def _spec_axes(sharding: Any) -> set[str]:
    """Mesh axis names a NamedSharding's PartitionSpec shards over (empty for others)."""
    axes: set[str] = set()
    for entry in getattr(sharding, "spec", None) or ():
        if entry is None:
            continue
        axes |= set(entry) if isinstance(entry, tuple) else {entry}
    return axes


def _describe(sharding: Any) -> str:
    spec = getattr(sharding, "spec", None)
    return f"spec {spec}" if spec is not None else type(sharding).__name__
