"""Three broken variants of the sample user loop, each a bug teams ship; the toolkit must judge
each one failed and name what went wrong. Like the loop, nothing here calls the toolkit.
"""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.reference import user_loop


def _restore_without_step(snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
    snapshotter.join()
    restored = snapshotter.load(
        {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
    )
    iterator.set_state(restored["iterator_state"])
    return restored["state"], 0  # bug: the step counter starts over


def _restore_without_iterator(snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
    snapshotter.join()
    restored = snapshotter.load(
        {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
    )
    iterator.set_state(iterator.get_state())  # bug: the iterator's own (current) position
    return restored["state"], int(restored["step"]) + 1


def _mesh_from_jax_devices(elastic_manager: Any, devices_per_slice: int) -> Any:
    import jax
    import numpy as np

    # bug: jax.devices() keeps every device of the allocation, the lost slice's included
    devices = np.asarray(jax.devices(), dtype=object)
    return jax.sharding.Mesh(devices.reshape(-1, devices_per_slice), ("replica", "model"))


def step_not_restored(**options: Any) -> Any:
    """Restores the model and the data position, but not the step counter."""
    return user_loop.train(restore=_restore_without_step, **options)


def iterator_from_current_position(**options: Any) -> Any:
    """Restores the model, but leaves the data iterator at its own current position."""
    return user_loop.train(restore=_restore_without_iterator, **options)


def mesh_from_jax_devices(**options: Any) -> Any:
    """Builds each attempt's mesh from ``jax.devices()``, not the active slices."""
    return user_loop.train(make_mesh=_mesh_from_jax_devices, **options)
