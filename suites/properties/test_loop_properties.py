"""The episode properties, over one subject: your loop (``pytest suites/properties
--chaos-loop=pkg.mod:main``), or by default the reference trainer run as a loop.

Hypothesis writes fault schedules from the loop's triggers (its Nth batch, save, restore or
attempt, a time) and every fault kind a loop meets (each slice-down code, loss and repair,
flapping, a loss during a save and during a restore, a slow save, retried errors, preemption,
and, for the snapshot round-trip, last a program's own error that must end the run),
runs the loop unchanged under each, and judges it against its fault-free run. A failure is
shrunk and printed with ``pathways-chaos replay --loop ... --schedule '...'``, which fails the
same way; the example database keeps it, so the next run tries it first. With the ci profile
the search spends at most ``--chaos-budget`` seconds (120) and says what it covered; a
property the budget left no time for is NOT JUDGED, never passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pathways_chaos.harness.properties.settings import PropertyNotJudged

if TYPE_CHECKING:
    from pathways_chaos.harness.properties.loop import LoopSearch


def _search(loop_search: LoopSearch, prop: str) -> None:
    """A property that ran no schedule (the budget was spent) is said NOT JUDGED, never a pass."""
    __tracebackhide__ = True
    try:
        loop_search.run(prop)
    except PropertyNotJudged as why:
        pytest.skip(f"NOT JUDGED: {why}")


def test_loop_snapshot_round_trip(loop_search: LoopSearch) -> None:
    """Restores after losses, losses during saves and restores, a slow save: the loop restores
    the latest snapshot and resumes at its step."""
    _search(loop_search, "snapshot")


def test_loop_dataset_continuity(loop_search: LoopSearch) -> None:
    """Losses and rejoins that change the batch, retried errors, preemption: the committed
    batches eat every sample once, in the fault-free order."""
    _search(loop_search, "dataset")


def test_loop_mesh_rebuild(loop_search: LoopSearch) -> None:
    """Losses, repairs and flapping slices: each mesh holds exactly the active slices, and
    nothing leaks from attempt to attempt."""
    _search(loop_search, "mesh")


def test_loop_stateful_search(loop_search: LoopSearch) -> None:
    """Every scenario, drawn rule by rule as the run goes, judged end to end."""
    _search(loop_search, "stateful")
