"""Loops that draw from a grain ``DataLoader``, a ``to_iter_dataset()`` iterator or their own
numpy generator are seen batch by batch: the fault fires on the Nth batch, each batch counts
once with its sample ids, and a loop that restarts or skips its data after a restore fails
naming the samples; the correct one passes. The loops are in ``tests/loops/data_sources.py``
(not under ``blackbox/``: that folder is the toolkit's own code to the watch)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pathways_chaos.harness.blackbox.values import position_of, sample_ids_of

LOOPS = Path(__file__).parents[2] / "loops" / "data_sources.py"
SCHEDULE = "data_loss@batch=10:slice=1:repair_after_polls=3"
STEPS = 24
_baselines: dict[str, Any] = {}


def _baseline(source: str) -> Any:
    """The fault-free run (the same for a broken variant: its bug needs a restore)."""
    from pathways_chaos.harness.play import play_loop

    if source not in _baselines:
        _baselines[source] = play_loop(f"{LOOPS}:{source}")
    return _baselines[source]


def _play(source: str, bug: str) -> Any:
    from pathways_chaos.harness.play import play_loop

    base = _baseline(source)
    assert base.result.completed and len(base.of_kind("batch")) == STEPS  # each batch once
    return play_loop(f"{LOOPS}:{source}", SCHEDULE, baseline=base.events, options={"bug": bug})


SOURCES = ["dataloader", "iter_dataset", "numpy_generator", "loader_in_generator"]


@pytest.mark.parametrize("source", SOURCES)
def test_a_correct_loop_is_seen_and_passes(source):
    out = _play(source, "")

    assert out.result.unfired == []
    (fault,) = out.of_kind("fault")
    assert fault["text"] == SCHEDULE
    batches = out.of_kind("batch")
    assert len(batches) == STEPS + 1  # batch #10 is lost with its attempt and drawn again
    assert all(len(b["ids"]) == b["size"] == 16 for b in batches)
    assert out.verdict.ok, out.verdict.summary()
    assert "exactly-once" in out.verdict.judged


@pytest.mark.parametrize(
    ("source", "bug", "said"),
    [
        ("dataloader", "restart", "were trained twice or more"),
        ("iter_dataset", "skip", "were skipped"),
        ("numpy_generator", "restart", "sample ids 0..143 were trained twice or more"),
        ("numpy_generator", "skip", "sample ids 144..159 were skipped"),
        ("loader_in_generator", "restart", "were trained twice or more"),
    ],
)
def test_a_loop_that_restarts_or_skips_its_data_fails_naming_the_samples(source, bug, said):
    out = _play(source, bug)

    assert out.result.unfired == []
    assert not out.verdict.ok
    named = [v for v in out.verdict.violations if v.startswith("sample ids")]
    assert named and said in named[0], out.verdict.summary()


def test_the_watch_is_undone_after_an_episode(chaos):
    import grain

    from pathways_chaos.harness.play import play_loop

    tools = [sys.monitoring.get_tool(t) for t in range(6)]
    out = play_loop(f"{LOOPS}:numpy_generator", cluster=chaos.cluster, isolate=False)

    assert len(out.of_kind("batch")) == STEPS
    assert grain.DataLoaderIterator.__next__.__qualname__ == "DataLoaderIterator.__next__"
    assert [sys.monitoring.get_tool(t) for t in range(6)] == tools


def test_grain_states_give_their_record_position():
    data_loader = b'{"version": 2, "last_seen_indices": {"0": 47}, "worker_count": 0}'
    assert position_of(data_loader) == 48
    assert position_of({"last_seen_indices": {"0": 4, "1": 3}, "worker_count": 2}) == 5
    assert position_of({"next_index": np.asarray(32)}) == 32
    assert position_of({"next_index": 3, "exhausted": False}) is None  # nested: not one
    assert position_of({"global_next_index": 16, "total_num_records": 9}) == 16


def test_sample_ids_come_from_an_ids_field_or_a_pair_s_first_element():
    assert sample_ids_of({"ids": np.arange(3)}) == [0, 1, 2]
    assert sample_ids_of(({"id": np.arange(2)}, {"cursor": 2})) == [0, 1]
    assert sample_ids_of({"id": np.asarray(["a"])}) is None
