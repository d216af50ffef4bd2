"""Play one episode and judge it: the one way the CLI, the fixture, replay and acceptance do it.

A schedule is applied through a cluster backend (a fresh fake cluster unless one is given) to a
trainer; the oracle reads the log. The result and the verdict come back together as an
``Outcome``, so no caller wires parse, cluster, episode and oracle by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathways_chaos.faults.model import Schedule
    from pathways_chaos.harness.engine.backend import ClusterBackend
    from pathways_chaos.harness.engine.episode import EpisodeResult
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.judging.oracle import Verdict
    from pathways_chaos.harness.reference.trainer import TrainerConfig


@dataclasses.dataclass
class Outcome:
    """An episode and the oracle's verdict on it."""

    result: EpisodeResult
    verdict: Verdict

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.result.events

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.result.events if e["kind"] == kind]

    def meshes(self) -> list[list[int]]:
        return [e["shape"] for e in self.of_kind("mesh")]


def play(
    schedule: str | Schedule = "",
    *,
    config: TrainerConfig | None = None,
    cluster: ClusterBackend | None = None,
    topology: SliceTopology | str | None = None,
    clock: str = "fake",
    trainer: Callable[..., Any] | str | None = None,
    log_path: str | Path | None = None,
    listeners: Iterable[Callable[[dict[str, Any]], None]] = (),
    expect_completed: bool = True,
    replay: bool = True,
) -> Outcome:
    """Runs ``trainer`` (the reference trainer by default) under ``schedule`` and judges it.

    Without ``cluster``, a fake cluster of ``topology`` (default 4x2) is made for this episode
    and undone after it.
    """
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.episode import run_episode
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig

    plan = parse_schedule(schedule) if isinstance(schedule, str) else schedule
    factory = load_object(trainer, "trainer") if isinstance(trainer, str) else trainer
    with contextlib.ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(_fake_cluster(topology, clock))
        result = run_episode(
            cluster,
            config or TrainerConfig(),
            plan,
            log_path=log_path,
            trainer_factory=factory or ReferenceTrainer,
            listeners=listeners,
        )
    verdict = oracle.check(result.events, replay=replay, expect_completed=expect_completed)
    return Outcome(result, verdict)


def _fake_cluster(topology: SliceTopology | str | None, clock: str) -> Any:
    from pathways_chaos.harness.engine.clock import make_clock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    if topology is None:
        topology = SliceTopology(4, 2)
    elif isinstance(topology, str):
        topology = SliceTopology.parse(topology)
    return FakeCluster(topology, clock=make_clock(clock))


def load_object(spec: str, what: str) -> Any:
    """``MODULE:NAME`` (or ``MODULE.NAME``) to the object, or one line saying how to write it."""
    import pkgutil

    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        if ":" not in spec and "." not in spec:
            raise ValueError("no module")
        return pkgutil.resolve_name(spec)
    except (ValueError, ImportError, AttributeError) as error:
        raise ChaosConfigError(
            f"{what} {spec!r} cannot be loaded ({error}): write MODULE:NAME, for example "
            "pathways_chaos.harness.reference.trainer:ReferenceTrainer"
        ) from None
