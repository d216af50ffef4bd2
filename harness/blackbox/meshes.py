"""What the mesh of a placement is, as the ``mesh`` event names it: the device ids row by row
(one row per slice-sized block), their shape and axes, and the slices they lie on."""

from __future__ import annotations

from typing import Any


def mesh_fields(sharding: Any, slice_of: dict[int, int]) -> dict[str, Any] | None:
    """The ``mesh`` event's fields for a ``NamedSharding``'s mesh; None for anything else, and
    for pathwaysutils' own health-check meshes (their axes are ``_internal...``)."""
    from jax.sharding import NamedSharding

    if not isinstance(sharding, NamedSharding):
        return None
    mesh = sharding.mesh
    devices = getattr(mesh, "devices", None)
    if devices is None or any(str(a).startswith("_internal") for a in mesh.axis_names):
        return None
    rows = devices.reshape(devices.shape[0], -1) if devices.ndim else devices.reshape(1, 1)
    ids = [[d.id for d in row] for row in rows]
    return {
        "slices": sorted({slice_of.get(d, -1) for row in ids for d in row}),
        "device_ids": ids,
        "shape": list(rows.shape),
        "axes": list(getattr(mesh, "axis_names", ())),
    }
