"""pathways-chaos: prove that elastic JAX training survives failure on Cloud Pathways on GKE.

The public API, after chex: ``import pathways_chaos as pc`` and use ``pc.FakeCluster``,
``pc.parse_schedule``, ``pc.play``... Everything here is imported lazily, on first use: the
pytest plugin lives in this package, and a session that asks for nothing of ours must not pay
for (or be changed by) importing JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    # the fake multi-slice cluster
    "FakeCluster": "pathways_chaos.harness.engine.fake_cluster",
    "SliceTopology": "pathways_chaos.harness.engine.topology",
    "FakeClock": "pathways_chaos.harness.engine.clock",
    "make_clock": "pathways_chaos.harness.engine.clock",
    "ClusterBackend": "pathways_chaos.harness.engine.backend",
    # faults and schedules
    "Fault": "pathways_chaos.faults.model",
    "Schedule": "pathways_chaos.faults.model",
    "ScheduledFault": "pathways_chaos.faults.model",
    "Trigger": "pathways_chaos.faults.model",
    "parse_schedule": "pathways_chaos.faults.model",
    "parse_fault": "pathways_chaos.faults.model",
    "DataLoss": "pathways_chaos.faults.slice",
    "DeadlineExceeded": "pathways_chaos.faults.slice",
    "NotFound": "pathways_chaos.faults.slice",
    "Internal": "pathways_chaos.faults.slice",
    "RepairSlice": "pathways_chaos.faults.slice",
    "FlappingSlice": "pathways_chaos.faults.slice",
    "SlowHealth": "pathways_chaos.faults.slice",
    "RaiseError": "pathways_chaos.faults.slice",
    "Preemption": "pathways_chaos.faults.slice",
    # playing and judging an episode
    "play": "pathways_chaos.harness.play",
    "play_loop": "pathways_chaos.harness.play",
    "Outcome": "pathways_chaos.harness.play",
    "run_episode": "pathways_chaos.harness.episodes.episode",
    "EpisodeResult": "pathways_chaos.harness.episodes.episode",
    "Recorder": "pathways_chaos.harness.engine.recorder",
    "read_log": "pathways_chaos.harness.engine.recorder",
    "check": "pathways_chaos.harness.judging.oracle",
    "Verdict": "pathways_chaos.harness.judging.oracle",
    # the reference trainer and the acceptance adapter
    "ReferenceTrainer": "pathways_chaos.harness.reference.trainer",
    "TrainerConfig": "pathways_chaos.harness.reference.trainer",
    "TrainingAdapter": "pathways_chaos.harness.acceptance.adapter",
    # errors: one base
    "ChaosError": "pathways_chaos.harness.errors",
    "ChaosConfigError": "pathways_chaos.harness.errors",
    "FaultSpecError": "pathways_chaos.faults.model",
    "OracleViolation": "pathways_chaos.harness.judging.oracle",
    "ChaosRefused": "pathways_chaos.faults.safety",
}

# Spelled out for type checkers and linters; a test holds it equal to _EXPORTS.
__all__ = [
    "ChaosConfigError",
    "ChaosError",
    "ChaosRefused",
    "ClusterBackend",
    "DataLoss",
    "DeadlineExceeded",
    "EpisodeResult",
    "FakeClock",
    "FakeCluster",
    "Fault",
    "FaultSpecError",
    "FlappingSlice",
    "Internal",
    "NotFound",
    "OracleViolation",
    "Outcome",
    "Preemption",
    "RaiseError",
    "Recorder",
    "ReferenceTrainer",
    "RepairSlice",
    "Schedule",
    "ScheduledFault",
    "SliceTopology",
    "SlowHealth",
    "TrainerConfig",
    "TrainingAdapter",
    "Trigger",
    "Verdict",
    "check",
    "make_clock",
    "parse_fault",
    "parse_schedule",
    "play",
    "play_loop",
    "read_log",
    "run_episode",
]


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
    from pathways_chaos.faults.model import (
        Fault,
        FaultSpecError,
        Schedule,
        ScheduledFault,
        Trigger,
        parse_fault,
        parse_schedule,
    )
    from pathways_chaos.faults.safety import ChaosRefused
    from pathways_chaos.faults.slice import (
        DataLoss,
        DeadlineExceeded,
        FlappingSlice,
        Internal,
        NotFound,
        Preemption,
        RaiseError,
        RepairSlice,
        SlowHealth,
    )
    from pathways_chaos.harness.acceptance.adapter import TrainingAdapter
    from pathways_chaos.harness.engine.backend import ClusterBackend
    from pathways_chaos.harness.engine.clock import FakeClock, make_clock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.recorder import Recorder, read_log
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.episode import EpisodeResult, run_episode
    from pathways_chaos.harness.errors import ChaosConfigError, ChaosError
    from pathways_chaos.harness.judging.oracle import OracleViolation, Verdict, check
    from pathways_chaos.harness.play import Outcome, play, play_loop
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig
