# ruff: noqa
"""BROKEN for callback_error: callback passed POSITIONALLY to elastic_retry (6th arg); it reads float(loss)
with no guard. ElasticRetryLimit(5)."""

import sys, os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager
from common import *

LAST = {}


def report():
    if "loss" in LAST:
        print("event; loss", float(LAST.pop("loss")))


def main(devices=None, steps=12):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    # max_retries, minimum_slice_count, poll_interval, timeout, pre_callback, on_elastic_event_callback, retry_policy
    @mgr.elastic_retry(None, 1, 1, None, None, report, manager.ElasticRetryLimit(5))
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
            params, loss = train_step(params, *place_batch(mesh, next(it)))
            LAST["loss"] = loss
            if step % 2 == 0:
                snap.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        LAST.clear()
        return params

    p = run()
    snap.join()
    return p
