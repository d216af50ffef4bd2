"""A port that still starts as one process of a multi-controller job: its fault-free run
crashes before its first batch."""

from __future__ import annotations

from typing import Any

import jax


def main(**options: Any) -> Any:
    jax.numpy.zeros(2).block_until_ready()
    jax.distributed.initialize()  # left over from the multi-controller launcher
