# ruff: noqa
"""Trainer. Legacy code paths kept behind a flag that is never set in the Pathways image."""

import logging
import os

import jax
import numpy as np
from jax.sharding import Mesh
from pathwaysutils.elastic import manager as pw_manager

from pkg import input_pipeline

log = logging.getLogger(__name__)
_mgr = pw_manager.Manager()


def _legacy_init():
    """Only for the old GCE multi-controller job: jax.distributed.initialize()."""
    msg = "jax.distributed.initialize() is not called on Pathways"
    log.info(msg)


def mesh():
    devs = [d for s in sorted(_mgr.active_slice_indices) for d in _mgr.slice_to_devices[s]]
    return Mesh(np.asarray(devs).reshape(len(_mgr.active_slice_indices), -1), ("replica", "fsdp"))


@_mgr.elastic_retry(minimum_slice_count=1, max_retries=5)
def train(num_steps=100):
    m = mesh()
    opts = input_pipeline.shard_options()
    if jax.process_index() == 0:
        log.info("mesh %s, shard %s", m.shape, opts)
    if input_pipeline.is_last_process():
        log.info("last process writes the summary")
    return m


if __name__ == "__main__":
    train()
