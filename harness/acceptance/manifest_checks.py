"""Checks on a Pathways JobSet manifest for settings that only fail once the job is deployed.

Roles are found by the container names the Pathways manifests use: ``pathways-proxy`` and
``pathways-rm`` in the head pod, ``pathways-worker`` and ``colocated-python-sidecar`` in the
worker pod; any other container of the head pod is the JAX client. Sidecars declared as
``initContainers`` (native sidecars) count as containers.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pathways_chaos.harness.acceptance.ramdisk import (
    RamdiskSizing,
    _load_yaml,
    check_ramdisk,
    in_memory_volume_sizes,
)
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.errors import ChaosConfigError

PROXY = "pathways-proxy"
RESOURCE_MANAGER = "pathways-rm"
WORKER = "pathways-worker"
SIDECAR = "colocated-python-sidecar"
PATHWAYS_CONTAINERS = frozenset({PROXY, RESOURCE_MANAGER, WORKER, SIDECAR})
MTC_DRIVER = "multitier-checkpoint.csi.storage.gke.io"
SIDECAR_SHM = "/tmp/sidecar"
XLA_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
_JAX_TAG = re.compile(r"jax[-_]?v?(\d+\.\d+(?:\.\d+)?)")


@dataclasses.dataclass
class Container:
    name: str
    image: str
    flags: dict[str, str]  # --name=value (or --name value) from command and args
    env: dict[str, str]
    mounts: dict[str, str]  # mountPath -> volume name
    pod: Pod

    @property
    def where(self) -> str:
        return f"{self.pod.where}/{self.name}"

    def xla_flags(self) -> set[str]:
        """``name=value`` of every XLA flag: in the args and in XLA_FLAGS/LIBTPU_INIT_ARGS."""
        out = {f"{k}={v}" for k, v in self.flags.items() if k.startswith("xla_")}
        for var in XLA_ENV:
            out |= {f"{k}={v}" for k, v in _flags(shlex.split(self.env.get(var, ""))).items()}
        return out


@dataclasses.dataclass
class Pod:
    jobset: str
    job: str  # the replicatedJob's name
    replicas: int
    parallelism: int
    volumes: dict[str, dict[str, Any]]
    priority_class: str | None
    label: str
    containers: list[Container] = dataclasses.field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.label}:{self.job}"

    def container(self, name: str) -> Container | None:
        return next((c for c in self.containers if c.name == name), None)

    def mounts_volume(self, container: Container, predicate: Callable[[dict], bool]) -> list[str]:
        """Mount paths in ``container`` whose volume satisfies ``predicate``."""
        return [
            path
            for path, volume in container.mounts.items()
            if predicate(self.volumes.get(volume, {}))
        ]


@dataclasses.dataclass
class Manifest:
    label: str
    pods: list[Pod]
    documents: list[Any]

    def containers(self) -> list[Container]:
        return [c for p in self.pods for c in p.containers]

    def named(self, name: str) -> list[Container]:
        return [c for c in self.containers() if c.name == name]

    @property
    def head_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.container(PROXY) or "head" in p.job]

    @property
    def worker_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.container(WORKER) or p.job == "worker"]

    def clients(self) -> list[Container]:
        """The JAX client: a head-pod container that is not a Pathways service."""
        heads = self.head_pods
        return [c for p in heads for c in p.containers if c.name not in PATHWAYS_CONTAINERS]

    @property
    def slice_count(self) -> int:
        return sum(p.replicas for p in self.worker_pods)

    @property
    def uses_mtc(self) -> bool:
        return bool(
            self.named(SIDECAR)
            or in_memory_volume_sizes(self.documents)
            or any(_is_mtc(v) for p in self.pods for v in p.volumes.values())
            or any("sidecar_name" in c.flags for c in self.named(PROXY))
        )


def load_manifest(path: str | Path) -> Manifest:
    """Every JobSet in a YAML file (or every ``.yaml``/``.yml`` file of a folder)."""
    root = Path(path)
    if root.is_dir():
        files = sorted([*root.glob("*.yaml"), *root.glob("*.yml")])
    elif root.is_file():
        files = [root]
    else:
        raise ChaosConfigError(f"--manifest {path}: no such file or folder: pass your JobSet YAML")
    documents: list[Any] = []
    pods: list[Pod] = []
    for file in files:
        docs = _load_yaml(file)
        documents += docs
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "JobSet":
                pods += _pods(doc, str(file))
    if not pods:
        raise ChaosConfigError(
            f"--manifest {path}: no JobSet with replicatedJobs found: pass the Pathways JobSet "
            "YAML your job deploys (kubectl get jobset NAME -o yaml)"
        )
    return Manifest(str(path), pods, documents)


# -- the checks ----------------------------------------------------------------------------
def check_xla_flags_on_proxy(m: Manifest) -> CheckResult:
    proxies = m.named(PROXY)
    on_proxy = set().union(*(p.xla_flags() for p in proxies)) if proxies else set()
    findings = []
    for client in m.clients():
        missing = sorted(client.xla_flags() - on_proxy)
        if missing:
            findings.append(
                Finding(
                    client.where,
                    f"XLA flags {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                    f"are set here but not on {PROXY}",
                )
            )
    note = f"{len(on_proxy)} XLA flags on {PROXY}" if on_proxy else "no XLA flags in the client"
    return CheckResult(
        "xla-flags-on-proxy",
        "XLA flags are on the pathways-proxy container, not only in the client",
        f"the remote compiler reads its flags from {PROXY}: add them to its args "
        "(Cluster Toolkit: --pathways-proxy-args)",
        tuple(findings),
        note,
    )


def check_gcs_scratch_location(m: Manifest) -> CheckResult:
    findings = _missing_proxy(m) + [
        Finding(p.where, "--gcs_scratch_location is missing or empty")
        for p in m.named(PROXY)
        if not p.flags.get("gcs_scratch_location", "").strip()
    ]
    values = sorted({p.flags.get("gcs_scratch_location", "") for p in m.named(PROXY)})
    return CheckResult(
        "gcs-scratch-location",
        "--gcs_scratch_location is set, so the compilation cache survives a redeploy",
        f"add --gcs_scratch_location=gs://BUCKET/tmp to {PROXY}'s args (and give the job's "
        "service account access to the bucket)",
        tuple(findings),
        f"--gcs_scratch_location={', '.join(values)}",
    )


def check_num_elastic_instances(m: Manifest) -> CheckResult:
    slices = m.slice_count
    findings = list(_missing_proxy(m))
    for p in m.named(PROXY):
        value = p.flags.get("num_elastic_instances")
        if value is None:
            findings.append(Finding(p.where, "--num_elastic_instances is not set"))
        elif not value.strip().isdigit():
            findings.append(
                Finding(p.where, f"--num_elastic_instances={value} is not a number of slices")
            )
        elif int(value) != slices:
            findings.append(
                Finding(
                    p.where,
                    f"--num_elastic_instances={value} but the worker job has {slices} slices "
                    "(replicas)",
                )
            )
    return CheckResult(
        "num-elastic-instances",
        "--num_elastic_instances on pathways-proxy equals the slice count",
        f"set --num_elastic_instances={slices} on {PROXY} (the worker replicatedJob's replicas)",
        tuple(findings),
        f"--num_elastic_instances={slices}, {slices} worker slices",
    )


def check_image_pins(m: Manifest) -> CheckResult:
    findings = []
    for c in m.containers():
        tag = _tag(c.image)
        if not c.image:
            findings.append(Finding(c.where, "has no image"))
        elif "@sha256:" in c.image:
            continue
        elif tag is None:
            findings.append(Finding(c.where, f"image {c.image} has no tag (means latest)"))
        elif tag == "latest":
            findings.append(Finding(c.where, f"image {c.image} floats on latest"))
    return CheckResult(
        "image-pins",
        "every image is pinned to a tag or digest (no latest)",
        "pin each image to its jax-version tag or digest (e.g. proxy_server:jax-0.10.1), so a "
        "failed run can be reproduced",
        tuple(findings),
        f"{len(m.containers())} images pinned",
    )


def check_jax_versions_match(m: Manifest) -> CheckResult:
    sidecars = m.named(SIDECAR)
    findings = []
    clients = m.clients()
    if sidecars and not clients:
        findings.append(Finding(m.label, "no JAX client container in the head pod to compare"))
    for client in clients:
        want = _jax_version(client)
        for sidecar in sidecars:
            got = _jax_version(sidecar)
            if want is None or got is None:
                unknown = client if want is None else sidecar
                findings.append(
                    Finding(
                        unknown.where,
                        f"cannot tell the jax version of {unknown.image or 'its image'}",
                    )
                )
            elif want != got:
                findings.append(
                    Finding(sidecar.where, f"jax/jaxlib {got} differs from the client's {want}")
                )
    note = (
        f"client and {SIDECAR} both jax {_jax_version(clients[0])}"
        if sidecars and clients
        else f"no {SIDECAR}"
    )
    return CheckResult(
        "jax-versions-match",
        "jax/jaxlib identical in the head (client) and the colocated-python sidecar",
        "build the sidecar from the client's jax/jaxlib pins; tag both images jax-X.Y.Z (or set "
        "JAX_VERSION in both containers' env) so the versions can be compared",
        tuple(dict.fromkeys(findings)),
        note,
    )


def check_dev_shm(m: Manifest) -> CheckResult:
    findings = []
    clients = m.clients()
    if not clients:
        findings.append(Finding(m.label, "no JAX client container in the head pod"))
    for c in clients:
        if "/dev/shm" not in c.mounts:
            findings.append(Finding(c.where, "mounts nothing at /dev/shm (64 MB default)"))
        elif not _is_memory_dir(c.pod.volumes.get(c.mounts["/dev/shm"], {})):
            findings.append(Finding(c.where, "/dev/shm is not an emptyDir with medium: Memory"))
    return CheckResult(
        "dev-shm",
        "a memory-backed /dev/shm for loader workers in the client container",
        "mount an emptyDir {medium: Memory} volume at /dev/shm in the client container, so "
        "prefetched batches do not hit the default 64 MB limit",
        tuple(findings),
        "/dev/shm is an emptyDir in memory",
    )


def check_mtc_sidecar_name(m: Manifest) -> CheckResult:
    findings: list[Finding] = []
    if m.uses_mtc:
        findings += _missing_proxy(m)
        findings += [
            Finding(
                p.where,
                f"--sidecar_name={p.flags['sidecar_name']}, not external"
                if "sidecar_name" in p.flags
                else "--sidecar_name is not set (must be external)",
            )
            for p in m.named(PROXY)
            if p.flags.get("sidecar_name") != "external"
        ]
    return CheckResult(
        "mtc-sidecar-name",
        "Multi-Tier Checkpointing: --sidecar_name=external on pathways-proxy",
        f"add --sidecar_name=external to {PROXY}'s args",
        tuple(findings),
        "--sidecar_name=external" if m.uses_mtc else "no Multi-Tier Checkpointing",
    )


def check_mtc_csi_volume(m: Manifest) -> CheckResult:
    findings: list[Finding] = []
    if m.uses_mtc:
        for pod in m.worker_pods:
            for name in (WORKER, SIDECAR):
                c = pod.container(name)
                if c is None:
                    findings.append(Finding(pod.where, f"has no {name} container"))
                elif not pod.mounts_volume(c, _is_mtc):
                    findings.append(Finding(c.where, f"does not mount the {MTC_DRIVER} volume"))
        for pod in m.head_pods:
            for c in pod.containers:
                if pod.mounts_volume(c, _is_mtc):
                    findings.append(
                        Finding(c.where, f"mounts the {MTC_DRIVER} volume on the head pod")
                    )
    return CheckResult(
        "mtc-csi-volume",
        "Multi-Tier Checkpointing: the CSI ramdisk on worker and sidecar, not on the head",
        f"mount a csi volume (driver {MTC_DRIVER}) at the ramdisk path in {WORKER} and "
        f"{SIDECAR} of the worker pod, and remove it from the head pod",
        tuple(findings),
        "CSI ramdisk on worker and sidecar only" if m.uses_mtc else "no Multi-Tier Checkpointing",
    )


def check_mtc_shared_sidecar_dir(m: Manifest) -> CheckResult:
    findings: list[Finding] = []
    if m.uses_mtc:
        for pod in m.worker_pods:
            volumes = set()
            for name in (WORKER, SIDECAR):
                c = pod.container(name)
                if c is None:
                    findings.append(Finding(pod.where, f"has no {name} container"))
                elif SIDECAR_SHM not in c.mounts:
                    findings.append(Finding(c.where, f"does not mount {SIDECAR_SHM}"))
                else:
                    volumes.add(c.mounts[SIDECAR_SHM])
            if len(volumes) > 1:
                findings.append(
                    Finding(pod.where, f"{SIDECAR_SHM} comes from different volumes {volumes}")
                )
            worker = pod.container(WORKER)
            shm_flag = worker.flags.get("cloud_pathways_sidecar_shm_directory") if worker else None
            if worker is not None and shm_flag != SIDECAR_SHM:
                findings.append(
                    Finding(worker.where, f"--cloud_pathways_sidecar_shm_directory is {shm_flag}")
                )
    return CheckResult(
        "mtc-shared-sidecar-dir",
        "Multi-Tier Checkpointing: one shared /tmp/sidecar volume for worker and sidecar",
        f"mount one emptyDir {{medium: Memory}} at {SIDECAR_SHM} in {WORKER} and {SIDECAR}, "
        f"and pass --cloud_pathways_sidecar_shm_directory={SIDECAR_SHM} to {WORKER}",
        tuple(findings),
        f"{SIDECAR_SHM} shared" if m.uses_mtc else "no Multi-Tier Checkpointing",
    )


def check_worker_priority_class(m: Manifest) -> CheckResult:
    findings = [
        Finding(p.where, "the pod template has no priorityClassName")
        for p in m.worker_pods
        if not p.priority_class
    ]
    if not m.worker_pods:
        findings.append(Finding(m.label, f"no worker replicatedJob (no {WORKER} container)"))
    classes = sorted({p.priority_class or "" for p in m.worker_pods})
    return CheckResult(
        "worker-priority-class",
        "priorityClassName on the worker pods, so hot-swap can preempt a spare slice",
        "set spec.template.spec.priorityClassName (e.g. high-prior-job) in the worker "
        "replicatedJob's pod template",
        tuple(findings),
        f"priorityClassName {', '.join(classes)}",
    )


def check_manifest_ramdisk(
    m: Manifest, params: float | None, buffer: float = 0.15, params_from: str = "given"
) -> CheckResult:
    """Hosts per slice from the worker job's parallelism; ``params_from`` says where the
    parameter count came from, for the reason."""
    hosts = max((p.parallelism for p in m.worker_pods), default=1)
    sizing = RamdiskSizing(params, hosts, buffer) if params else None
    configured = in_memory_volume_sizes(m.documents)
    result = check_ramdisk(sizing, configured, Path(m.label).name)
    if result.ok and sizing is not None and configured:
        result = dataclasses.replace(result, note=f"{result.note} (params {params_from})")
    return result


MANIFEST_CHECKS: dict[str, Callable[[Manifest], CheckResult]] = {
    "xla-flags-on-proxy": check_xla_flags_on_proxy,
    "gcs-scratch-location": check_gcs_scratch_location,
    "num-elastic-instances": check_num_elastic_instances,
    "image-pins": check_image_pins,
    "jax-versions-match": check_jax_versions_match,
    "dev-shm": check_dev_shm,
    "mtc-sidecar-name": check_mtc_sidecar_name,
    "mtc-csi-volume": check_mtc_csi_volume,
    "mtc-shared-sidecar-dir": check_mtc_shared_sidecar_dir,
    "worker-priority-class": check_worker_priority_class,
}


def run_manifest_checks(
    path: str | Path, params: float | None = None, buffer: float = 0.15
) -> list[CheckResult]:
    m = load_manifest(path)
    return [check(m) for check in MANIFEST_CHECKS.values()] + [
        check_manifest_ramdisk(m, params, buffer)
    ]


# -- parsing -------------------------------------------------------------------------------
def _pods(jobset: dict[str, Any], label: str) -> list[Pod]:
    name = (jobset.get("metadata") or {}).get("name", "<unnamed>")
    pods = []
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = ((rj.get("template") or {}).get("spec")) or {}
        pod_spec = ((job_spec.get("template") or {}).get("spec")) or {}
        pod = Pod(
            jobset=str(name),
            job=str(rj.get("name", "<unnamed>")),
            replicas=int(rj.get("replicas", 1)),
            parallelism=int(job_spec.get("parallelism", job_spec.get("completions", 1))),
            volumes={str(v.get("name")): v for v in pod_spec.get("volumes") or []},
            priority_class=pod_spec.get("priorityClassName"),
            label=Path(label).name,
        )
        for c in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
            tokens = [str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]]
            words = [w for t in tokens for w in (shlex.split(t) if " " in t else [t])]
            pod.containers.append(
                Container(
                    name=str(c.get("name", "")),
                    image=str(c.get("image", "")),
                    flags=_flags(words),
                    env={str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or []},
                    mounts={
                        str(v.get("mountPath")): str(v.get("name"))
                        for v in c.get("volumeMounts") or []
                    },
                    pod=pod,
                )
            )
        pods.append(pod)
    return pods


def _flags(words: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    pending: str | None = None
    for w in words:
        if w.startswith("--"):
            key, eq, value = w[2:].partition("=")
            key = key.replace("-", "_")
            out[key] = value if eq else ""
            pending = None if eq else key
        elif pending is not None:
            out[pending], pending = w, None
    return out


def _tag(image: str) -> str | None:
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _jax_version(c: Container) -> str | None:
    if c.env.get("JAX_VERSION"):
        jax, jaxlib = c.env["JAX_VERSION"], c.env.get("JAXLIB_VERSION", c.env["JAX_VERSION"])
        return jax if jaxlib == jax else f"{jax}/jaxlib {jaxlib}"
    match = _JAX_TAG.search(_tag(c.image) or "")
    return match.group(1) if match else None


def _is_mtc(volume: dict[str, Any]) -> bool:
    return (volume.get("csi") or {}).get("driver") == MTC_DRIVER


def _is_memory_dir(volume: dict[str, Any]) -> bool:
    return (volume.get("emptyDir") or {}).get("medium") == "Memory"


def _missing_proxy(m: Manifest) -> list[Finding]:
    return [] if m.named(PROXY) else [Finding(m.label, f"no {PROXY} container in any pod")]
