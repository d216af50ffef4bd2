"""A placement is linked to a drawn batch by the address of its host buffer, and only while the
batch's memory is alive: freed, its addresses may be handed to any later array (a flaky
"kept the old mesh" on a correct loop came from a step linked to batch #1 that way)."""

from __future__ import annotations

import gc

import numpy as np

from pathways_chaos.harness.blackbox.lineage import LineageSeam


def _seam() -> LineageSeam:
    return LineageSeam(lambda *a, **k: None, lambda: {"run": 1, "attempt": 1})


def test_a_live_batch_is_found_by_the_address_of_a_view_of_it() -> None:
    seam = _seam()
    batch = {"x": np.arange(64, dtype=np.float32)}
    seam.drawn(1, batch)
    assert seam._host_arg(batch["x"][8:16]) == {"source": "batch", "batch": 1}


def test_addresses_of_a_batch_that_is_gone_link_nothing() -> None:
    seam = _seam()
    memory = bytearray(256)  # outlives the batch: the same addresses, another array
    batch = {"x": np.frombuffer(memory, dtype=np.float32)}
    seam.drawn(1, batch)
    later = np.frombuffer(memory, dtype=np.float32)  # what a reused address looks like
    assert seam._host_arg(later) == {"source": "batch", "batch": 1}  # batch still alive
    del batch
    gc.collect()
    assert seam._host_arg(later) == {"source": "host"}
