"""The sample loop's structure (``harness/reference/user_loop.py``) with a model of any size.

One ``Manager`` and one Orbax ``Snapshotter`` outside ``elastic_retry``, a grain
``ElasticIterator`` of records that carry their ids, a jitted momentum step on 2-D parameters
sharded over the mesh's ``model`` axis and replicated over ``replica``, a snapshot every
``snapshot_interval`` steps, the final state returned on the host. Only the model's width
changes: ``params`` float32 parameters in ``w1`` (``FEATURES x hidden``), ``b1`` and ``w2``, and
as many again in the momentum. Used by ``bench_scale.py``; nothing from pathways-chaos is
imported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FEATURES = 64


def hidden_for(params: int, model_axis: int = 2) -> int:
    """The hidden width whose model holds about ``params`` parameters (a multiple of 8, so
    it shards over the ``model`` axis)."""
    return max(8, round(params / (FEATURES + 2) / 8) * 8)


def record(i: int) -> dict[str, Any]:
    phase = np.arange(1, FEATURES + 1, dtype=np.float64)
    x = np.sin(i * 0.37 * phase).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.tanh(x[:4].sum()))}


def init_params(hidden: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": jax.random.normal(k1, (FEATURES, hidden), jnp.float32) * (1.0 / FEATURES**0.5),
        "b1": jnp.zeros((hidden,), jnp.float32),
        "w2": jax.random.normal(k2, (hidden, 1), jnp.float32) * (1.0 / hidden**0.5),
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


def train(
    *,
    params: int = 1_000_000,
    final_step: int = 12,
    snapshot_interval: int = 4,
    global_batch: int = 16,
    devices: list[Any] | None = None,
    join_before_save: bool = False,
) -> Any:
    import functools

    import grain
    import jax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from pathwaysutils.elastic import manager

    hidden = hidden_for(params)
    elastic_manager = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(elastic_manager.slice_to_devices[0])
    data = grain.MapDataset.range(100_000).map(lambda i: record(int(i)))

    @elastic_manager.elastic_retry(
        minimum_slice_count=1,
        poll_interval=10,
        timeout=300,
        retry_policy=manager.ElasticRetryLimit(max_attempts=10),
    )
    def run_training_loop() -> Any:
        active = [
            d
            for s in sorted(elastic_manager.active_slice_indices)
            for d in elastic_manager.slice_to_devices[s]
        ]
        mesh = jax.sharding.Mesh(
            np.asarray(active, dtype=object).reshape(len(active) // per_slice, per_slice),
            axis_names=("replica", "model"),
        )
        leaf = {
            "w1": NamedSharding(mesh, P(None, "model")),
            "b1": NamedSharding(mesh, P("model")),
            "w2": NamedSharding(mesh, P("model", None)),
        }
        shardings = {"params": leaf, "momentum": dict(leaf)}
        init = functools.partial(init_params, hidden)
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init),
            shardings,
        )
        step_fn = jax.jit(train_step, out_shardings=shardings)
        iterator = ElasticIterator(data, global_batch, grain.sharding.NoSharding())
        if snapshotter.latest is not None:
            snapshotter.join()
            restored = snapshotter.load(
                {"state": abstract, "step": 0, "iterator_state": iterator.get_state()}
            )
            iterator.set_state(restored["iterator_state"])
            state, step = restored["state"], int(restored["step"]) + 1
        else:
            state, step = jax.jit(init, out_shardings=shardings)(), 0
        batch_sharding = NamedSharding(mesh, P("replica"))
        while step < final_step:
            batch = next(iterator)
            x = jax.device_put(batch["x"], batch_sharding)
            y = jax.device_put(batch["y"], batch_sharding)
            state = step_fn(state, x, y)
            if step % snapshot_interval == 0:
                if join_before_save:  # the save before is done: this one is never skipped
                    snapshotter.join()
                snapshotter.save(
                    step, {"state": state, "step": step, "iterator_state": iterator.get_state()}
                )
            step += 1
        return state

    state = run_training_loop()
    snapshotter.join()
    return jax.device_get(state)
