# ruff: noqa
"""Elastic fine-tuning loop, ported to Pathways (single controller)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pathwaysutils.elastic import manager

import data

MIN_SLICES = 2
elastic_manager = manager.Manager()


def build_mesh():
    devices = []
    for s in sorted(elastic_manager.active_slice_indices):
        devices.extend(elastic_manager.slice_to_devices[s])
    return Mesh(
        np.array(devices).reshape(len(elastic_manager.active_slice_indices), -1), ("data", "model")
    )


def loss_fn(params, batch):
    x = batch["tokens"].astype(jnp.float32) / 32000.0
    pred = x @ params["w"]
    return jnp.mean(pred**2)


opt = optax.adamw(3e-4)


@jax.jit
def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@elastic_manager.elastic_retry(
    minimum_slice_count=MIN_SLICES,
    retry_policy=manager.ElasticRetryLimit(max_attempts=8),
)
def run(steps: int = 1000):
    mesh = build_mesh()
    sharding = NamedSharding(mesh, P("data"))
    params = {"w": jnp.zeros((128, 16))}
    opt_state = opt.init(params)
    for step, batch in enumerate(data.make_loader()):
        if step >= steps:
            break
        batch = jax.device_put(batch, sharding)
        params, opt_state, loss = train_step(params, opt_state, batch)
        if jax.process_index() == 0 and step % 50 == 0:
            print(f"step {step} loss {float(loss):.4f}")
    return params


if __name__ == "__main__":
    run()
