"""The emulated MTC replication service: ours, speaking the real Orbax client's file protocol.

What it does, and where each behaviour comes from (R = shared/reference/multi-tier-
checkpointing.txt, O = orbax 0.12.8 ``multi_tier_checkpointing/initialization.py``, I = inferred,
no public source; the README lists the same table):

1. Consumes ``replicator.yaml`` (O: the client writes it via ``replicator.yaml.tmp`` +
   ``os.replace`` and waits for it to disappear). It waits until every node named by
   ``nodes`` has written one, decides one restore step for all of them (I: the client
   restores every host at the step of its own marker, so the service must agree a single
   step across hosts or the replicas would differ), stages it, writes the markers, and only
   then deletes each ``replicator.yaml`` (O: "only AFTER replicator.yaml disappears we can be
   sure that errors are coming from current invocation").
2. Restore marker (O): a symlink ``{job}-s{step}-n{node}-w{worker}.restore`` to the staged
   step, which the client renames to ``<step>``; a zero-sized file with ``s0`` when there is
   no checkpoint. ``w`` is the node's position in its slice (I).
3. Tier order (R: "pulled from the fastest available source", "preferring in-cluster copies
   over GCS backups"): own ramdisk, then a peer's copy, then the backup; the step is the
   newest one that every node can get completely from some tier (R: "restores the most
   recent complete checkpoint").
4. ``restore.version`` in the job's backup folder pins the step, restored from the backup even
   when a newer in-cluster copy exists (R). If the backup lacks it, the service fails with
   ``replicator.failed`` (I). A pin is applied once, then renamed ``restore.version.applied``
   (I: the GKE docs say to create it "before starting the job"; a pin left in force would send
   every later restart back to the same old step).
5. Replicates each complete local step (O/R: Orbax finalises a step by renaming its temporary
   folder; a step is complete when ``<step>/_CHECKPOINT_METADATA`` exists) to the next of the
   node's peer ranks (the same position in the next data-parallel slice, a ring; O:
   ``peer-ranks``), into the peer host's volume (I).
6. Backs up the newest step complete on every node, at most once per interval window: the
   first such step, then the first one in each later window of ``backup-interval-steps``
   steps (``step // interval`` grows) or ``backup-interval-minutes`` minutes on the cluster's
   clock (R: "at certain intervals"; the exact rule is I).
   A backup is copied to a temporary folder and renamed (R: HNS "fast atomic folder renames
   required for checkpoint finalization and GCS backups").
7. Keeps the two newest complete steps per node in each ramdisk and peer store and deletes
   older ones (R: the ramdisk is sized for 2 checkpoint shards; O: "the period at which they
   are garbage-collected must be controlled by the replicator service").
8. On failure writes ``replicator.failed`` (fatal: the client raises ``RuntimeError``) or
   ``replicator.errors`` (logged by the client, which continues) (O:
   ``_check_for_replicator_errors``). Writes ``jax-init-info.txt`` (``<rank>\\n<coordinator>``)
   in every ramdisk (O: ``_retrieve_jax_init_info``; the multi-controller path reads it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine.clock import Clock, RealClock
from pathways_chaos.harness.mtc import protocol
from pathways_chaos.harness.mtc.protocol import ReplicatorConfig
from pathways_chaos.harness.mtc.tiers import Inventory, Tiers, copy_step

log = logging.getLogger(__name__)

#: Complete steps kept per node in a ramdisk and in each peer store (rule 7).
KEEP_LOCAL = 2


class ServiceFailure(Exception):
    """What the service writes into the error files instead of a restore marker."""

    def __init__(self, message: str, fatal: bool = True) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclasses.dataclass(frozen=True)
class Source:
    tier: str  # "ramdisk", "peer" or "backup"
    path: Path
    holder: int | None = None  # the peer host, for "peer"


@dataclasses.dataclass(frozen=True)
class RestorePlan:
    """One restore round: the agreed step and where each node's copy comes from."""

    step: int | None
    sources: dict[int, Source]
    pinned: bool
    inventory: Inventory
    error: str | None = None

    @property
    def tier(self) -> str | None:
        """The slowest tier any node waited for: the job resumes when the last node does."""
        if not self.sources:
            return None
        return max((s.tier for s in self.sources.values()), key=TIER_ORDER.index)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tier": self.tier,
            "pinned": self.pinned,
            "sources": {str(h): s.tier for h, s in sorted(self.sources.items())},
            "inventory": self.inventory.to_json(),
            "error": self.error,
        }


TIER_ORDER = ("ramdisk", "peer", "backup")


class ReplicationService:
    """The service for one job's hosts. A context manager: a polling thread runs inside it.

    ``pump()`` runs one pass synchronously; the client seam calls it before each of the
    client's 1 s sleeps and the MTC episode after each save, so what the service has done at
    any trainer event does not depend on thread timing. The thread answers restore requests
    only (``background="restores"``, the default): replication, backups and garbage collection
    run when a new local step lands (the episode's pump after each save), so a peer copy lost
    while its node lives stays lost until the next save, in every run alike.
    ``background="all"`` lets the thread do everything, as a real daemon would.
    """

    def __init__(
        self,
        tiers: Tiers,
        clock: Clock | None = None,
        poll_interval: float = 0.05,
        coordinator: str = "127.0.0.1:8476",
        background: str = "restores",
    ) -> None:
        if background not in ("restores", "all"):
            raise ValueError(f"background={background!r}: use 'restores' or 'all'")
        self.background = background
        self.tiers = tiers
        self.clock = clock if clock is not None else RealClock()
        self.poll_interval = poll_interval
        self.coordinator = coordinator
        self.configs: dict[int, ReplicatorConfig] = {}
        self.plans: list[RestorePlan] = []
        self.backups: list[int] = []
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self._last_backup_time: float | None = None
        self._failures: list[ServiceFailure] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pass_errors: list[str] = []
        protocol.check_against_client()
        self.write_init_info()

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> ReplicationService:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="mtc-replicator", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_interval):
            if self.background == "all":
                self.pump()
            else:
                with self._lock:
                    try:
                        self._serve_restores()
                    except OSError as error:
                        self.pass_errors.append(f"_serve_restores: {error!r}")

    def held(self) -> threading.RLock:
        """Hold it while changing the tiers: no service pass sees a fault half-applied."""
        return self._lock

    def fail_next(self, message: str, fatal: bool = True, times: int = 1) -> None:
        """The next ``times`` restore rounds fail with ``message`` (the replicator_error fault)."""
        with self._lock:
            self._failures += [ServiceFailure(message, fatal) for _ in range(times)]

    def write_init_info(self) -> None:
        for h in range(self.tiers.num_hosts):
            path = self.tiers.ramdisk(h) / protocol.JAX_INIT_INFO_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{h}\n{self.coordinator}\n")

    # -- one pass ------------------------------------------------------------------------------
    def pump(self) -> None:
        with self._lock:
            for step in (self._serve_restores, self._replicate, self._backup, self._collect):
                try:
                    step()
                except OSError as error:  # a node vanished under a copy: next pass retries
                    self.pass_errors.append(f"{step.__name__}: {error!r}")
                    log.debug("replication pass: %r", error)

    def _emit(self, kind: str, **fields: Any) -> None:
        for listener in list(self.listeners):
            listener(kind, fields)

    # -- restore -------------------------------------------------------------------------------
    def _serve_restores(self) -> None:
        waiting: dict[int, ReplicatorConfig | ServiceFailure] = {}
        for h in range(self.tiers.num_hosts):
            path = self.tiers.ramdisk(h) / protocol.REPLICATOR_FILE
            if path.exists():
                try:
                    config = ReplicatorConfig.parse(path.read_text())
                    config.validate()
                    waiting[h] = config
                except ValueError as error:
                    waiting[h] = ServiceFailure(str(error))
        if not waiting:
            return
        nodes = next((c.nodes for c in waiting.values() if isinstance(c, ReplicatorConfig)), None)
        if nodes is not None and len(waiting) < min(nodes, self.tiers.num_hosts):
            return  # the other nodes have not asked yet
        failure = self._failures.pop(0) if self._failures else None
        bad = next((c for c in waiting.values() if isinstance(c, ServiceFailure)), None)
        failure = bad or failure
        plan: RestorePlan | None = None
        if failure is None or not failure.fatal:
            self.configs.update(
                {h: c for h, c in waiting.items() if isinstance(c, ReplicatorConfig)}
            )
            try:
                plan = self.plan_restore(sorted(waiting))
            except ServiceFailure as error:
                failure = error
        if plan is not None and (failure is None or not failure.fatal):
            for h in sorted(waiting):
                self.stage(h, plan)
            self.plans.append(plan)
            self._emit("mtc_restore_plan", **plan.to_json())
        if failure is not None:
            name = protocol.FAILED_FILE if failure.fatal else protocol.ERRORS_FILE
            for h in waiting:
                (self.tiers.ramdisk(h) / name).write_text(f"{failure}\n")
            self._emit("mtc_service_error", fatal=failure.fatal, message=str(failure))
        for h in waiting:  # last: the client reads errors only after this
            with contextlib.suppress(FileNotFoundError):
                (self.tiers.ramdisk(h) / protocol.REPLICATOR_FILE).unlink()

    def plan_restore(self, hosts: list[int]) -> RestorePlan:
        """The step every node restores and each node's fastest source (rules 3 and 4)."""
        inventory = self.tiers.inventory()
        pinned = self.tiers.pinned_version()
        if pinned is not None:
            missing = [h for h in hosts if pinned not in inventory.backup[h]]
            if missing:
                raise ServiceFailure(
                    f"restore.version pins step {pinned}, which the backup does not hold for "
                    f"node(s) {missing}: remove restore.version or pin one of "
                    f"{sorted(set.intersection(*(set(inventory.backup[h]) for h in hosts)))}"
                )
            sources = {h: Source("backup", self.tiers.backup_dir(pinned, h)) for h in hosts}
            self.tiers.restore_version.replace(self.tiers.job_bucket / "restore.version.applied")
            return RestorePlan(pinned, sources, True, inventory)
        candidates = sorted(
            {
                s
                for tier in (inventory.ramdisk, inventory.peer, inventory.backup)
                for h in hosts
                for s in tier[h]
            },
            reverse=True,
        )
        for step in candidates:
            sources = {}
            for h in hosts:
                source = self.fastest_source(h, step)
                if source is None:
                    break
                sources[h] = source
            else:
                return RestorePlan(step, sources, False, inventory)
        return RestorePlan(None, {}, False, inventory)

    def fastest_source(self, host: int, step: int) -> Source | None:
        own = self.tiers.ramdisk(host) / str(step)
        if protocol.is_complete_step(own):
            return Source("ramdisk", own)
        for holder, steps in sorted(self.tiers.peer_copies(host).items()):
            if step in steps:
                return Source("peer", self.tiers.peer_store(holder, host) / str(step), holder)
        if step in self.tiers.backup_steps(host):
            return Source("backup", self.tiers.backup_dir(step, host))
        return None

    def stage(self, host: int, plan: RestorePlan) -> None:
        """Puts the plan's step into the host's ramdisk and writes its restore marker."""
        ramdisk = self.tiers.ramdisk(host)
        for stale in ramdisk.glob("*.restore"):
            _remove(stale)
        # Anything newer than the agreed step (or not finalised) must not be what Orbax sees as
        # its latest step after the restore.
        for entry in ramdisk.iterdir():
            step = _step_of(entry.name)
            if step is not None and (
                plan.step is None or step > plan.step or ".orbax" in entry.name
            ):
                _remove(entry)
        worker = host % max(1, self._nodes_per_slice(host))
        if plan.step is None:
            (ramdisk / protocol.marker_name(self._job(host), 0, host, worker)).touch()
            return
        staged = ramdisk / f".staged-{plan.step}"
        source = plan.sources[host]
        own = ramdisk / str(plan.step)
        if source.tier == "ramdisk" and os.path.realpath(source.path) == os.path.realpath(own):
            if staged.exists() and own.is_symlink():
                pass  # already staged by an earlier restore of the same step
            else:
                _remove(staged)
                os.replace(own, staged)
        else:
            _remove(own)
            copy_step(source.path, staged)
        if own.is_symlink():
            own.unlink()
        marker = ramdisk / protocol.marker_name(self._job(host), plan.step, host, worker)
        os.symlink(staged.name, marker)

    # -- replication, backup, garbage collection -----------------------------------------------
    def _replicate(self) -> None:
        for h, config in sorted(self.configs.items()):
            peer = self.peer_of(h, config)
            if peer is None:
                continue
            held = set(self.tiers.peer_copies(h).get(peer, []))
            for step in self.tiers.local_steps(h)[-KEEP_LOCAL:]:
                if step in held:
                    continue
                src = self.tiers.ramdisk(h) / str(step)
                copy_step(src, self.tiers.peer_store(peer, h) / str(step))
                self._emit("mtc_replicated", host=h, peer=peer, step=step)

    def peer_of(self, host: int, config: ReplicatorConfig) -> int | None:
        """The next peer rank after the node's own, wrapping: a ring across the slices (I)."""
        if not config.peer_ranks:
            return None
        later = [r for r in config.peer_ranks if r > host]
        return min(later) if later else min(config.peer_ranks)

    def _backup(self) -> None:
        if not self.configs:
            return
        hosts = range(self.tiers.num_hosts)
        common = set.intersection(*(set(self.tiers.local_steps(h)) for h in hosts))
        if not common:
            return
        step = max(common)
        if self.backups and step <= self.backups[-1]:
            return
        if not self.backup_due(step):
            return
        tmp = self.tiers.job_bucket / f".tmp-{step}"
        shutil.rmtree(tmp, ignore_errors=True)
        for h in hosts:
            copy_step(self.tiers.ramdisk(h) / str(step), tmp / f"n{h}")
        final = self.tiers.job_bucket / str(step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        self.backups.append(step)
        self._last_backup_time = self.clock.time()
        self._emit("mtc_backup", step=step)

    def backup_due(self, step: int) -> bool:
        config = next(iter(self.configs.values()))
        if not self.backups:
            return True
        if config.backup_interval_steps is not None:
            every = config.backup_interval_steps
            return step // every > self.backups[-1] // every
        window = (config.backup_interval_minutes or 30) * 60
        last = self._last_backup_time or 0.0
        return self.clock.time() // window > last // window

    def _collect(self) -> None:
        for h in range(self.tiers.num_hosts):
            for step in self.tiers.local_steps(h)[:-KEEP_LOCAL]:
                _remove(self.tiers.ramdisk(h) / str(step))
            for holder in range(self.tiers.num_hosts):
                store = self.tiers.peer_store(holder, h)
                steps = (
                    sorted(int(p.name) for p in store.iterdir() if p.name.isdigit())
                    if store.is_dir()
                    else []
                )
                for step in steps[:-KEEP_LOCAL]:
                    _remove(store / str(step))

    # -- helpers -------------------------------------------------------------------------------
    def _job(self, host: int) -> str:
        config = self.configs.get(host)
        return config.job_name if config is not None else self.tiers.job

    def _nodes_per_slice(self, host: int) -> int:
        config = self.configs.get(host)
        if config is None or not config.data_parallelism:
            return 1
        return max(1, config.nodes // config.data_parallelism)


def _step_of(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _remove(path: Path) -> None:
    """Removes a step folder, a link to one (and what it points at), or a file."""
    if path.is_symlink():
        target = path.resolve()
        path.unlink()
        if target.is_dir() and target.parent == path.parent:
            shutil.rmtree(target, ignore_errors=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()
