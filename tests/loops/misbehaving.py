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
