# ruff: noqa
"""BROKEN for persistent errors: ElasticRetryLimit(3), but main wraps the whole thing in an outer
'supervisor' loop that calls run() again when the policy gives up (up to 100 times)."""

import sys, os, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager
from common import *


def main(devices=None, steps=12):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        retry_policy=manager.ElasticRetryLimit(max_attempts=3),
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

    for restart in range(100):
        try:
            p = run()
            break
        except manager.ElasticRuntimeError as e:
            logging.warning("supervisor: restart %d after %s", restart, e)
    else:
        raise RuntimeError("gave up")
    snap.join()
    return p
