"""Three small elastic loops for the acceptance ``compile-time`` row (issue 30): two correct
loops whose compiles are all first calls or a warm-up (they must pass the row), and one that
recompiles its step every step (it must fail it).

Each is a whole loop as a team writes it: pathwaysutils ``Manager`` and ``elastic_retry``, the
Orbax ``Snapshotter``, a grain ``ElasticIterator``; nothing here calls the toolkit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FEATURES, BATCH, STEPS, EVERY = 4, 8, 12, 4


def _record(i: int) -> dict[str, Any]:
    x = np.sin(i * 0.37 * np.arange(1, FEATURES + 1, dtype=np.float32)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.cos(x.sum()))}


def _loss(w: Any, x: Any, y: Any) -> Any:
    return ((x @ w - y) ** 2).mean()


def _step(w: Any, x: Any, y: Any) -> Any:
    import jax

    return w - 0.1 * jax.grad(_loss)(w, x, y)


def _step_with_lr(w: Any, x: Any, y: Any, step: int) -> Any:
    import jax

    return w - (0.1 / (1 + step)) * jax.grad(_loss)(w, x, y)  # a Python int: static


def _train(style: str, devices: Any = None) -> Any:
    import grain
    import jax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from pathwaysutils.elastic import manager as manager_lib

    manager = manager_lib.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    data = grain.MapDataset.range(10_000).map(_record)
    per_slice = len(manager.slice_to_devices[0])

    @manager.elastic_retry(
        minimum_slice_count=1,
        poll_interval=10,
        timeout=300,
        retry_policy=manager_lib.ElasticRetryLimit(max_attempts=5),
    )
    def attempt() -> Any:
        active = sorted(manager.active_slice_indices)
        devs = [d for s in active for d in manager.slice_to_devices[s]]
        mesh = jax.sharding.Mesh(np.asarray(devs).reshape(len(active), per_slice), ("r", "m"))
        replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("r"))
        iterator = ElasticIterator(data, BATCH, grain.sharding.NoSharding())
        if style == "static_step":
            step_fn = jax.jit(_step_with_lr, static_argnums=3, out_shardings=replicated)
        else:
            step_fn = jax.jit(_step, out_shardings=replicated)
        evaluate = jax.jit(_loss)
        if snapshotter.latest is not None:
            abstract = jax.ShapeDtypeStruct((FEATURES,), np.float32, sharding=replicated)
            snapshotter.join()
            restored = snapshotter.load(
                {"w": abstract, "step": 0, "iterator": iterator.get_state()}
            )
            iterator.set_state(restored["iterator"])
            w, step = restored["w"], int(restored["step"]) + 1
        else:
            w, step = jax.device_put(np.zeros(FEATURES, np.float32), replicated), 0
        queue: list[Any] = []
        if style == "prefetch_warmup":
            # Two batches prefetched, then the step traced and compiled ahead of time (to log
            # its compile time apart from the steps): all before the first step trains.
            queue = [next(iterator), next(iterator)]
            x0 = jax.device_put(queue[0]["x"], rows)
            step_fn.trace(w, x0, x0[:, 0]).lower().compile()
        while step < STEPS:
            batch = queue.pop(0) if queue else next(iterator)
            x, y = jax.device_put(batch["x"], rows), jax.device_put(batch["y"], rows)
            w = step_fn(w, x, y, step) if style == "static_step" else step_fn(w, x, y)
            if style == "late_eval" and step >= 5 and step % EVERY == 1:
                float(evaluate(w, x, y))  # first called after the warm-up: compiles once
            if step % EVERY == 0:
                snapshotter.save(step, {"w": w, "step": step, "iterator": iterator.get_state()})
            step += 1
        return w

    w = attempt()
    snapshotter.join()
    return jax.device_get(w)


def late_eval(devices: Any = None) -> Any:
    """CORRECT: an evaluation function, jitted, first called at step 5 (then every 4 steps)."""
    return _train("late_eval", devices)


def prefetch_warmup(devices: Any = None) -> Any:
    """CORRECT: prefetches two batches, then traces and compiles its step ahead of time."""
    return _train("prefetch_warmup", devices)


def static_step(devices: Any = None) -> Any:
    """BROKEN: the step number is a static argument, so the step recompiles every step."""
    return _train("static_step", devices)
