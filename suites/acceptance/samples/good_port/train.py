"""A small JAX job ported to Pathways the way the guides say: the acceptance checks pass it.

One controller reads the global dataset (``ElasticIterator``, no per-host shard), meshes come
from the elastic manager's active slices, loader workers fit the container's CPU quota, only
public orbax/pathwaysutils APIs are used and ``logging.raiseExceptions`` stays True. The
``adapter`` at the bottom is what ``pytest suites/acceptance --acceptance-adapter=...`` runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pathways_chaos.harness.acceptance.adapter import TrainingAdapter

# A JaxRuntimeError raised inside a log call must reach elastic_retry, not be swallowed.
logging.raiseExceptions = True

FEATURES = 4
DATASET_SIZE = 4096


def container_cpus() -> int:
    """The container's CPU quota (cgroup v2), not the node's: Pathways shares the node."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, int(quota) // int(period))
    except (OSError, ValueError):
        pass
    return 1


LOADER_WORKERS = min(4, container_cpus())


def sample(sample_id: int) -> dict[str, np.ndarray | np.generic]:
    x = np.cos(sample_id * 0.11 * np.arange(1, FEATURES + 1)).astype(np.float32)
    return {"id": np.int64(sample_id), "x": x, "y": np.float32(x.sum() * 0.5)}


def make_iterator(global_batch: int) -> Any:  # grain's ElasticIterator
    import grain
    from grain.experimental import ElasticIterator

    dataset = grain.MapDataset.range(DATASET_SIZE).map(lambda i: sample(int(i)))
    # One controller sees the whole job: the global batch, sharded over the mesh later.
    return ElasticIterator(dataset, global_batch, grain.sharding.NoSharding())


def init_state() -> dict[str, jax.Array]:
    key = jax.random.key(7)  # a constant seed, the same for every attempt
    return {"w": jax.random.normal(key, (FEATURES,), jnp.float32) * 0.1, "b": jnp.zeros(())}


def train_step(
    state: dict[str, jax.Array], batch: dict[str, Any]
) -> tuple[dict[str, jax.Array], jax.Array]:
    def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
        prediction = batch["x"] @ p["w"] + p["b"]
        return jnp.mean((prediction - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state)
    return jax.tree.map(lambda p, g: p - 0.1 * g, state, grads), loss


def create_mesh(elastic_manager: Any) -> jax.sharding.Mesh:
    """The guide's builder: the active slices only, one mesh row per slice."""
    devices = np.asarray(elastic_manager.active_devices, dtype=object)
    return jax.sharding.Mesh(
        devices.reshape(elastic_manager.active_slice_count, -1), ("replica", "data")
    )


def run(final_step: int, snapshot_interval: int) -> dict[str, jax.Array]:
    """The production loop the adapter mirrors (not run by the checks)."""
    import orbax.checkpoint as ocp
    from pathwaysutils.elastic import manager

    elastic_manager = manager.Manager()
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    # Bounded: an INTERNAL error from a host callback looks like a lost slice to elastic_retry.
    @elastic_manager.elastic_retry(
        minimum_slice_count=1, retry_policy=manager.ElasticRetryLimit(max_attempts=10)
    )
    def loop() -> dict[str, jax.Array]:
        mesh = create_mesh(elastic_manager)
        iterator = make_iterator(16)
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        state = jax.device_put(init_state(), replicated)
        for step in range(final_step):
            state, _ = jax.jit(train_step)(state, next(iterator))
            if step % snapshot_interval == 0:
                snapshotter.save(step, {"state": state, "iterator": iterator.get_state()})
        return state

    return loop()


adapter = TrainingAdapter(
    name="good-port",
    init_state=init_state,
    train_step=train_step,
    make_iterator=make_iterator,
    batch_ids=lambda batch: batch["id"].tolist(),
    build_mesh=create_mesh,
    recovery_mode="resize",
    global_batch=16,
    expected_ids=lambda n: list(range(n)),
    params=8e9,  # the production model this small one stands for
)
