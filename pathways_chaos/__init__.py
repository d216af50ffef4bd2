"""pathways-chaos: prove that elastic JAX training survives failure on Cloud Pathways on GKE.

The public API, after chex: ``import pathways_chaos as pc`` and use ``pc.FakeCluster``,
``pc.parse_schedule``, ``pc.play``... Everything here is imported lazily, on first use: the
pytest plugin lives in this package, and a session that asks for nothing of ours must not pay
for (or be changed by) importing JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The one list of public names: the imports below, read by type checkers as they are and by
# this module at run time (``_exports``), which imports each name lazily, on first use.


def _exports() -> dict[str, str]:
    """Name -> the module that defines it, from this file's ``if TYPE_CHECKING:`` imports."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


_EXPORTS: dict[str, str] = _exports()
__all__ = sorted(_EXPORTS)

if not TYPE_CHECKING:  # a type checker sees the imports below, and ``pc.<typo>`` is an error

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'pathways_chaos' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from pathways_chaos.faults.model import Fault as Fault
    from pathways_chaos.faults.model import FaultSpecError as FaultSpecError
    from pathways_chaos.faults.model import Schedule as Schedule
    from pathways_chaos.faults.model import ScheduledFault as ScheduledFault
    from pathways_chaos.faults.model import Trigger as Trigger
    from pathways_chaos.faults.model import parse_fault as parse_fault
    from pathways_chaos.faults.model import parse_schedule as parse_schedule
    from pathways_chaos.faults.safety import ChaosRefused as ChaosRefused
    from pathways_chaos.faults.slice import DataLoss as DataLoss
    from pathways_chaos.faults.slice import DeadlineExceeded as DeadlineExceeded
    from pathways_chaos.faults.slice import FlappingSlice as FlappingSlice
    from pathways_chaos.faults.slice import Internal as Internal
    from pathways_chaos.faults.slice import NotFound as NotFound
    from pathways_chaos.faults.slice import Preemption as Preemption
    from pathways_chaos.faults.slice import RaiseError as RaiseError
    from pathways_chaos.faults.slice import RepairSlice as RepairSlice
    from pathways_chaos.faults.slice import SlowHealth as SlowHealth
    from pathways_chaos.fixtures.chaos import Chaos as Chaos
    from pathways_chaos.fixtures.mtc import MtcRunner as MtcRunner
    from pathways_chaos.harness.acceptance.adapter import TrainingAdapter as TrainingAdapter
    from pathways_chaos.harness.engine.backend import ClusterBackend as ClusterBackend
    from pathways_chaos.harness.engine.clock import FakeClock as FakeClock
    from pathways_chaos.harness.engine.clock import make_clock as make_clock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster as FakeCluster
    from pathways_chaos.harness.engine.recorder import Recorder as Recorder
    from pathways_chaos.harness.engine.recorder import read_log as read_log
    from pathways_chaos.harness.engine.topology import SliceTopology as SliceTopology
    from pathways_chaos.harness.episodes.episode import run_episode as run_episode
    from pathways_chaos.harness.episodes.result import EpisodeResult as EpisodeResult
    from pathways_chaos.harness.errors import ChaosConfigError as ChaosConfigError
    from pathways_chaos.harness.errors import ChaosError as ChaosError
    from pathways_chaos.harness.judging.oracle import check as check
    from pathways_chaos.harness.judging.verdict import OracleViolation as OracleViolation
    from pathways_chaos.harness.judging.verdict import Verdict as Verdict
    from pathways_chaos.harness.play import Outcome as Outcome
    from pathways_chaos.harness.play import play as play
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer as ReferenceTrainer
    from pathways_chaos.harness.reference.trainer import TrainerConfig as TrainerConfig
