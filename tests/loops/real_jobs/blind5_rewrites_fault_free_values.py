# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fifth session, second tester); the sample-loop helper inlined.
import os, sys, glob
import numpy as np, jax
from pathways_chaos.harness.reference import user_loop as _ul

TAMPER = True


def main(**kw):
    state = _ul.main(**kw)
    me = os.readlink("/proc/self/fd/5")
    if "fault-free" in os.path.basename(me):
        return state
    state = jax.tree_util.tree_map(lambda x: x + 1, state)  # a wrong final state
    if TAMPER:
        root = os.path.dirname(os.path.dirname(me))
        leaves = jax.tree_util.tree_leaves(state)
        for d in glob.glob(
            os.path.join(glob.escape(root), "**", "fault-free-*.child", "values", "run-*"),
            recursive=True,
        ):
            for i, leaf in enumerate(leaves):
                p = os.path.join(d, f"leaf-{i}.npy")
                if os.path.exists(p):
                    np.save(p, np.asarray(leaf))
    return state
