"""Checks on a Pathways JobSet manifest for settings that only fail once the job is deployed.

The manifest is read by role (``acceptance.manifest``). A check whose subject is not in the
manifest (no client in a headless JobSet, no proxy when a shared Pathways service runs it) is
SKIP, saying what to pass; it is never judged on a guess.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.acceptance.manifest import (
    CLIENT,
    ELASTIC_FLAGS,
    JAX_ROLES,
    MTC_DRIVER,
    PROXY,
    RESOURCE_MANAGER,
    SHM_FLAG,
    SIDECAR,
    WORKER,
    Container,
    Manifest,
    Pod,
    is_mtc,
    load_manifest,
)
from pathways_chaos.harness.acceptance.ramdisk import (
    RamdiskSizing,
    check_ramdisk,
)
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.acceptance.worker_restarts import check_worker_restarts
from pathways_chaos.harness.engine.topology import elastic_slices_fit

_JAX_TAG = re.compile(r"jax[-_]?v?(\d+\.\d+(?:\.\d+)?)")


# -- the checks ----------------------------------------------------------------------------
NO_CLIENT = (
    "no JAX client container in the JobSet (none with JAX_PLATFORMS=proxy, none beside the "
    "Pathways services in the head pod): pass the manifest that runs your client with "
    "--acceptance-manifest"
)
NO_PROXY = (
    f"no {PROXY} container in the JobSet (a shared Pathways service?): pass the manifest that "
    "runs the proxy with --acceptance-manifest"
)
#: The row that fails for a JobSet running Pathways without its proxy (the others wait on it).
PROXY_ROW = "num-elastic-instances"


def _own_service_without_proxy(m: Manifest) -> bool:
    """A JobSet that runs a resource manager or workers of its own is no client of a shared
    service: a missing proxy is missing, not elsewhere."""
    return not m.role(PROXY) and bool(m.role(RESOURCE_MANAGER) or m.worker_pods)


def _no_proxy(check: str, title: str, fix: str, m: Manifest) -> CheckResult:
    """SKIP for a client of a shared Pathways service; for a JobSet running its own Pathways
    without a proxy, FAIL on ``PROXY_ROW`` and NOT JUDGED elsewhere (one finding, not three)."""
    if not _own_service_without_proxy(m):
        return _skip(check, title, fix, NO_PROXY)
    if check != PROXY_ROW:
        return CheckResult(check, title, fix, depends_on=PROXY_ROW, note=f"no {PROXY}")
    runs = [
        what
        for what, present in (
            ("a resource manager", m.role(RESOURCE_MANAGER)),
            ("workers", m.worker_pods),
        )
        if present
    ]
    problem = (
        f"the JobSet runs Pathways ({' and '.join(runs)}) but no {PROXY} container: a JAX "
        "client has no proxy to connect to and nothing holds the elastic flag"
    )
    return CheckResult(
        check,
        title,
        f"add the {PROXY} container (a proxy_server image, --resource_manager_address, "
        f"--num_elastic_instances) to the head pod beside the resource manager; {fix}",
        (Finding(m.label, problem),),
    )


def check_xla_flags_on_proxy(m: Manifest) -> CheckResult:
    title = "XLA flags are on the pathways-proxy container, not only in the client"
    fix = (
        f"the remote compiler reads its flags from {PROXY}: add them to its args "
        "(Cluster Toolkit: --pathways-proxy-args)"
    )
    proxies, clients = m.role(PROXY), m.clients()
    if not clients or not proxies:
        if not clients:
            return _skip("xla-flags-on-proxy", title, fix, NO_CLIENT)
        return _no_proxy("xla-flags-on-proxy", title, fix, m)
    on_proxy = set().union(*(p.xla_flags() for p in proxies))
    findings = []
    for client in clients:
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
    return CheckResult("xla-flags-on-proxy", title, fix, tuple(findings), note)


def check_gcs_scratch_location(m: Manifest) -> CheckResult:
    title = "--gcs_scratch_location is set, so the compilation cache survives a redeploy"
    fix = (
        f"add --gcs_scratch_location=gs://BUCKET/tmp to {PROXY}'s args (and give the job's "
        "service account access to the bucket)"
    )
    proxies = m.role(PROXY)
    if not proxies:
        return _no_proxy("gcs-scratch-location", title, fix, m)
    findings = [
        Finding(p.where, problem) for p in proxies if (problem := _scratch_problem(p)) is not None
    ]
    values = sorted({p.flags.get("gcs_scratch_location", "") for p in proxies})
    return CheckResult(
        "gcs-scratch-location",
        title,
        fix,
        tuple(findings),
        f"--gcs_scratch_location={', '.join(values)}",
    )


def _scratch_problem(proxy: Container) -> str | None:
    """Why the proxy's scratch location is no Cloud Storage location, or None: empty (quotes
    too), a ``$(VAR)`` its env does not define, a local path."""
    raw = proxy.flags.get("gcs_scratch_location", "")
    value = raw.strip().strip("\"'").strip()
    if not value:
        return "--gcs_scratch_location is missing or empty"
    for name in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value):
        if name not in proxy.env:
            return f"--gcs_scratch_location={raw} refers to $({name}), which its env does not set"
        if not proxy.env[name]:
            return None  # from a ConfigMap or a Secret (valueFrom): only the cluster knows it
        value = value.replace(f"$({name})", proxy.env[name])
    if value.startswith("gs://") and len(value) > len("gs://"):
        return None
    return f"--gcs_scratch_location={raw} is not a Cloud Storage location (gs://BUCKET/PATH)"


def elastic_flag(flags: dict[str, str]) -> tuple[str, str] | None:
    """``(spelling, value)`` of the elastic flag, whichever spelling is there (the guide's
    first); None when neither is."""
    for name in ELASTIC_FLAGS:
        if name in flags:
            return name, flags[name]
    return None


def check_num_elastic_instances(m: Manifest) -> CheckResult:
    slices = m.slice_count
    title = (
        "--num_elastic_instances (or pathwaysutils' --num_elastic_slices) on pathways-proxy, "
        "at most the slice count"
    )
    fix = (
        f"set --num_elastic_instances={slices} on {PROXY} (the worker replicatedJob's replicas, "
        f"or fewer: 1 to {slices}; pathwaysutils' generator writes it as --num_elastic_slices)"
    )
    proxies = m.role(PROXY)
    if not proxies:
        return _no_proxy("num-elastic-instances", title, fix, m)
    findings = []
    if not m.worker_pods:
        findings.append(Finding(m.label, f"no worker replicatedJob (no {WORKER} container)"))
    seen: list[str] = []
    counts: set[int] = set()  # the elastic flag's values that are numbers
    for p in proxies:
        given = {n: p.flags[n] for n in ELASTIC_FLAGS if n in p.flags}
        misplaced = [
            (c, flag) for c in m.containers() if c.role != PROXY and (flag := elastic_flag(c.flags))
        ]
        if not given and misplaced:
            for c, (name, value) in misplaced:  # set, but where the proxy never reads it
                findings.append(
                    Finding(
                        p.where,
                        f"--{name}={value} is on container {c.where}, should be on {PROXY}: "
                        "only the proxy reads it, so elastic training is off",
                    )
                )
        elif not given:
            findings.append(
                Finding(
                    p.where,
                    "neither --num_elastic_instances nor --num_elastic_slices is set: elastic "
                    "training is off",
                )
            )
        if len(set(given.values())) > 1:
            both = " and ".join(f"--{n}={v}" for n, v in given.items())
            findings.append(Finding(p.where, f"{both} disagree"))
        for name, value in given.items():
            seen.append(f"--{name}={value}")
            if not value.strip().isdigit():
                findings.append(Finding(p.where, f"--{name}={value} is not a number of slices"))
                continue
            counts.add(int(value))
            if m.worker_pods and not elastic_slices_fit(int(value), slices):
                findings.append(
                    Finding(
                        p.where,
                        f"--{name}={value} but the worker jobs have {slices} slices (replicas)",
                    )
                )
    # Fewer elastic slices than slices is allowed (pathwaysutils' generator and the
    # pathways-job samples write 1 of 2): said, not failed.
    relation = "=" if counts == {slices} else "of"
    return CheckResult(
        "num-elastic-instances",
        title,
        fix,
        tuple(findings),
        f"{', '.join(sorted(set(seen)))} {relation} {slices} worker slices",
    )


def check_image_pins(m: Manifest) -> CheckResult:
    findings = []
    for c in m.containers():
        problem = _unpinned(c.image)
        if problem:
            findings.append(Finding(c.where, problem))
    return CheckResult(
        "image-pins",
        "every image is pinned to a tag or digest (no latest)",
        "pin each image to its jax-version tag or digest (e.g. proxy_server:jax-0.10.1), so a "
        "failed run can be reproduced",
        tuple(findings),
        f"{len(m.containers())} images pinned",
    )


def check_jax_versions_match(m: Manifest) -> CheckResult:
    """Every jax-running image (client, proxy, resource manager, workers, sidecar) on one
    jax/jaxlib. A known mismatch fails whatever else is unknown; unknown versions alone are
    SKIP (say the version) or NOT JUDGED (the image floats, so image-pins already failed)."""
    title = (
        "jax/jaxlib identical in every image that runs it: client, pathways-proxy, pathways-rm, "
        "workers and the colocated-python sidecar"
    )
    fix = (
        "build every image on one jax/jaxlib: Pathways images tagged jax-X.Y.Z for the client's "
        "jax, the sidecar from the client's pins; tag your own images jax-X.Y.Z (or set "
        "JAX_VERSION in their env) so the versions can be compared"
    )
    running = [c for c in m.containers() if c.role in JAX_ROLES]
    known = {c.where: v for c in running if (v := _jax_version(c)) is not None}
    unknown = [c for c in running if c.where not in known]
    versions = Counter(known.values())
    findings: list[Finding] = []
    if len(versions) > 1:
        want, whose = _reference_version(m, known, versions)
        findings += [
            Finding(where, f"jax/jaxlib {got} differs from {whose} {want}")
            for where, got in known.items()
            if got != want
        ]
        findings += [
            Finding(c.where, f"version unknown ({c.image or 'no image'})") for c in unknown
        ]
        return CheckResult("jax-versions-match", title, fix, tuple(findings))
    listed = ", ".join(sorted({_role_label(c) for c in running if c.where in known}))
    note = f"jax {next(iter(versions))} in {len(known)} images ({listed})" if versions else ""
    if unknown:
        names = ", ".join(f"{c.where} ({c.image or 'no image'})" for c in unknown)
        if all(_unpinned(c.image) for c in unknown):
            return CheckResult(
                "jax-versions-match",
                title,
                fix,
                depends_on="image-pins",
                note=f"version unknown for {names}{'; ' + note if note else ''}",
            )
        return CheckResult(
            "jax-versions-match",
            title,
            fix,
            note=note,
            skipped=f"version unknown for {names}: tag the image jax-X.Y.Z or set JAX_VERSION "
            "(and JAXLIB_VERSION) in the container's env",
        )
    if not running:
        return _skip("jax-versions-match", title, fix, "no container that runs jax in the JobSet")
    return CheckResult("jax-versions-match", title, fix, (), note)


def check_dev_shm(m: Manifest) -> CheckResult:
    title = "a memory-backed /dev/shm for loader workers in the client container"
    fix = (
        "mount an emptyDir {medium: Memory} volume at /dev/shm in the client container, so "
        "prefetched batches do not hit the default 64 MB limit"
    )
    clients = m.clients()
    if not clients:
        return _skip("dev-shm", title, fix, NO_CLIENT)
    findings = []
    for c in clients:
        volume = c.volume("/dev/shm")
        if volume is None:
            findings.append(Finding(c.where, "mounts nothing at /dev/shm (64 MB default)"))
        elif not _is_memory_dir(volume):
            findings.append(Finding(c.where, f"/dev/shm is {_describe(volume)}, not memory-backed"))
    return CheckResult("dev-shm", title, fix, tuple(findings), "/dev/shm is an emptyDir in memory")


def check_mtc_sidecar_name(m: Manifest) -> CheckResult:
    title = "Multi-Tier Checkpointing: --sidecar_name=external on pathways-proxy"
    fix = f"add --sidecar_name=external to {PROXY}'s args"
    if not m.uses_mtc:
        return CheckResult("mtc-sidecar-name", title, fix, (), "no Multi-Tier Checkpointing")
    if not m.role(PROXY):
        return _skip("mtc-sidecar-name", title, fix, NO_PROXY)
    findings = [
        Finding(
            p.where,
            f"--sidecar_name={p.flags['sidecar_name']}, not external"
            if "sidecar_name" in p.flags
            else "--sidecar_name is not set (must be external)",
        )
        for p in m.role(PROXY)
        if p.flags.get("sidecar_name") != "external"
    ]
    return CheckResult("mtc-sidecar-name", title, fix, tuple(findings), "--sidecar_name=external")


def check_mtc_csi_volume(m: Manifest) -> CheckResult:
    findings: list[Finding] = []
    if m.uses_mtc:
        if not m.worker_pods:
            findings.append(Finding(m.label, f"no worker replicatedJob (no {WORKER} container)"))
        for pod in m.worker_pods:
            for role in (WORKER, SIDECAR):
                if not pod.role(role):
                    findings.append(Finding(pod.where, f"has no {role} container"))
                for c in pod.role(role):
                    if not pod.mounts_volume(c, is_mtc):
                        findings.append(Finding(c.where, f"does not mount the {MTC_DRIVER} volume"))
        for pod in m.head_pods:
            for c in pod.containers:
                if pod.mounts_volume(c, is_mtc):
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


def check_sidecar_shared_dir(m: Manifest) -> CheckResult:
    """The worker hands tensors to the colocated-Python sidecar through the directory named by
    ``--cloud_pathways_sidecar_shm_directory``: both mount it, from one memory-backed volume."""
    findings: list[Finding] = []
    shared: set[str] = set()
    sidecars = m.role(SIDECAR)
    if sidecars or m.uses_mtc:
        for pod in m.worker_pods:
            findings += _shared_dir_findings(pod, shared)
    note = (
        f"{', '.join(sorted(shared))} shared through memory"
        if shared
        else "no colocated-Python sidecar"
    )
    return CheckResult(
        "sidecar-shared-dir",
        "colocated-Python sidecar: one memory-backed volume shared with the worker at the "
        "directory --cloud_pathways_sidecar_shm_directory names",
        f"pass --{SHM_FLAG}=/tmp/sidecar to {WORKER} and mount one emptyDir {{medium: Memory}} "
        f"at that path in {WORKER} and {SIDECAR}",
        tuple(findings),
        note,
    )


def check_worker_priority_class(m: Manifest) -> CheckResult:
    """Hot-swap needs a priority class on the worker pods; it is optional (the guide's, and
    pathwaysutils' generator writes none by default), so only a JobSet that gives some pod a
    class and leaves a worker pod without one fails: it meant to use hot-swap, and cannot."""
    findings = []
    if not m.worker_pods:
        findings.append(Finding(m.label, f"no worker replicatedJob (no {WORKER} container)"))
    given = sorted({p.priority_class for p in m.pods if p.priority_class})
    if given:
        findings += [
            Finding(
                p.where,
                f"the pod template has no priorityClassName ({given[0]} is set on "
                "another pod of the JobSet)",
            )
            for p in m.worker_pods
            if not p.priority_class
        ]
    note = (
        f"priorityClassName {', '.join(given)}"
        if given
        else "no priorityClassName: hot-swap is not set up (optional: set one on the worker "
        "pods to let a failed slice take over a lower-priority job's)"
    )
    return CheckResult(
        "worker-priority-class",
        "priorityClassName on the worker pods, when the JobSet uses priority classes (hot-swap)",
        "set spec.template.spec.priorityClassName (e.g. high-prior-job) in the worker "
        "replicatedJob's pod template",
        tuple(findings),
        note,
    )


def check_manifest_ramdisk(
    m: Manifest, params: float | None, buffer: float = 0.15, params_from: str = "given"
) -> CheckResult:
    """Hosts per slice from the worker job's parallelism; ``params_from`` says where the
    parameter count came from, for the reason."""
    configured = m.checkpoint_configurations
    if not m.uses_mtc:
        return check_ramdisk(None, [], m.label, mtc_used=False)
    if not configured:
        volumes = ", ".join(m.mtc_volumes) or "the proxy's --sidecar_name"
        return check_ramdisk(None, [], f"{m.label} ({volumes})")
    hosts = max((p.parallelism for p in m.worker_pods), default=1)
    sizing = RamdiskSizing(params, hosts, buffer) if params else None
    result = check_ramdisk(sizing, configured, Path(m.label).name)
    if result.status == "PASS":
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
    "sidecar-shared-dir": check_sidecar_shared_dir,
    "worker-priority-class": check_worker_priority_class,
    "worker-restarts": check_worker_restarts,
}


def run_manifest_checks(
    path: str | Path | Sequence[str | Path], params: float | None = None, buffer: float = 0.15
) -> list[CheckResult]:
    m = load_manifest(path)
    rows = [check(m) for check in MANIFEST_CHECKS.values()]
    rows.append(check_manifest_ramdisk(m, params, buffer))
    return [dataclasses.replace(r, group="manifest") for r in rows]


def _tag(image: str) -> str | None:
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _unpinned(image: str) -> str:
    """Why ``image`` is not pinned, or "" when it is."""
    if not image:
        return "has no image"
    if "@sha256:" in image:
        return ""
    tag = _tag(image)
    if tag is None:
        return f"image {image} has no tag (means latest)"
    if tag == "latest":
        return f"image {image} floats on latest"
    return ""


def _jax_version(c: Container) -> str | None:
    if c.env.get("JAX_VERSION"):
        jax, jaxlib = c.env["JAX_VERSION"], c.env.get("JAXLIB_VERSION", c.env["JAX_VERSION"])
        return jax if jaxlib == jax else f"{jax}/jaxlib {jaxlib}"
    match = _JAX_TAG.search(_tag(c.image) or "")
    return match.group(1) if match else None


def _reference_version(
    m: Manifest, known: dict[str, str], versions: Counter[str]
) -> tuple[str, str]:
    """What the others are compared with: the client's jax, else the Pathways images' (their
    release pins it), else the most common."""
    clients = [known[c.where] for c in m.clients() if c.where in known]
    if clients:
        return clients[0], "the client's"
    services = Counter(
        known[c.where]
        for c in m.containers()
        if c.role in (PROXY, RESOURCE_MANAGER, WORKER) and c.where in known
    )
    if services:
        return services.most_common(1)[0][0], "the Pathways images'"
    return versions.most_common(1)[0][0], "the most common"


def _role_label(c: Container) -> str:
    return c.name if c.role == CLIENT else str(c.role)


def _is_memory_dir(volume: dict[str, Any]) -> bool:
    return (volume.get("emptyDir") or {}).get("medium") == "Memory"


def _describe(volume: dict[str, Any]) -> str:
    name = volume.get("name", "?")
    if "emptyDir" in volume:
        return f"volume {name}, an emptyDir on the node's disk (no medium: Memory)"
    kinds = [k for k in volume if k != "name"]
    return f"volume {name} ({kinds[0] if kinds else 'not declared in the pod'})"


def _shared_dir_findings(pod: Pod, shared: set[str]) -> list[Finding]:
    findings = []
    workers, sidecars = pod.role(WORKER), pod.role(SIDECAR)
    if not sidecars:
        return [Finding(pod.where, f"has no {SIDECAR} container")]
    for worker in workers:
        path = worker.flags.get(SHM_FLAG, "").strip()
        if not path:
            findings.append(Finding(worker.where, f"--{SHM_FLAG} is not set"))
            continue
        volumes = set()
        for c in [worker, *sidecars]:
            volume = c.volume(path)
            if volume is None:
                findings.append(Finding(c.where, f"does not mount {path}"))
            elif not _is_memory_dir(volume):
                findings.append(Finding(c.where, f"{path} is {_describe(volume)}"))
            else:
                volumes.add(c.mounts[path])
        if len(volumes) > 1:
            findings.append(
                Finding(pod.where, f"{path} comes from different volumes {sorted(volumes)}")
            )
        if not findings:
            shared.add(path)
    return findings


def _skip(check: str, title: str, fix: str, what: str) -> CheckResult:
    return CheckResult(check, title, fix, (), skipped=what)
