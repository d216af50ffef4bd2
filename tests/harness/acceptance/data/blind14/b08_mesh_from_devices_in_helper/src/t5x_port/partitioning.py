# ruff: noqa
"""Mesh helpers (no Pathways imports here)."""

import jax
import numpy as np
from jax.sharding import Mesh


def make_mesh(num_replicas: int) -> Mesh:
    devices = np.asarray(jax.devices()).reshape(num_replicas, -1)
    return Mesh(devices, ("replica", "data"))
