# ruff: noqa
"""Correct: guide pattern, plain-function callback that logs last loss with float(), catches slice-down errors.
ElasticRetryLimit(max_attempts=5), resize mode."""

import sys, os, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager, elastic
from common import *

log = logging.getLogger("train")
METRICS = {}


def on_event():
    # report the last loss we saw; the slice may be gone, so guard it
    try:
        if "loss" in METRICS:
            print("elastic event; last loss", float(METRICS["loss"]))
    except jax.errors.JaxRuntimeError as e:
        if not elastic.is_error_due_to_slice_down(e):
            raise
        print("elastic event; last loss unreadable (slice down)")
    METRICS.clear()


def main(devices=None, steps=12, snapshot_every=2):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        on_elastic_event_callback=on_event,
        retry_policy=manager.ElasticRetryLimit(max_attempts=5),
    )
    def run():
        mesh = make_mesh(mgr)
        it = make_iterator()
        params = replicate(mesh, init_params())
        step = 0
        if snap.latest is not None:
            snap.join()
            r = snap.load({"params": params, "step": step, "it": it.get_state()})
            params = r["params"]
            step = int(r["step"]) + 1
            it.set_state(r["it"])
        while step < steps:
            batch = next(it)
            x, y = place_batch(mesh, batch)
            params, loss = train_step(params, x, y)
            METRICS["loss"] = loss
            if step % snapshot_every == 0:
                snap.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        METRICS.clear()
        return params

    out = run()
    snap.join()
    return out
