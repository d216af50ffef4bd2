# ruff: noqa
import jax.numpy as jnp
from pathwaysutils.elastic import manager

from t5x_port.partitioning import make_mesh

mgr = manager.Manager()


@mgr.elastic_retry(minimum_slice_count=1, retry_policy=manager.ElasticRetryLimit(max_attempts=6))
def train(steps=100):
    # rebuilt on every attempt, but from the helper
    mesh = make_mesh(mgr.active_slice_count)
    x = jnp.zeros(8)
    return mesh, x
