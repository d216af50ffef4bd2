# ruff: noqa
"""Hand-rolled retry (no elastic_retry): catches slice-down JaxRuntimeError, restores the snapshot, and gives up
after 3 failures by re-raising. Correct per the guide's allowance for hand-written retries."""

import sys, os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager, elastic
from common import *


def main(devices=None, steps=12):
    mgr = manager.Manager(devices)
    snap = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    failures = 0
    while True:
        try:
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
            break
        except jax.errors.JaxRuntimeError as e:
            if not elastic.is_error_due_to_slice_down(e):
                raise
            failures += 1
            if failures >= 3:
                raise
            mgr.active_slice_indices = elastic.wait_for_slices(
                1, poll_interval=1, slice_to_devices=mgr.slice_to_devices
            )
    snap.join()
    return params
