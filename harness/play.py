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

from pathways_chaos.harness.engine.backend import ClusterBackend, KubeBacked, Unguardable
from pathways_chaos.harness.judging.yardsticks import YardstickRuns, judge_with_yardsticks

if TYPE_CHECKING:
    from pathways_chaos.faults.model import Schedule
    from pathways_chaos.harness.engine.deadline import Deadline
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.result import EpisodeResult
    from pathways_chaos.harness.judging.verdict import Verdict
    from pathways_chaos.harness.kube.child_bridge import BridgeBinding
    from pathways_chaos.harness.kube.kube_cluster import KubeBridgedCluster
    from pathways_chaos.harness.reference.trainer import TrainerConfig


@dataclasses.dataclass
class Outcome:
    """An episode and the judges' verdict on it, from every front door: ``play``,
    ``play_loop``, ``play_mtc``, ``chaos.run`` and ``chaos.run_loop``."""

    result: EpisodeResult
    verdict: Verdict
    #: The Multi-Tier Checkpointing properties' violations (``play_mtc``); empty otherwise.
    problems: list[str] = dataclasses.field(default_factory=list)

    def __repr__(self) -> str:
        # Short: an assertion on an Outcome must not print the whole event log.
        failed = len(self.verdict.violations) + len(self.problems)
        verdict = "ok" if self.ok else f"{failed} violations"
        return f"Outcome({len(self.result.events)} events, {verdict})"

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.result.events

    @property
    def error(self) -> BaseException | None:
        return self.result.error

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.problems

    def raise_if_failed(self) -> None:
        self.verdict.raise_if_failed()
        assert not self.problems, "MTC properties violated:\n" + "\n".join(self.problems)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.result.events if e["kind"] == kind]

    def meshes(self) -> list[list[int]]:
        return [e["shape"] for e in self.of_kind("mesh")]


def play(
    schedule: str | Schedule = "",
    *,
    loop: Callable[..., Any] | str | None = None,
    config: TrainerConfig | None = None,
    cluster: ClusterBackend | None = None,
    topology: SliceTopology | str | None = None,
    clock: str = "fake",
    trainer: Callable[..., Any] | str | None = None,
    log_path: str | Path | None = None,
    listeners: Iterable[Callable[[dict[str, Any]], None]] = (),
    expect_completed: bool = True,
    replay: bool = True,
    isolate: bool | None = None,
    baseline: Sequence[dict[str, Any]] | None = None,
    options: dict[str, Any] | None = None,
    checkpoint_dir: str | Path | None = None,
    clean_rerun: bool = True,
    deadline: Deadline | None = None,
    lineage: bool = True,
    show_library_logs: bool = False,
) -> Outcome:
    """One episode under ``schedule``, judged: the one front door for every subject.

    With ``loop`` (a function, ``MODULE:FUNC`` or ``FILE.py:FUNC``), a user's own loop runs
    unchanged, each run in a child process, and is judged from the libraries' calls the
    black-box observer saw (``options``: its keyword arguments; ``baseline``: the log of its
    fault-free run, without which the judges that need one say "not judged"). Without it, the
    reference trainer (or ``trainer``) runs with ``config``.

    Without ``cluster``, a fake cluster of ``topology`` (default 4x2) is made for this episode
    and undone after it. A trainer the toolkit did not write runs, and is replayed, in child
    processes on a fake cluster of the same shape (``isolate``: None decides so, True insists,
    False keeps it here: the toolkit's own tests of in-process behaviour). An argument meant
    for the other subject is refused in one line.
    """
    where: dict[str, Any] = {
        "cluster": cluster,
        "topology": topology,
        "clock": clock,
        "log_path": log_path,
        "listeners": listeners,
    }
    if loop is not None:
        _refuse_other_subjects(
            "a loop",
            "a loop takes options= (its keyword arguments) and baseline= (its fault-free run)",
            config=config is not None,
            trainer=trainer is not None,
            replay=not replay,
            expect_completed=not expect_completed,
        )
        isolated = True if isolate is None else isolate
        return play_loop(
            loop, schedule, baseline=baseline, options=options, checkpoint_dir=checkpoint_dir,
            lineage=lineage, show_library_logs=show_library_logs, clean_rerun=clean_rerun,
            deadline=deadline, isolate=isolated, **where,
        )  # fmt: skip
    _refuse_other_subjects(
        "the reference trainer",
        "pass loop= to run your own loop; the trainer takes config= (its checkpoint folder "
        "too: TrainerConfig(checkpoint_dir=...))",
        baseline=baseline is not None,
        options=options is not None,
        checkpoint_dir=checkpoint_dir is not None,
        clean_rerun=not clean_rerun,
        deadline=deadline is not None,
        lineage=not lineage,
        show_library_logs=show_library_logs,
    )
    return _play_trainer(
        schedule, config, trainer, where, expect_completed=expect_completed, replay=replay,
        isolate=isolate,
    )  # fmt: skip


def _refuse_other_subjects(whose: str, hint: str, **given: bool) -> None:
    """A ``play`` argument that belongs to the other subject: one line, before anything runs."""
    from pathways_chaos.harness.errors import ChaosConfigError

    named = [f"{name}=" for name, set_ in given.items() if set_]
    if named:
        raise ChaosConfigError(
            f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} not for {whose}: {hint}"
        )


def _play_trainer(
    schedule: str | Schedule,
    config: TrainerConfig | None,
    trainer: Callable[..., Any] | str | None,
    where: dict[str, Any],
    *,
    expect_completed: bool,
    replay: bool,
    isolate: bool | None,
) -> Outcome:
    """``play`` of the reference trainer (or a trainer class of the team's); ``where``: its
    cluster, topology, clock, log path and listeners."""
    cluster: ClusterBackend | None = where["cluster"]
    topology, clock = where["topology"], where["clock"]
    log_path, listeners = where["log_path"], where["listeners"]
    from pathways_chaos.faults.model import as_schedule
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig

    plan = as_schedule(schedule)
    if isinstance(trainer, str) and _by_name_in_child(trainer, cluster, isolate):
        from pathways_chaos.harness.episodes.supervised_trainer import check_trainer
        from pathways_chaos.harness.errors import ChaosConfigError

        problem = check_trainer(trainer, "trainer")  # in a child: one line, before the episode
        if problem is not None:
            raise ChaosConfigError(problem)
        factory: Any = trainer  # imported only in the episode's child
    else:
        factory = load_object(trainer, "trainer") if isinstance(trainer, str) else trainer
    if isinstance(factory, str) or _isolated(factory, cluster, isolate):
        return _play_in_child(
            plan,
            factory,
            config or TrainerConfig(),
            cluster,
            topology,
            clock,
            log_path,
            listeners,
            expect_completed=expect_completed,
            replay=replay,
        )
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


def _by_name_in_child(spec: str, cluster: ClusterBackend | None, isolate: bool | None) -> bool:
    """A trainer named by a spec that is not the toolkit's, on a fake (or one bridged to the
    JobSet): loaded by its child."""
    return _in_child_on(cluster) and isolate is not False and not spec.startswith("pathways_chaos.")


def _isolated(factory: Any, cluster: ClusterBackend | None, isolate: bool | None) -> bool:
    """Whether a trainer episode runs in a child: one the toolkit did not write, on a fake (or
    one bridged to the JobSet)."""
    from pathways_chaos.harness.episodes.supervised_trainer import is_toolkits_own

    if isolate is False or not _in_child_on(cluster):
        return False
    return bool(isolate) or not is_toolkits_own(factory)


def _in_child_on(cluster: ClusterBackend | None) -> bool:
    """Whether an episode on ``cluster`` can run in a child: the fake, made there, or the fake
    bridged to the JobSet, whose faults the child acts out (not ``--pathways-proxy``'s devices)."""
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster

    return cluster is None or type(cluster) is FakeCluster or _bridged(cluster) is not None


def _play_in_child(
    plan: Schedule,
    factory: Callable[..., Any] | str,
    config: TrainerConfig,
    cluster: ClusterBackend | None,
    topology: SliceTopology | str | None,
    clock: str,
    log_path: str | Path | None,
    listeners: Iterable[Callable[[dict[str, Any]], None]],
    *,
    expect_completed: bool,
    replay: bool,
) -> Outcome:
    """``play`` for a trainer the toolkit did not write: its episode and its replay each in a
    child process on a fake cluster of the same shape; judged here from the log."""
    from pathways_chaos.faults.model import check_schedule_fits
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.supervised_trainer import SupervisedTrainerEpisode
    from pathways_chaos.harness.judging import oracle

    down, kube = _handed_over(cluster)
    if isinstance(cluster, FakeCluster):
        shape, clock = cluster.topology, "fake" if cluster.clock.fake else "real"
    elif isinstance(topology, str):
        shape = SliceTopology.parse(topology)
    else:
        shape = topology or SliceTopology.DEFAULT
    # The one-line refusals, before any child starts.
    check_schedule_fits(plan, shape.num_slices, kubernetes=kube is not None)
    config.check_fits(shape.num_slices)
    episode = SupervisedTrainerEpisode(
        factory,
        config,
        plan,
        topology=str(shape),
        clock=clock,
        down=down,
        log_path=log_path,
        listeners=listeners,
        kube=kube,
    )
    result = episode.run()
    verdict = oracle.check(
        result.events,
        replay=replay,
        expect_completed=expect_completed,
        trainer=None if isinstance(factory, str) else factory,
        # A trainer class replays in a child (one named by a spec: its child checks it is one);
        # anything else falls back to the reference model's step here, as in this process.
        replayed=episode.replay if _replayable(factory) else None,
    )
    return Outcome(result, verdict)


def _replayable(factory: Any) -> bool:
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer

    if isinstance(factory, str):
        return True
    return isinstance(factory, type) and issubclass(factory, ReferenceTrainer)


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
    isolate: bool = True,
    yardsticks: YardstickRuns | None = None,
    digests: bool = False,
) -> Outcome:
    """Runs a user's own loop, unchanged, under ``schedule`` and judges it from the libraries'
    calls the black-box observer saw.

    Each run is a child process (``episodes/supervisor.py``), also on ``--cluster``, where the
    child acts the faults out through the API and this process keeps the Lease and the rollback
    journal; ``isolate=False`` (the toolkit's own tests) and ``--pathways-proxy`` (the real
    Pathways devices) run the loop in this process.

    When the recovery changed the batch schedule, the final state is judged against a run with
    the same losses right after the snapshot it resumed from (``clean_rerun``); ``yardsticks``
    keeps those runs for the next episode of the same loop, options and topology (a search).

    ``baseline`` is the event log of a fault-free run of the same loop and options (this
    function with no schedule); without it, the judges that need one say "not judged".
    ``digests`` puts a digest of each leaf in every save and restore event (the acceptance
    table's restore rows read them; no judge of the panel does, and each is a pass over the
    whole state at every save).
    """
    from pathways_chaos.faults.model import as_schedule
    from pathways_chaos.harness.episodes.loop_episode import refuse_provided_options

    plan = as_schedule(schedule)
    refuse_loop_schedule(plan, cluster, topology)  # one line, before anything runs
    refuse_provided_options(options)
    how = _LoopRun(
        options,
        log_path,
        checkpoint_dir,
        tuple(listeners),
        lineage,
        show_library_logs,
        deadline,
        digests,
    )
    if (isinstance(cluster, KubeBacked) and _bridged(cluster) is None) or not isolate:
        return _play_loop_in_process(loop, plan, baseline, clean_rerun, cluster, how)
    shape = _shape_of(cluster, topology)
    clock_kind = (
        clock if cluster is None else ("fake" if getattr(cluster.clock, "fake", False) else "real")
    )
    result = _supervised(loop, plan, shape, clock_kind, how, cluster=cluster)

    def rerun(plan: Schedule, where: Path | None, name: str) -> tuple[Any, str]:
        again = _supervised(loop, plan, shape, clock_kind, how.rerun(where, name), cluster=cluster)
        return _usable(again, name, plan)

    verdict = judge_with_yardsticks(
        result.events,
        baseline,
        reruns=clean_rerun,
        checkpoint_dir=checkpoint_dir,
        rerun=rerun,
        made=yardsticks,
    )
    return Outcome(result, verdict)


def _usable(again: EpisodeResult, name: str, plan: Schedule) -> tuple[Any, str]:
    """A yardstick run's events, or why they cannot be used."""
    if again.completed:
        return again.events, ""
    return None, f"the {name} rerun ({plan.to_text()}) did not complete"


@dataclasses.dataclass(frozen=True)
class _LoopRun:
    """How each run of a loop's episode is made and logged, in a child or in this process."""

    options: dict[str, Any] | None
    log_path: str | Path | None
    checkpoint_dir: str | Path | None
    listeners: tuple[Callable[[dict[str, Any]], None], ...]
    lineage: bool
    show_library_logs: bool
    deadline: Deadline | None
    digests: bool = False

    def rerun(self, checkpoint_dir: Path | None, name: str) -> _LoopRun:
        """A yardstick run's: its log beside the episode's (``-clean``, ``-probe``), nobody
        listening."""
        log = self.log_path
        if log is not None:
            log = Path(log).with_name(f"{Path(log).stem}-{name}.jsonl")
        return dataclasses.replace(
            self, log_path=log, checkpoint_dir=checkpoint_dir, listeners=(), show_library_logs=False
        )

    def episode(self) -> dict[str, Any]:
        """The keyword arguments both episode runners take."""
        return {
            "options": self.options,
            "log_path": self.log_path,
            "checkpoint_dir": self.checkpoint_dir,
            "listeners": self.listeners,
            "lineage": self.lineage,
            "show_library_logs": self.show_library_logs,
            "deadline": self.deadline,
            "digests": self.digests,
        }


def refuse_loop_schedule(
    plan: Schedule, cluster: ClusterBackend | None, topology: SliceTopology | str | None = None
) -> None:
    """A schedule a loop's episode cannot act out, refused (``FaultSpecError``, one line) before
    any run: a slice outside the cluster, a fault the loop's fake does not model."""
    from pathways_chaos.faults.model import check_schedule_fits
    from pathways_chaos.harness.engine.topology import SliceTopology

    slices = SliceTopology.parse(_shape_of(cluster, topology)).num_slices
    check_schedule_fits(plan, slices, kubernetes=isinstance(cluster, KubeBacked))


def _shape_of(cluster: ClusterBackend | None, topology: SliceTopology | str | None) -> str:
    from pathways_chaos.harness.engine.topology import SliceTopology

    if cluster is not None:
        return str(cluster.topology)
    if topology is None:
        return str(SliceTopology.DEFAULT)
    return str(SliceTopology.parse(topology) if isinstance(topology, str) else topology)


def _supervised(
    loop: Callable[..., Any] | str,
    plan: Schedule,
    shape: str,
    clock: str,
    how: _LoopRun,
    *,
    cluster: ClusterBackend | None = None,
) -> EpisodeResult:
    """The user's loop in child processes (one per run), starting from what ``cluster`` hands
    over (``_handed_over``); this process only reads its log."""
    from pathways_chaos.harness.episodes.child_watch import SetupFailed, ToolkitFailed
    from pathways_chaos.harness.episodes.supervisor import run_supervised_loop_episode

    down, kube = _handed_over(cluster)
    result = run_supervised_loop_episode(
        loop, plan, topology=shape, clock=clock, kube=kube, down=down, **how.episode()
    )
    if isinstance(result.error, (ToolkitFailed, SetupFailed)):
        # Ours, or the setup's: raised, never judged as the loop's failure (the chaos fixture
        # reports the first as an error of the toolkit, the second as its one line).
        raise result.error
    return result


def _handed_over(cluster: ClusterBackend | None) -> tuple[list[int], BridgeBinding | None]:
    """What an episode's child starts from on ``cluster``: the slices the test took down and,
    on the fake bridged to the JobSet, the binding its faults go through (what earlier
    episodes' children changed undone first; ``ready_for_an_episode``)."""
    from pathways_chaos.harness.engine.backend import SliceStates
    from pathways_chaos.harness.kube.child_bridge import binding_of

    bridged = _bridged(cluster)
    if bridged is not None:
        return bridged.ready_for_an_episode(), binding_of(bridged)
    return (sorted(cluster.down_slices()) if isinstance(cluster, SliceStates) else []), None


def _bridged(cluster: ClusterBackend | None) -> KubeBridgedCluster | None:
    """The session's cluster when its faults can be acted out from a child: the fake's devices
    bridged to the JobSet (not the real Pathways devices of ``--pathways-proxy``)."""
    from pathways_chaos.harness.kube.kube_cluster import KubeBridgedCluster

    return cluster if isinstance(cluster, KubeBridgedCluster) else None


def _play_loop_in_process(
    loop: Callable[..., Any] | str,
    plan: Schedule,
    baseline: Sequence[dict[str, Any]] | None,
    clean_rerun: bool,
    cluster: ClusterBackend | None,
    how: _LoopRun,
) -> Outcome:
    """``--pathways-proxy`` (the real Pathways devices, reached from this process) and the
    toolkit's own tests of in-process behaviour (see docs/concepts/isolation.md)."""
    from pathways_chaos.harness.engine.backend import SliceStates
    from pathways_chaos.harness.episodes.loop_episode import load_loop, run_loop_episode

    fn = load_loop(loop) if isinstance(loop, str) else loop
    with contextlib.ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(_fake_cluster(None, "fake"))
        on = cluster
        result = run_loop_episode(on, fn, plan, **how.episode())

        def rerun(plan: Schedule, where: Path | None, name: str) -> tuple[Any, str]:
            for s in sorted(on.down_slices() if isinstance(on, SliceStates) else ()):
                on.repair_slice(s)
            settings = dataclasses.replace(how.rerun(where, name), log_path=None)
            return _usable(run_loop_episode(on, fn, plan, **settings.episode()), name, plan)

        verdict = judge_with_yardsticks(
            result.events,
            baseline,
            reruns=clean_rerun,
            checkpoint_dir=how.checkpoint_dir,
            rerun=rerun,
        )
    return Outcome(result, verdict)


def play_mtc(
    schedule: str | Schedule = "",
    *,
    cluster: Any,
    service: Callable[..., Any] | None = None,
    trainer: Callable[..., Any] | None = None,
    final_step: int = 20,
    **options: Any,
) -> Outcome:
    """Runs one Multi-Tier Checkpointing job under ``schedule`` on ``cluster``'s fake hosts (the
    real Orbax MTC client; fresh ramdisks, peers, backup and an emulated replication service,
    started and stopped around it) and judges it: the oracle, plus the MTC properties.

    ``options`` are ``MtcOptions`` fields; ``service`` replaces the replication service (a
    broken variant), ``trainer`` the MTC trainer.
    """
    from pathways_chaos.faults.model import as_schedule
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.mtc import judging
    from pathways_chaos.harness.mtc.cluster import MtcCluster
    from pathways_chaos.harness.mtc.episode import run_mtc_episode
    from pathways_chaos.harness.mtc.service import ReplicationService
    from pathways_chaos.harness.mtc.trainer import MtcOptions, MtcTrainer
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    plan = as_schedule(schedule)
    with MtcCluster(cluster, service_factory=service or ReplicationService) as mtc:
        result = run_mtc_episode(
            mtc,
            TrainerConfig(mode="pause_resume", final_step=final_step),
            plan,
            options=MtcOptions(run_name=mtc.job, mount=mtc.mount, **options),
            trainer_factory=trainer or MtcTrainer,
        )
    return Outcome(result, oracle.check(result.events), judging.check_all(result.events))


def _fake_cluster(topology: SliceTopology | str | None, clock: str) -> Any:
    from pathways_chaos.harness.engine.clock import make_clock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    if topology is None:
        topology = SliceTopology.DEFAULT
    elif isinstance(topology, str):
        topology = SliceTopology.parse(topology)
    return FakeCluster(topology, clock=make_clock(clock))


def load_object(spec: str, what: str) -> Any:
    """``MODULE:NAME`` (or ``MODULE.NAME``) to the object, or one line saying how to write it."""
    from pathways_chaos.harness.engine.user_modules import load_name
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        return load_name(spec)
    except (ValueError, ImportError, AttributeError) as error:
        raise ChaosConfigError(
            f"{what}={spec!r} cannot be loaded ({error}): write MODULE:NAME, for example "
            "pathways_chaos.harness.reference.trainer:ReferenceTrainer"
        ) from None
