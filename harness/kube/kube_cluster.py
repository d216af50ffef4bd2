"""``--cluster``: the chaos suite against a Kubernetes cluster running a Pathways JobSet.

Slice faults become Kubernetes faults through the API: a lost slice is its worker Pods killed
(and, when it must stay down, its Nodes cordoned first so nothing replaces them); a repair
uncordons them. Without ``--pathways-proxy`` the JAX side stays the in-process fake and a
bridge watches the worker Pods: a Pod killed through the API becomes a slice loss the trainer
sees, a rescheduled Pod that runs again a slice that rejoins. With ``--pathways-proxy`` the
devices are the real Pathways devices and Pathways itself raises the errors.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pathways_chaos.faults.jobset import (
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_JOB_NAMES,
)
from pathways_chaos.harness.engine.clock import Clock
from pathways_chaos.harness.engine.fake_cluster import FakeCluster, SliceState
from pathways_chaos.harness.engine.topology import SliceTopology, elastic_slices_fit
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.kube.pod_bridge import PodBridge
from pathways_chaos.harness.kube.slice_health import HealthFollower, SliceHealthWatch

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from pathways_chaos.faults.kubernetes import KubeTarget

PROXY_CONTAINER = "pathways-proxy"
#: The elastic flag, in the resilient-training guide's spelling and pathwaysutils' generator's.
ELASTIC_FLAGS = ("--num_elastic_instances", "--num_elastic_slices")
ELASTIC_FLAG = ELASTIC_FLAGS[0]
WORKER_CONTAINER = "pathways-worker"


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """What ``--cluster`` and its friends name."""

    context: str
    kubeconfig: str | None
    namespace: str
    jobset: str
    pathways_proxy: str | None = None
    armed: bool = False

    @classmethod
    def parse(
        cls,
        cluster: str,
        namespace: str | None,
        jobset: str | None,
        pathways_proxy: str | None = None,
        armed: bool = False,
    ) -> ClusterSpec:
        """``CONTEXT`` or ``KUBECONFIG_PATH:CONTEXT``."""
        path, sep, context = cluster.rpartition(":")
        kubeconfig = path if sep and path else None
        if not sep:
            context = cluster
        if not context:
            raise ChaosConfigError(
                f"--cluster={cluster!r} names no context: write CONTEXT or KUBECONFIG_PATH:CONTEXT"
            )
        if kubeconfig is not None and not os.path.isfile(kubeconfig):
            raise ChaosConfigError(
                f"--cluster: kubeconfig {kubeconfig!r} does not exist: write "
                "KUBECONFIG_PATH:CONTEXT with a readable file, or just CONTEXT for ~/.kube/config"
            )
        if not namespace or not jobset:
            raise ChaosConfigError(
                "--cluster needs --namespace and --jobset: the namespace and name of the "
                "Pathways JobSet the faults may touch"
            )
        return cls(context, kubeconfig, namespace, jobset, pathways_proxy, armed)


@dataclasses.dataclass(frozen=True)
class ClusterConnection:
    """What a session learns once about its cluster: the target, the API client, the layout."""

    spec: ClusterSpec
    api: Any
    layout: JobSetLayout


def connect(spec: ClusterSpec) -> ApiClient:
    """An API client for the context, after one cheap call proves the server answers."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, _ = config.list_kube_config_contexts(config_file=spec.kubeconfig)
    except (ConfigException, OSError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ChaosConfigError(f"--cluster: cannot read a kubeconfig: {first}") from None
    except Exception as error:  # a file that is not YAML, or YAML that is not a kubeconfig
        raise ChaosConfigError(
            f"--cluster: {spec.kubeconfig or 'the kubeconfig'} is not a valid kubeconfig "
            f"({type(error).__name__}): point --cluster at a kubeconfig file"
        ) from None
    if not isinstance(contexts, list):
        raise ChaosConfigError("--cluster: the kubeconfig has no contexts list")
    names = [str(c.get("name")) for c in contexts if isinstance(c, dict)]
    if spec.context not in names:
        raise ChaosConfigError(
            f"--cluster: unknown context {spec.context!r}; the kubeconfig has "
            f"{', '.join(names) or 'none'}"
        )
    try:
        api = config.new_client_from_config(config_file=spec.kubeconfig, context=spec.context)
    except Exception as error:  # a context whose cluster or user entry is missing or broken
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ChaosConfigError(
            f"--cluster: context {spec.context!r} cannot be loaded ({first}): fix its cluster "
            "and user entries in the kubeconfig"
        ) from None
    api.configuration.retries = 0
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
    except Exception as error:
        host = api.configuration.host
        raise ChaosConfigError(
            f"--cluster: the API server of {spec.context!r} at {host} is unreachable "
            f"({type(error).__name__}): check the context and your network"
        ) from None
    return api


@dataclasses.dataclass
class JobSetLayout:
    """The JobSet as the API shows it: worker slices, hosts per slice, the proxy's flags."""

    slices: int
    hosts_per_slice: int
    proxy_args: list[str] | None
    opted_in: bool

    @property
    def elastic_flags(self) -> dict[str, str]:
        """Each spelling of the elastic flag the proxy has (``--flag=N`` or ``--flag N``)."""
        args = self.proxy_args or []
        found: dict[str, str] = {}
        for flag in ELASTIC_FLAGS:
            for i, arg in enumerate(args):
                if arg.startswith(flag + "="):
                    found.setdefault(flag, arg.split("=", 1)[1])
                elif arg == flag and i + 1 < len(args):
                    found.setdefault(flag, args[i + 1])
        return found

    @property
    def elastic_flag(self) -> tuple[str, str] | None:
        """``(spelling, value)`` of the elastic flag, the guide's spelling first; None when
        neither is there."""
        return next(iter(self.elastic_flags.items()), None)

    @property
    def elastic_instances(self) -> int | None:
        found = self.elastic_flag
        if found is None or not found[1].strip().isdigit():
            return None
        return int(found[1])


def is_worker_job(job: Any) -> bool:
    """A worker Job by role: its Pods run ``pathways-worker``, or its replicatedJob has a
    worker name (``worker`` as the guides write it, ``pathways-worker`` as pathwaysutils'
    generator does)."""
    pod = job.spec.template.spec
    names = {c.name for c in [*(pod.containers or []), *(pod.init_containers or [])]}
    job_name = (job.metadata.labels or {}).get(REPLICATED_JOB_LABEL)
    return WORKER_CONTAINER in names or job_name in WORKER_JOB_NAMES


def read_layout(api: ApiClient, spec: ClusterSpec) -> JobSetLayout:
    from kubernetes import client

    from pathways_chaos.faults.safety import OPT_IN_LABEL, OPT_IN_VALUE

    batch: Any = client.BatchV1Api(api)
    jobs = batch.list_namespaced_job(
        spec.namespace, label_selector=f"{JOBSET_NAME_LABEL}={spec.jobset}"
    ).items
    if not jobs:
        raise ChaosConfigError(
            f"--jobset={spec.jobset!r}: no Jobs of that JobSet in namespace {spec.namespace!r}: "
            "check --namespace and --jobset (kubectl get jobsets -n NAMESPACE)"
        )
    workers = [j for j in jobs if is_worker_job(j)]
    proxy_args = None
    for job in jobs:
        pod = job.spec.template.spec
        # pathwaysutils' generator runs the proxy as a native sidecar (an initContainer).
        for c in [*(pod.init_containers or []), *(pod.containers or [])]:
            if c.name == PROXY_CONTAINER:
                proxy_args = [*(c.command or []), *(c.args or [])]
    hosts = max((j.spec.parallelism or 1 for j in workers), default=0)
    opted_in = all((j.metadata.labels or {}).get(OPT_IN_LABEL) == OPT_IN_VALUE for j in jobs)
    return JobSetLayout(len(workers), hosts, proxy_args, opted_in)


#: What the faults need, as (verb, group, resource, subresource, namespaced).
NEEDED_PERMISSIONS = (
    ("list", "", "pods", "", True),
    ("watch", "", "pods", "", True),
    ("delete", "", "pods", "", True),
    ("create", "", "pods", "eviction", True),
    ("get", "", "nodes", "", False),
    ("patch", "", "nodes", "", False),
    ("list", "batch", "jobs", "", True),
    ("create", "coordination.k8s.io", "leases", "", True),
    ("update", "coordination.k8s.io", "leases", "", True),
    ("create", "", "configmaps", "", True),  # the journal's mirror (faults/journal_mirror.py)
    ("update", "", "configmaps", "", True),
    ("create", "", "secrets", "", True),  # its key, made once
)


def preflight(api: ApiClient, spec: ClusterSpec, layout: JobSetLayout) -> list[tuple[bool, str]]:
    """Every check before any fault, one line each; nothing is injected unless all pass."""
    from kubernetes import client

    lines: list[tuple[bool, str]] = []
    found = layout.elastic_flag
    if layout.proxy_args is None:
        lines.append((False, f"no {PROXY_CONTAINER} container in JobSet {spec.jobset!r}"))
    elif found is None:
        lines.append(
            (
                False,
                f"{PROXY_CONTAINER} has neither {' nor '.join(ELASTIC_FLAGS)}: elastic training "
                f"is off; add {ELASTIC_FLAG}={layout.slices} to its args",
            )
        )
    elif len(set(layout.elastic_flags.values())) > 1:
        both = " and ".join(f"{f}={v}" for f, v in layout.elastic_flags.items())
        lines.append((False, f"{PROXY_CONTAINER} has {both}: they disagree; keep one"))
    elif layout.elastic_instances is None:
        flag, value = found
        lines.append((False, f"{PROXY_CONTAINER} has {flag}={value}: not a number of slices"))
    elif not elastic_slices_fit(layout.elastic_instances, layout.slices):
        lines.append(
            (
                False,
                f"{PROXY_CONTAINER} has {found[0]}={layout.elastic_instances} but the JobSet has "
                f"{layout.slices} worker slices: use 1 to {layout.slices}",
            )
        )
    else:
        relation = "=" if layout.elastic_instances == layout.slices else f"of {layout.slices}"
        lines.append(
            (
                True,
                f"elastic: {PROXY_CONTAINER} {found[0]}={layout.elastic_instances} {relation} "
                "worker slices",
            )
        )
    from pathways_chaos.faults.safety import OPT_IN_LABEL, OPT_IN_VALUE

    lines.append(
        (True, f"opt-in: every Job of {spec.jobset!r} carries {OPT_IN_LABEL}={OPT_IN_VALUE}")
        if layout.opted_in
        else (False, f"opt-in: label the JobSet's Jobs {OPT_IN_LABEL}={OPT_IN_VALUE} first")
    )
    authz: Any = client.AuthorizationV1Api(api)
    missing = []
    for verb, group, resource, sub, namespaced in NEEDED_PERMISSIONS:
        review = authz.create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                        "subresource": sub,
                        **({"namespace": spec.namespace} if namespaced else {}),
                    }
                }
            }
        )
        if not review.status.allowed:
            missing.append(f"{verb} {resource}{'/' + sub if sub else ''}")
    lines.append(
        (False, f"permissions: missing {', '.join(missing)} (apply ci/rbac/role.yaml)")
        if missing
        else (True, f"permissions: {len(NEEDED_PERMISSIONS)} checked by SelfSubjectAccessReview")
    )
    return lines


class _KubeSliceActions:
    """Slice faults as Kubernetes actions, confirmed through the Pod watch."""

    target: KubeTarget
    bridge: PodBridge
    hosts_per_slice: int
    #: The resource manager's slice reports, when the head has them (the twin's head Pod).
    health: SliceHealthWatch | None = None

    def _kube_lose(self, slice_index: int, repair_after_polls: int | None) -> list[str]:
        from pathways_chaos.faults.kubernetes import CordonNodes, KillPods

        touched: list[str] = []
        if repair_after_polls is None:  # it stays down: nothing may replace its Pods
            touched += CordonNodes(slice=slice_index).inject(self.target)
        self.bridge.expect_loss(slice_index)
        victims = self.bridge.running_names(slice_index)
        touched += KillPods(slice=slice_index, grace=0).inject(self.target)
        # Seen gone through the watch (replacements may already be starting).
        self.bridge.wait(
            lambda: not victims & self.bridge.running_names(slice_index),
            f"slice {slice_index}'s Pods gone",
        )
        if self.health is not None:  # the processes died and the slice left the mesh
            self.health.wait_down(slice_index, self.hosts_per_slice)
        if repair_after_polls is not None:
            self._wait_running(slice_index)
        return touched

    def _kube_repair(self, slice_index: int) -> list[str]:
        from pathways_chaos.faults.kubernetes import CordonNodes

        touched = CordonNodes(slice=slice_index).heal(self.target)
        self._wait_running(slice_index)
        return touched

    def _wait_running(self, slice_index: int) -> None:
        hosts = self.hosts_per_slice
        self.bridge.wait(
            lambda: self.bridge.running(slice_index) >= hosts, f"slice {slice_index} running again"
        )
        if self.health is not None:  # the new processes rejoined
            self.health.wait_up(slice_index, hosts)

    def dry_run(self, plan: Any, initially_down: Iterable[int] = ()) -> list[str]:
        """What the schedule would do to the cluster; the unarmed target changes nothing."""
        return _dry_lines(self.target, plan, initially_down)


class KubeBridgedCluster(_KubeSliceActions, FakeCluster):
    """The fake's devices, with slice faults acted out on the cluster through the API."""

    def __init__(
        self,
        topology: SliceTopology,
        target: KubeTarget,
        api: ApiClient,
        spec: ClusterSpec,
        hosts_per_slice: int,
        clock: Clock | None = None,
        down_at_start: Iterable[int] = (),
    ) -> None:
        super().__init__(topology, clock=clock)
        self.target = target
        self.spec = spec
        self.hosts_per_slice = hosts_per_slice
        self.bridge = PodBridge(api, spec, on_lost=self._lost_outside)
        self.health = SliceHealthWatch.from_env()
        self._follower = HealthFollower(self, hosts_per_slice)
        #: Slices an earlier run of the episode left down (their Nodes cordoned): not waited for.
        self.down_at_start = frozenset(down_at_start)
        self._children_act = False

    def start(self) -> None:
        super().start()
        if self.health is not None:
            self.health.start()
        self.bridge.start()
        for s in range(self.num_slices):  # an episode starts on a healthy JobSet
            if s not in self.down_at_start:
                self._wait_healthy(s)
        if self.health is not None:  # from now on a host the manager reports gone is a loss
            self._follower.follow(self.health)

    def stop(self) -> None:
        self.bridge.stop()
        if self.health is not None:
            self.health.stop()
        super().stop()

    def lose_slice(
        self, slice_index: int, code: str = "DATA_LOSS", repair_after_polls: int | None = None
    ) -> list[str]:
        self._check_index(slice_index)
        self._follower.begin_fault(slice_index)  # until it is back, its own waits decide
        touched = self._kube_lose(slice_index, repair_after_polls)
        if repair_after_polls is not None:  # back up in the cluster; the polls repair the fake
            self._follower.end_fault(slice_index)
        return touched + super().lose_slice(slice_index, code, repair_after_polls)

    def repair_slice(self, slice_index: int, after_polls: int = 0) -> list[str]:
        self._check_index(slice_index)
        if self.state(slice_index) is not SliceState.DOWN:
            return super().repair_slice(slice_index, after_polls)
        touched = self._kube_repair(slice_index)
        self._follower.end_fault(slice_index)
        return touched + super().repair_slice(slice_index, after_polls)

    def go_on_from(self, state: dict[str, Any]) -> None:
        """A next run's fake goes on from the slices the previous run left down, which the
        cluster still shows (Pods gone, Nodes cordoned): marked down here, not acted out again."""
        for index, code, polls_left in state.get("down") or []:
            if polls_left is None:  # still down on the cluster: its own waits decide
                self._follower.begin_fault(int(index))
            polls = None if polls_left is None else max(1, int(polls_left))
            FakeCluster.lose_slice(self, int(index), str(code), polls)

    def ready_for_an_episode(self) -> list[int]:
        """Before an episode whose faults a child process acts out; returns the slices the
        test itself took down, which the child starts without.

        From the first such episode on, this process's view of the slices is the test's own:
        the children's kills are not losses here. What earlier episodes' children changed (the
        journal's entries this process did not write) is undone, and every slice the test did
        not take down is waited for. The journal is bound here, so its header names this
        process (the session), never a child that comes and goes."""
        from pathways_chaos.harness.errors import ChaosError

        self._children_act = True
        if self.health is not None:  # the manager's reports are the children's to follow
            self.health.on_report = None
        journal = self.target.journal
        if self.target.armed and journal is not None:
            self.target.check()
            theirs = {e["seq"] for e in journal.pending() if e["seq"] not in journal.written_here}
            if theirs:
                result = journal.replay(self.target.api_client, seqs=theirs)
                if result.errors:
                    raise ChaosError(
                        "the cluster could not be put back before the next episode: "
                        + "; ".join(result.errors)
                    )
        own = sorted(self.down_slices())
        for s in range(self.num_slices):
            if s not in own:
                self._wait_healthy(s)
        return own

    def _wait_healthy(self, slice_index: int) -> None:
        """Waits for a slice's Pods; a JobSet that is not running is the cluster's state, in
        one line (neither the loop's failure nor the toolkit's)."""
        try:
            self._wait_running(slice_index)
        except TimeoutError as error:
            raise ChaosConfigError(
                f"the episode needs a healthy JobSet, but {error}: check the JobSet's "
                f"Pods (kubectl -n {self.spec.namespace} get pods) and run again"
            ) from None

    def _lost_outside(self, slice_index: int) -> None:
        if self._children_act:  # an episode's child lost it: not the test's own view
            return
        if self.health is None:  # with reports, the slice goes down once its process dies
            super().lose_slice(slice_index)


def group_by_slice_index(devices: Iterable[Any]) -> dict[int, list[Any]]:
    """Pathways devices by ``slice_index``, each slice's devices in id order."""
    grouped: dict[int, list[Any]] = {}
    for device in devices:
        index = getattr(device, "slice_index", None)
        if index is None:
            raise ChaosConfigError(
                f"device {device} has no slice_index: --pathways-proxy must point at a Pathways "
                "proxy (JAX_PLATFORMS=proxy), not a local backend"
            )
        grouped.setdefault(int(index), []).append(device)
    sizes = {len(v) for v in grouped.values()}
    if len(sizes) > 1:
        raise ChaosConfigError(f"slices have different device counts {sorted(sizes)}: unsupported")
    return {s: sorted(v, key=lambda d: d.id) for s, v in sorted(grouped.items())}


class PathwaysCluster(_KubeSliceActions):
    """Real Pathways devices; slice faults through the API, errors raised by Pathways itself.

    Not exercised here (no Pathways proxy is reachable from this machine): the same Kubernetes
    actions as the bridged cluster, without any fake state or pathwaysutils seam.
    """

    def __init__(
        self, target: KubeTarget, api: ApiClient, spec: ClusterSpec, hosts_per_slice: int
    ) -> None:
        import jax
        import pathwaysutils

        from pathways_chaos.harness.engine.clock import RealClock

        pathwaysutils.initialize()
        by_slice = group_by_slice_index(jax.devices())
        first = next(iter(by_slice.values()))
        self.topology = SliceTopology(len(by_slice), len(first))
        self.devices = [d for ds in by_slice.values() for d in ds]
        self.clock: Clock = RealClock()
        self.target = target
        self.hosts_per_slice = hosts_per_slice
        self.bridge = PodBridge(api, spec, on_lost=lambda s: None)

    def __enter__(self) -> PathwaysCluster:
        self.bridge.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bridge.stop()

    @property
    def num_slices(self) -> int:
        return self.topology.num_slices

    def lose_slice(
        self, slice_index: int, code: str = "DATA_LOSS", repair_after_polls: int | None = None
    ) -> list[str]:
        del code  # Pathways decides which error the trainer sees
        return self._kube_lose(slice_index, repair_after_polls)

    def repair_slice(self, slice_index: int, after_polls: int = 0) -> list[str]:
        del after_polls
        return self._kube_repair(slice_index)

    def check_access(self, slices: Iterable[int]) -> None:
        """Nothing to do: Pathways raises on a lost slice by itself."""

    def slice_to_device_ids(self) -> dict[int, list[int]]:
        per = self.topology.devices_per_slice
        return {
            s: [d.id for d in self.devices[s * per : (s + 1) * per]] for s in range(self.num_slices)
        }


def _dry_lines(target: KubeTarget, plan: Any, initially_down: Iterable[int]) -> list[str]:
    from pathways_chaos.faults.kubernetes import CordonNodes, KillPods
    from pathways_chaos.faults.slice import RepairSlice, SliceLoss

    lines: list[str] = []
    for s in initially_down:
        lines += CordonNodes(slice=s).inject(target) + KillPods(slice=s, grace=0).inject(target)
    for entry in plan:
        fault = entry.fault
        when = entry.at.to_text()
        if isinstance(fault, SliceLoss):
            ops = KillPods(slice=fault.slice, grace=0).inject(target)
            if not fault.repair_after_polls:
                ops = CordonNodes(slice=fault.slice).inject(target) + ops
            lines += [f"at {when}: {op}" for op in ops]
        elif isinstance(fault, RepairSlice):
            lines.append(f"at {when}: uncordon the Nodes cordoned for slice {fault.slice}")
        else:
            lines.append(f"at {when}: {fault.describe()} (in-process)")
    return lines
