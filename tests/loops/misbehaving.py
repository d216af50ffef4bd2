"""Loops that misbehave as user code does: the episode must end in a verdict, never end pytest."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def returns_a_string(**options: Any) -> Any:
    return "done"


def returns_at_once(**options: Any) -> Any:
    return None


def calls_sys_exit(**options: Any) -> Any:
    sys.exit(3)


def calls_os_exit(**options: Any) -> Any:
    os._exit(0)


def kills_itself(**options: Any) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


def trains_from_a_list(**options: Any) -> Any:
    """Trains without a grain ElasticIterator: a batch= trigger can never fire."""
    import jax.numpy as jnp

    state = jnp.zeros(3)
    for batch in [jnp.ones(3)] * 4:
        state = state + batch
    return state


class NotALoop:
    pass


def never_returns(**options: Any) -> Any:
    """Spins without the clock and without end (a while True the author forgot to leave)."""
    import jax.numpy as jnp

    x = jnp.zeros(2)
    while True:
        x = x + 0


def blocks_deep_in_its_own_code(**options: Any) -> Any:
    """Waits for ever 150 calls deep in its own code (a recursive model builder, a deep
    callback chain): past the 100 frames a stack dump keeps per thread."""
    import threading

    def descend(depth: int) -> None:
        if depth:
            descend(depth - 1)
        else:
            threading.Event().wait()  # the innermost frame of the loop's own

    descend(150)


def waits_for_five_slices(*, devices: Any = None) -> Any:
    """A port whose elastic_retry(minimum_slice_count=5) can never be met on 4 slices."""
    from pathwaysutils.elastic import manager

    mgr = manager.Manager(devices)

    @mgr.elastic_retry(minimum_slice_count=5, poll_interval=5, timeout=None)
    def attempt() -> Any:
        import jax.errors

        raise jax.errors.JaxRuntimeError("DATA_LOSS: pretend a slice was lost")

    return attempt()


def saves_what_orbax_cannot(*, devices: Any = None) -> Any:
    """Hands the Snapshotter a tree holding a Python object: Orbax raises deep in its own
    (asyncio) frames; the crash must be named at this file's line that called save()."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    state = {"w": jnp.ones(4), "note": object()}
    snapshotter.save(0, state)  # the line the verdict names
    snapshotter.join()
    return state


def prints_then_crashes(**options: Any) -> Any:
    """Says why it stops on stdout and stderr, as a user's loop does, then raises."""
    for n in range(30):
        print(f"step {n}: loss 0.5")
    print("config: dataset path /data/missing", file=sys.stderr)
    raise FileNotFoundError("/data/missing")
