"""A port that "checkpoints" on a preemption notice into a module global instead of to disk.

In one process it resumes perfectly; on GKE a preemption restarts the container and the global
is gone, so it starts over. The episode's next run is a new process, as on GKE: it must fail.
"""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.reference import user_loop

_MEMORY: dict[str, Any] = {}


def _save(directory: Any, state: Any, step: int, iterator: Any) -> None:
    import jax

    _MEMORY["checkpoint"] = (jax.device_get(state), step, iterator.get_state())


def _latest(directory: Any) -> Any:
    return "in-memory" if "checkpoint" in _MEMORY else None


def _load(path: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
    import jax

    state, step, position = _MEMORY["checkpoint"]
    iterator.set_state(position)
    placed = jax.tree.map(lambda a, x: jax.device_put(x, a.sharding), abstract, state)
    return placed, step + 1


def main(**options: Any) -> Any:
    kept = (user_loop.save_checkpoint, user_loop.latest_checkpoint, user_loop.load_checkpoint)
    user_loop.save_checkpoint, user_loop.latest_checkpoint, user_loop.load_checkpoint = (
        _save,
        _latest,
        _load,
    )
    try:
        return user_loop.pause_resume(**options)
    finally:
        user_loop.save_checkpoint, user_loop.latest_checkpoint, user_loop.load_checkpoint = kept
