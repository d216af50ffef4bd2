"""Play one episode and judge it: the one way the CLI, the fixture, replay and acceptance do it.

A schedule is applied through a cluster backend (a fresh fake cluster unless one is given) to a
trainer; the oracle reads the log. The result and the verdict come back together as an
``Outcome``, so no caller wires parse, cluster, episode and oracle by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pathways_chaos.harness.engine.backend import ClusterBackend, SliceStates, Unguardable

if TYPE_CHECKING:
    from pathways_chaos.faults.model import Schedule
    from pathways_chaos.harness.engine.deadline import Deadline
    from pathways_chaos.harness.engine.episode import EpisodeResult
    from pathways_chaos.harness.engine.loop_episode import LoopResult
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.judging.loop_oracle import LoopVerdict
    from pathways_chaos.harness.judging.oracle import Verdict
    from pathways_chaos.harness.reference.trainer import TrainerConfig


@dataclasses.dataclass
class Outcome[R: (EpisodeResult | LoopResult), V: Verdict]:
    """An episode and the oracle's verdict on it: ``Outcome[EpisodeResult, Verdict]`` from
    ``play`` and ``chaos.run``, ``Outcome[LoopResult, LoopVerdict]`` from ``play_loop`` and
    ``chaos.run_loop``. Generic, so a caller reads ``verdict.summary()`` or
    ``result.unfired`` of the kind it asked for, checked."""

    result: R
    verdict: V

    def __repr__(self) -> str:
        # Short: an assertion on an Outcome must not print the whole event log.
        verdict = "ok" if self.verdict.ok else f"{len(self.verdict.violations)} violations"
        return f"Outcome({len(self.result.events)} events, {verdict})"

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
) -> Outcome[EpisodeResult, Verdict]:
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
    # The one-device replay runs on device 0, whatever the episode did to its slice.
    with cluster.unguarded() if isinstance(cluster, Unguardable) else contextlib.nullcontext():
        verdict = oracle.check(
            result.events, replay=replay, expect_completed=expect_completed, trainer=factory
        )
    return Outcome(result, verdict)


def play_loop(
    loop: Callable[..., Any] | str,
    schedule: str | Schedule = "",
    *,
    baseline: Sequence[dict[str, Any]] | None = None,
    options: dict[str, Any] | None = None,
    cluster: ClusterBackend | None = None,
    topology: SliceTopology | str | None = None,
    clock: str = "fake",
    log_path: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    listeners: Iterable[Callable[[dict[str, Any]], None]] = (),
    lineage: bool = True,
    show_library_logs: bool = False,
    clean_rerun: bool = True,
    deadline: Deadline | None = None,
) -> Outcome[LoopResult, LoopVerdict]:
    """Runs a user's own loop, unchanged, under ``schedule`` and judges it from the libraries'
    calls the black-box observer saw.

    When the recovery changed the batch schedule (resize mode, a batch that scales with the
    slices), the final state is judged against a second run with the same losses made right
    after the snapshot the first resumed from (``clean_rerun``; needs ``baseline``).

    ``baseline`` is the event log of a fault-free run of the same loop and options (this
    function with no schedule); without it, the judges that need one say "not judged".
    """
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.loop_episode import load_loop, run_loop_episode
    from pathways_chaos.harness.judging.loop_oracle import judge_loop

    fn = load_loop(loop) if isinstance(loop, str) else loop
    plan = parse_schedule(schedule) if isinstance(schedule, str) else schedule
    with contextlib.ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(_fake_cluster(topology, clock))
        result = run_loop_episode(
            cluster,
            fn,
            plan,
            options=options,
            log_path=log_path,
            checkpoint_dir=checkpoint_dir,
            listeners=listeners,
            lineage=lineage,
            show_library_logs=show_library_logs,
            deadline=deadline,
        )
        verdict = judge_loop(result.events, baseline)
        if clean_rerun and baseline is not None and result.completed:
            why = verdict.not_judged.get("final-state", "")
            if "changed the batch schedule" in why:
                clean, clean_why = _clean_rerun(
                    fn, result.events, cluster, options, checkpoint_dir, lineage
                )
                verdict = judge_loop(result.events, baseline, clean, clean_why)
    return Outcome(result, verdict)


def _clean_rerun(
    loop: Callable[..., Any],
    events: Sequence[dict[str, Any]],
    cluster: ClusterBackend,
    options: dict[str, Any] | None,
    checkpoint_dir: str | Path | None,
    lineage: bool,
) -> tuple[list[dict[str, Any]] | None, str]:
    """The same loop, the same losses made right after the snapshot it resumed from."""
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.loop_episode import run_loop_episode
    from pathways_chaos.harness.judging.clean_rerun import clean_schedule

    text, why = clean_schedule(events)
    if text is None:
        return None, why
    for s in sorted(cluster.down_slices() if isinstance(cluster, SliceStates) else ()):
        cluster.repair_slice(s)
    where = None if checkpoint_dir is None else Path(str(checkpoint_dir) + "-clean")
    result = run_loop_episode(
        cluster,
        loop,
        parse_schedule(text),
        options=options,
        checkpoint_dir=where,
        lineage=lineage,
    )
    if not result.completed:
        return None, f"the clean rerun ({text}) did not complete"
    return result.events, ""


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
            f"{what}={spec!r} cannot be loaded ({error}): write MODULE:NAME, for example "
            "pathways_chaos.harness.reference.trainer:ReferenceTrainer"
        ) from None
