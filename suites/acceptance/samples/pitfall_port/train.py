"""A small JAX job moved to Pathways as it was written for multi-controller JAX.

It carries the migration article's pitfalls on purpose, each marked ``PITFALL``; the
acceptance checks must flag every one. Do not copy it: ``../good_port/train.py`` is the fix.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from orbax.checkpoint._src.path import step as step_lib  # PITFALL: private module

from pathways_chaos.harness.acceptance.adapter import TrainingAdapter

# PITFALL: a JaxRuntimeError raised inside a log call is now swallowed, not retried.
logging.raiseExceptions = False

FEATURES = 4
DATASET_SIZE = 4096
NUM_HOSTS = 4  # the old allocation: 4 hosts, one Python process each

# PITFALL: the node's CPUs, not the container's share of them.
LOADER_WORKERS = os.cpu_count()

#: Every loader made, for progress reporting. PITFALL: it keeps each attempt's device arrays.
_LOADERS: list[HostShardLoader] = []


def start_processes() -> None:
    """The multi-controller start-up the old launcher called before ``run`` (the acceptance
    run below calls ``run`` alone)."""
    jax.distributed.initialize()  # PITFALL: no peer processes under Pathways


def sample(sample_id: int) -> dict[str, np.ndarray | np.generic]:
    x = np.cos(sample_id * 0.11 * np.arange(1, FEATURES + 1)).astype(np.float32)
    return {"id": np.int64(sample_id), "x": x, "y": np.float32(x.sum() * 0.5)}


class HostShardLoader:
    """The multi-controller loader: this host's shard, this host's position."""

    def __init__(self, per_host_batch: int) -> None:
        # PITFALL: always shard 0 of 4 under Pathways: a quarter of the data, in a new order.
        self.shard = jax.process_index()
        self.batch = per_host_batch
        self.position = 0
        # Normalisation constants prefetched to the device.
        self.scale = jax.device_put(jnp.ones((FEATURES,), jnp.float32), jax.devices()[0])

    def __next__(self) -> dict[str, np.ndarray]:
        first = self.position * NUM_HOSTS + self.shard
        ids = [first + k * NUM_HOSTS for k in range(self.batch)]
        self.position += self.batch
        time.sleep(0.03)  # PITFALL: decoding in the controller's critical path
        samples = [sample(i % DATASET_SIZE) for i in ids]
        return {k: np.stack([s[k] for s in samples]) for k in ("id", "x", "y")}

    def get_state(self) -> dict[str, int]:
        return {"position": self.position, "hosts": jax.process_count()}

    def set_state(self, state: dict[str, int]) -> None:
        # PITFALL: the state is tied to the host count, so it never restores under Pathways.
        if int(state["hosts"]) == NUM_HOSTS:
            self.position = int(state["position"])


def make_iterator(global_batch: int) -> HostShardLoader:
    loader = HostShardLoader(global_batch // NUM_HOSTS)
    _LOADERS.append(loader)
    return loader


def init_state() -> dict[str, jax.Array]:
    key = jax.random.key(7 + jax.process_index())  # PITFALL: per-process seed
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
    # PITFALL: jax.devices() is the initial allocation for the client's lifetime.
    devices = np.asarray(jax.devices(), dtype=object)
    return jax.sharding.Mesh(devices.reshape(elastic_manager.total_slice_count, -1), ("r", "d"))


def run(final_step: int, snapshot_interval: int, checkpoint_dir: str) -> dict[str, jax.Array]:
    """The production loop the adapter mirrors (not run by the checks)."""
    from pathwaysutils.elastic import manager

    elastic_manager = manager.Manager()

    @elastic_manager.elastic_retry(minimum_slice_count=3)  # PITFALL: no bound; 3 of 2 slices
    def loop() -> dict[str, jax.Array]:
        mesh = create_mesh(elastic_manager)
        loader = make_iterator(16)
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        state = jax.device_put(init_state(), replicated)
        for step in range(final_step):
            state, _ = jax.jit(train_step)(state, next(loader))
            if jax.process_index() == 0 and step % snapshot_interval == 0:  # the controller: fine
                logging.info("saving %s", step_lib.build_step_path(checkpoint_dir, "s", step))
        return state

    return loop()


adapter = TrainingAdapter(
    name="pitfall-port",
    init_state=init_state,
    train_step=train_step,
    make_iterator=make_iterator,
    batch_ids=lambda batch: batch["id"].tolist(),
    build_mesh=create_mesh,
    recovery_mode="pause_resume",
    global_batch=16,
    expected_ids=lambda n: list(range(n)),  # the dataset order the old job consumed
    params=8e9,
)
