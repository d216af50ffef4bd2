# ruff: noqa
"""Retry policy present but effectively unbounded: ElasticRetryLimit(max_attempts=1000)."""

import sys, os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager
from common import *

LIMIT = 1000


def main(devices=None, steps=12, limit=None):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        retry_policy=manager.ElasticRetryLimit(max_attempts=limit or LIMIT),
    )
    def run():
        mesh = make_mesh(mgr)
        it = make_iterator()
        params = replicate(mesh, init_params())
        step = 0
        if snap.latest is not None:
            snap.join()
            r = snap.load({"params": params, "step": step, "it": it.get_state()})
            params, step = r["params"], int(r["step"]) + 1
            it.set_state(r["it"])
        while step < steps:
            params, _ = train_step(params, *place_batch(mesh, next(it)))
            if step % 2 == 0:
                snap.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        return params

    p = run()
    snap.join()
    return p
