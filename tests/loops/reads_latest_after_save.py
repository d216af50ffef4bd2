"""A loop that reads its Snapshotter's ``latest`` right after each save and stops when it does
not name that save: on the fake, what ``latest`` says after a save must not depend on whether
the Snapshotter's worker thread has run yet (the observer joins a save it left in flight first)."""

from __future__ import annotations

from typing import Any


def _late_worker() -> None:
    """A loaded machine, made certain (in this process only): the Snapshotter's worker takes
    each save 0.2 s late, far longer than a step."""
    import queue
    import time
    import types

    from orbax.checkpoint.experimental.v1._src.training.pathways import snapshotter

    class LateQueue(queue.Queue):  # type: ignore[type-arg]
        def get(self, block: bool = True, timeout: float | None = None) -> object:
            with self.not_empty:
                while not self._qsize():
                    self.not_empty.wait()
            time.sleep(0.2)
            return super().get(block, timeout)

    snapshotter.queue = types.SimpleNamespace(Queue=LateQueue)  # type: ignore[attr-defined]


def main(steps: int = 8, late: bool = True, **_: Any) -> Any:
    import jax
    import orbax.checkpoint as ocp
    from pathwaysutils.elastic import manager

    from pathways_chaos.harness.reference import user_loop as sample

    if late:
        _late_worker()
    elastic = manager.Manager(None)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    mesh = sample.create_mesh(elastic, len(elastic.slice_to_devices[0]))
    _, shardings, train_step, iterator = sample.initialize_training_loop(
        mesh, elastic, sample.dataset(1000), 16, False
    )
    state = jax.device_put(sample.init_params(), shardings)
    for step in range(steps):
        state = train_step(state, *sample.place_batch(next(iterator), mesh))
        snapshotter.save(step, {"state": state, "step": step})
        latest = snapshotter.latest
        if latest is None or int(latest.step) != step:
            raise RuntimeError(f"latest right after the save of step {step}: {latest}")
    snapshotter.join()
    return jax.device_get(state)
