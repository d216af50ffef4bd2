"""A team's own elastic training loop, written the way the Pathways resilient-training guide shows.

Nothing from pathways-chaos is imported or called here: one ``Manager`` and one Orbax
``Snapshotter`` outside ``elastic_retry``, a grain ``ElasticIterator``, a jitted step, 2-D
parameters sharded over the mesh's ``model`` axis and replicated over ``replica``. The toolkit
tests it unchanged
(``pytest -m chaos --chaos-loop=pathways_chaos.harness.reference.user_loop:main``); its broken
variants are in ``user_loop_bugs.py``.

``main`` returns the final training state on the host (the toolkit compares it with a
fault-free run), or ``None`` when a preemption notice suspended it after writing a checkpoint
to ``checkpoint_dir`` (the next run resumes from there).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FEATURES, HIDDEN = 4, 16


# -- data: every record carries its id --------------------------------------------------------
def record(i: int) -> dict[str, Any]:
    phase = np.arange(1, FEATURES + 1, dtype=np.float64)
    x = np.sin(i * 0.37 * phase).astype(np.float32)
    y = np.float32(np.tanh(x @ np.array([0.5, -0.25, 0.125, 1.0], np.float32)))
    return {"id": np.int64(i), "x": x, "y": y}


def dataset(size: int) -> Any:
    import grain

    return grain.MapDataset.range(size).map(lambda i: record(int(i)))


# -- model ------------------------------------------------------------------------------------
def init_params(seed: int = 0) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN), jnp.float32) * 0.3,
        "b1": jnp.zeros((HIDDEN,), jnp.float32),
        "w2": jax.random.normal(k2, (HIDDEN, 1), jnp.float32) * 0.3,
    }
    return {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}


def train_step(state: Any, x: Any, y: Any, lr: float = 0.05, beta: float = 0.9) -> Any:
    import jax
    import jax.numpy as jnp

    def loss_fn(p: Any) -> Any:
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean(((h @ p["w2"])[:, 0] - y) ** 2)

    grads = jax.grad(loss_fn)(state["params"])
    momentum = jax.tree.map(lambda m, g: beta * m + g, state["momentum"], grads)
    params = jax.tree.map(lambda p, m: p - lr * m, state["params"], momentum)
    return {"params": params, "momentum": momentum}


# -- the pieces the guide names ---------------------------------------------------------------
def active_devices(elastic_manager: Any) -> list[Any]:
    # pathwaysutils 0.1.13 has no Manager.active_devices yet: the same list, in slice order.
    return [
        d
        for s in sorted(elastic_manager.active_slice_indices)
        for d in elastic_manager.slice_to_devices[s]
    ]


def create_mesh(elastic_manager: Any, devices_per_slice: int) -> Any:
    import jax

    device_array = np.asarray(active_devices(elastic_manager), dtype=object).reshape(
        (elastic_manager.active_slice_count, devices_per_slice)
    )
    return jax.sharding.Mesh(device_array, axis_names=("replica", "model"))


def state_shardings(mesh: Any) -> Any:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    # Replicated along "replica" (the Snapshotter needs a full copy per slice), sharded along
    # "model" inside a slice.
    params = {
        "w1": NamedSharding(mesh, P(None, "model")),
        "b1": NamedSharding(mesh, P("model")),
        "w2": NamedSharding(mesh, P("model", None)),
    }
    return {"params": params, "momentum": dict(params)}


def initialize_training_loop(
    mesh: Any, elastic_manager: Any, data: Any, global_batch: int, fixed_batch: bool
) -> tuple[Any, Any, Any, Any]:
    import grain
    import jax
    from grain.experimental import ElasticIterator

    shardings = state_shardings(mesh)
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        jax.eval_shape(init_params),
        shardings,
    )
    jitted_train_step = jax.jit(train_step, out_shardings=shardings)
    batch = global_batch if fixed_batch else elastic_manager.scale_by_active_slices(global_batch)
    iterator = ElasticIterator(data, int(batch), grain.sharding.NoSharding())
    return abstract, shardings, jitted_train_step, iterator


def place_batch(batch: dict[str, Any], mesh: Any) -> tuple[Any, Any]:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = len(batch["id"])
    spec = P("replica") if n % mesh.shape["replica"] == 0 else P()
    sharding = NamedSharding(mesh, spec)
    return jax.device_put(batch["x"], sharding), jax.device_put(batch["y"], sharding)


def restore_from_snapshot(snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
    snapshotter.join()
    restored = snapshotter.load(
        {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
    )
    iterator.set_state(restored["iterator_state"])
    return restored["state"], int(restored["step"]) + 1


# -- the loop ---------------------------------------------------------------------------------
def train(
    *,
    final_step: int = 24,
    snapshot_interval: int = 4,
    global_batch: int = 16,
    mode: str = "resize",
    batch: str = "scaled",
    scale_up: bool = True,
    max_attempts: int = 10,
    data_size: int = 100_000,
    devices: list[Any] | None = None,
    checkpoint_dir: str | None = None,
    make_mesh: Callable[[Any, int], Any] = create_mesh,
    restore: Callable[[Any, Any, Any], tuple[Any, int]] = restore_from_snapshot,
    on_elastic_event: Callable[[], None] | None = None,
) -> Any:
    import jax
    import orbax.checkpoint as ocp
    from pathwaysutils.elastic import manager

    elastic_manager = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    devices_per_slice = len(elastic_manager.slice_to_devices[0])
    data = dataset(data_size)
    preempted = threading.Event()
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: preempted.set())
    else:
        previous = None

    @elastic_manager.elastic_retry(
        minimum_slice_count=1 if mode == "resize" else None,
        poll_interval=10,
        timeout=300,
        retry_policy=manager.ElasticRetryLimit(max_attempts=max_attempts),
        on_elastic_event_callback=on_elastic_event,
    )
    def run_training_loop() -> Any:
        mesh = make_mesh(elastic_manager, devices_per_slice)
        abstract, shardings, jitted_train_step, data_iterator = initialize_training_loop(
            mesh, elastic_manager, data, global_batch, batch == "fixed"
        )
        checkpoint = latest_checkpoint(checkpoint_dir)
        if snapshotter.latest is not None:
            state, step = restore(snapshotter, abstract, data_iterator)
        elif checkpoint is not None:
            state, step = load_checkpoint(checkpoint, abstract, data_iterator)
        else:
            state, step = jax.device_put(init_params(), shardings), 0

        while step < final_step:
            batch_ = next(data_iterator)
            state = jitted_train_step(state, *place_batch(batch_, mesh))
            if step % snapshot_interval == 0:
                snapshotter.save(
                    step,
                    {"state": state, "step": step, "iterator_state": data_iterator.get_state()},
                )
            if preempted.is_set():
                save_checkpoint(checkpoint_dir, state, step, data_iterator)
                return None
            if scale_up and elastic_manager.available_inactive_slices:
                elastic_manager.active_slice_indices |= elastic_manager.available_inactive_slices
                mesh = make_mesh(elastic_manager, devices_per_slice)
                iterator_state = data_iterator.get_state()
                abstract, shardings, jitted_train_step, data_iterator = initialize_training_loop(
                    mesh, elastic_manager, data, global_batch, batch == "fixed"
                )
                data_iterator.set_state(iterator_state)
                state = jax.device_put(state, shardings)
            step += 1
        return state

    try:
        state = run_training_loop()
        snapshotter.join()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return None if state is None else jax.device_get(state)


def main(**options: Any) -> Any:
    """The sample loop with its defaults: resize mode, a batch that scales with the slices."""
    return train(**options)


def pause_resume(**options: Any) -> Any:
    """The same loop in pause-and-resume mode: wait for every slice, keep the batch schedule."""
    return train(**{"mode": "pause_resume", **options})


# -- suspend and resume on a preemption notice ------------------------------------------------
def save_checkpoint(directory: str | None, state: Any, step: int, iterator: Any) -> None:
    from orbax.checkpoint import v1 as ocp

    if directory is None:
        raise RuntimeError("preempted, but no checkpoint_dir to save to")
    ocp.save_pytree(
        Path(directory) / f"step_{step:08d}",
        {"state": state, "step": step, "iterator_state": iterator.get_state()},
    )


def latest_checkpoint(directory: str | None) -> Path | None:
    if directory is None or not os.path.isdir(directory):
        return None
    steps = sorted(p for p in Path(directory).iterdir() if p.name.startswith("step_"))
    return steps[-1] if steps else None


def load_checkpoint(path: Path, abstract: Any, iterator: Any) -> tuple[Any, int]:
    from orbax.checkpoint import v1 as ocp

    restored = ocp.load_pytree(
        path, {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
    )
    iterator.set_state(restored["iterator_state"])
    return restored["state"], int(restored["step"]) + 1
