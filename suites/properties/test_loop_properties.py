"""The property suites over your own loop: ``pytest suites/properties --chaos-loop=pkg.mod:main``.

Hypothesis writes fault schedules from the loop's triggers (its Nth batch, save, restore or
attempt, a time) and every fault kind a loop meets (each slice-down code, loss and repair,
flapping, a loss during a save and during a restore, a slow save, retried errors, preemption),
runs the loop unchanged under each, and judges it against its fault-free run. A failure is
shrunk and printed with ``pathways-chaos replay --loop ... --schedule '...'``, which fails the
same way; the example database keeps it, so the next run tries it first. With the ci profile
the search spends at most ``--chaos-budget`` seconds (120) and says what it covered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathways_chaos.harness.properties.loop import LoopSearch


def test_loop_snapshot_round_trip(loop_search: LoopSearch) -> None:
    """Restores after losses, losses during saves and restores, a slow save: the loop restores
    the latest snapshot and resumes at its step."""
    loop_search.run("snapshot")


def test_loop_dataset_continuity(loop_search: LoopSearch) -> None:
    """Losses and rejoins that change the batch, retried errors, preemption: the committed
    batches eat every sample once, in the fault-free order."""
    loop_search.run("dataset")


def test_loop_mesh_rebuild(loop_search: LoopSearch) -> None:
    """Losses, repairs and flapping slices: each mesh holds exactly the active slices, and
    nothing leaks from attempt to attempt."""
    loop_search.run("mesh")


def test_loop_stateful_search(loop_search: LoopSearch) -> None:
    """Every scenario, drawn rule by rule as the run goes, judged end to end."""
    loop_search.run("stateful")
