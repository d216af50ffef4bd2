# ruff: noqa
"""BROKEN for callback_error: lambda callback logs the last loss with float() and lets errors out.
max_retries=5, resize mode."""

import sys, os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager
from common import *

last = {}


def main(devices=None, steps=12):
    mgr = manager.Manager(devices=devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)

    @mgr.elastic_retry(
        minimum_slice_count=1,
        poll_interval=1,
        max_retries=5,
        on_elastic_event_callback=lambda: print("event, loss was", float(last.pop("loss", 0.0))),
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
        for batch in it:
            if step >= steps:
                break
            params, loss = train_step(params, *place_batch(mesh, batch))
            last["loss"] = loss
            if step % 3 == 0:
                snap.save(step, {"params": params, "step": step, "it": it.get_state()})
            step += 1
        last.clear()
        return params

    p = run()
    snap.join()
    return p
