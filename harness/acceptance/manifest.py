"""A Pathways JobSet manifest as the manifest checks read it: its pods and containers by role.

Containers are found by role, not by position or by the names one sample uses: the
**proxy** (``pathways-proxy``, or a ``proxy_server`` image), the **resource manager**
(``pathways-rm``, or ``--node_type=resource_manager``), the **workers** (``pathways-worker``, a
Pathways ``server`` image, or a container asking for ``google.com/tpu``), the **colocated-Python
sidecar** (``colocated-python-sidecar``, or a non-worker container of a worker pod that serves
the sidecar's gRPC port or shared-memory directory) and the **JAX client** (``JAX_PLATFORMS=proxy``
or ``JAX_BACKEND_TARGET`` in its env, else any other container of the head pod). Native sidecars
(``initContainers``) count as containers; the worker replicatedJob may be called anything (the
guides say ``worker``, pathwaysutils' generator ``pathways-worker``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError

PROXY = "pathways-proxy"
RESOURCE_MANAGER = "pathways-rm"
WORKER = "pathways-worker"
SIDECAR = "colocated-python-sidecar"
CLIENT = "client"
#: Every role that runs jax/jaxlib: their versions must be the same.
JAX_ROLES = (CLIENT, PROXY, RESOURCE_MANAGER, WORKER, SIDECAR)
HEAD_JOBS = frozenset({"pathways-head", "head"})
MTC_DRIVER = "multitier-checkpoint.csi.storage.gke.io"
SHM_FLAG = "cloud_pathways_sidecar_shm_directory"
#: The elastic flag: the resilient-training guide's spelling, then pathwaysutils' generator's.
ELASTIC_FLAGS = ("num_elastic_instances", "num_elastic_slices")
XLA_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
_SIDECAR_ENV = ("GRPC_SERVER_ADDRESS", "CLOUD_PATHWAYS_SIDECAR_SHM_DIRECTORY")


@dataclasses.dataclass
class Container:
    name: str
    image: str
    flags: dict[str, str]  # --name=value (or --name value) from command and args
    env: dict[str, str]
    mounts: dict[str, str]  # mountPath -> volume name
    pod: Pod
    role: str | None = None
    asks_tpu: bool = False

    @property
    def where(self) -> str:
        return f"{self.pod.where}/{self.name}"

    def xla_flags(self) -> set[str]:
        """``name=value`` of every XLA flag: in the args and in XLA_FLAGS/LIBTPU_INIT_ARGS."""
        out = {f"{k}={v}" for k, v in self.flags.items() if k.startswith("xla_")}
        for var in XLA_ENV:
            out |= {f"{k}={v}" for k, v in _flags(shlex.split(self.env.get(var, ""))).items()}
        return out

    def volume(self, path: str) -> dict[str, Any] | None:
        """The volume mounted at ``path``, or None."""
        name = self.mounts.get(path)
        return None if name is None else self.pod.volumes.get(name, {"name": name})


@dataclasses.dataclass
class Pod:
    jobset: str
    job: str  # the replicatedJob's name
    replicas: int
    parallelism: int
    volumes: dict[str, dict[str, Any]]
    priority_class: str | None
    label: str
    coordinator: bool = False
    containers: list[Container] = dataclasses.field(default_factory=list)
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The Job's ``backoffLimit`` as written (None: not written, Kubernetes' default of 6).
    backoff_limit: object = None
    #: The JobSet's ``failurePolicy.maxRestarts`` as written (None: not written, 0).
    max_restarts: object = None
    #: The Job's ``podFailurePolicy`` ignores a pod disrupted (node drained, preempted): such a
    #: pod is recreated whatever the ``backoffLimit``.
    ignores_disruption: bool = False
    #: A JobSet ``failurePolicy`` rule restarts it whatever ``maxRestarts`` says.
    restarts_ignoring_max: bool = False

    @property
    def where(self) -> str:
        return f"{self.label}:{self.job}"

    def role(self, role: str) -> list[Container]:
        return [c for c in self.containers if c.role == role]

    @property
    def is_worker(self) -> bool:
        return bool(self.role(WORKER))

    @property
    def is_head(self) -> bool:
        if self.is_worker:
            return False
        return bool(self.role(PROXY) or self.role(RESOURCE_MANAGER) or self.coordinator) or (
            self.job in HEAD_JOBS
        )

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

    def role(self, role: str) -> list[Container]:
        return [c for c in self.containers() if c.role == role]

    def named(self, name: str) -> list[Container]:
        """Containers in ``name``'s role (``pathways-proxy``, ``colocated-python-sidecar``...)."""
        return self.role(name)

    @property
    def head_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.is_head]

    @property
    def worker_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.is_worker]

    def clients(self) -> list[Container]:
        return self.role(CLIENT)

    @property
    def slice_count(self) -> int:
        return sum(p.replicas for p in self.worker_pods)

    @property
    def checkpoint_configurations(self) -> list[tuple[str, str]]:
        """The CheckpointConfigurations that can serve the worker nodes: one whose
        ``nodeSelector`` gives another value for a label the workers select on is for another
        node pool (a v5e pool's beside a v6e job's), and is left out."""
        return in_memory_volume_sizes([d for d in self.documents if self._serves_workers(d)])

    def _serves_workers(self, doc: Any) -> bool:
        if not isinstance(doc, dict) or doc.get("kind") != "CheckpointConfiguration":
            return True
        wanted = (doc.get("spec") or {}).get("nodeSelector") or {}
        if not isinstance(wanted, dict) or not self.worker_pods:
            return True
        return any(
            all(p.node_selector.get(str(k), str(v)) == str(v) for k, v in wanted.items())
            for p in self.worker_pods
        )

    @property
    def mtc_volumes(self) -> list[str]:
        return [f"{p.where}:{n}" for p in self.pods for n, v in p.volumes.items() if is_mtc(v)]

    @property
    def uses_mtc(self) -> bool:
        """Multi-Tier Checkpointing: its CSI volume, a CheckpointConfiguration, or the proxy's
        ``--sidecar_name`` (a colocated-Python sidecar alone is not MTC)."""
        return bool(
            self.mtc_volumes
            or self.checkpoint_configurations
            or any("sidecar_name" in c.flags for c in self.role(PROXY))
        )


def load_manifest(path: str | Path | Sequence[str | Path]) -> Manifest:
    """Every JobSet in the YAML files given (a file, or every ``.yaml``/``.yml``/``.json`` of a
    folder; a ``kind: List`` stands for its items)."""
    paths = [path] if isinstance(path, str | Path) else list(path)
    files: list[Path] = []
    for raw in paths:
        files += manifest_files(raw)
    documents: list[Any] = []
    pods: list[Pod] = []
    for file in files:
        docs = unlisted(read_manifest_file(file))
        documents += docs
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "JobSet":
                pods += _pods(doc, str(file))
    label = ", ".join(map(str, paths))
    if not pods:
        raise ChaosConfigError(_no_jobset(label, paths, documents))
    return Manifest(label, pods, documents)


def manifest_files(raw: str | Path) -> list[Path]:
    """The files ``--acceptance-manifest raw`` stands for; a Helm chart is refused here, before
    its values file is read as if it were deployed."""
    root = Path(raw)
    if not str(raw).strip():
        raise ChaosConfigError(f"--acceptance-manifest is empty: {_PASS_JOBSET}")
    if root.is_dir():
        if (root / "Chart.yaml").is_file() or (root / "Chart.yml").is_file():
            raise ChaosConfigError(_HELM.format(what=f"{root} is a Helm chart", chart=root))
        return sorted([*root.glob("*.yaml"), *root.glob("*.yml"), *root.glob("*.json")])
    if root.is_file():
        return [root]
    raise ChaosConfigError(f"--acceptance-manifest {raw}: no such file or folder: {_PASS_JOBSET}")


def read_manifest_file(file: Path, what: str = "YAML file") -> list[Any]:
    """The file's documents, refused in one line when they are not what Kubernetes receives:
    a Helm template (a ``{{ .Values }}`` action, or a file under a chart's ``templates/``), or a
    kustomization, whose patches are not applied here (its base alone would be checked, not
    what is deployed)."""
    from pathways_chaos.harness.engine.untrusted_files import load_yaml_all, read_text

    if file.name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        raise ChaosConfigError(_KUSTOMIZE.format(file=file, folder=file.parent))
    chart = _chart_of_template(file)
    if chart is not None:
        raise ChaosConfigError(_HELM.format(what=f"{file} is a Helm chart's template", chart=chart))
    text = read_text(file, what=what)  # regular, size-limited, UTF-8
    action = _HELM_ACTION.search(text)
    if action is not None:
        line = text.count("\n", 0, action.start()) + 1
        said = f"{file}:{line} is a Helm template ({_shown_action(action.group(0))})"
        raise ChaosConfigError(_HELM.format(what=said, chart=_chart_above(file) or "CHART_DIR"))
    docs = [d for d in load_yaml_all(text, file, what=what) if d is not None]
    if any(isinstance(d, dict) and d.get("kind") == "Kustomization" for d in docs):
        raise ChaosConfigError(_KUSTOMIZE.format(file=file, folder=file.parent))
    if any(isinstance(d, list) for d in docs):
        raise ChaosConfigError(
            f"{file} is a JSON or YAML array, not a Kubernetes manifest: wrap it as kind: List "
            '({"apiVersion": "v1", "kind": "List", "items": [...]}) and pass that'
        )
    return docs


#: A Go template action as Helm writes them: ``{{ .Values.x }}``, ``{{- if ... }}``,
#: ``{{ include ... }}``; not ``{{workflow.name}}`` or ``{{ $labels.pod }}`` (Argo, alerts).
_HELM_ACTION = re.compile(
    r"\{\{-?\s*(?:\.|/\*|(?:if|else|end|range|with|include|define|template|block|toYaml|tpl"
    r"|required|default|quote|printf|lookup)\b)[^\n]*?\}\}"
)
_HELM = (
    "{what}, not a manifest: render it (helm template RELEASE {chart} > rendered.yaml) and pass "
    "rendered.yaml: the template alone is not what is deployed"
)
_PASS_JOBSET = "pass your JobSet YAML (a file, or a folder of them)"
_KUSTOMIZE = (
    "{file} is a kustomization: its patches are not applied here, so the base alone would be "
    "checked: render it (kubectl kustomize {folder} > rendered.yaml) and pass that"
)


def _shown_action(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "...}}"


def _name(doc: dict[str, Any]) -> str:
    name = (doc.get("metadata") or {}).get("name")
    return str(name) if isinstance(name, str) and name.isprintable() and name else "NAME"


def _chart_of_template(file: Path) -> Path | None:
    """The chart whose ``templates/`` holds ``file`` (a ``Chart.yaml`` beside that folder): a
    file rendered next to its chart's ``Chart.yaml`` (``helm template ... > rendered.yaml``
    run in the chart) is no template."""
    folder = file.resolve().parent
    for templates in [folder, *folder.parents]:
        if templates.name == "templates" and (templates.parent / "Chart.yaml").is_file():
            return _relative(templates.parent)
    return None


def _chart_above(file: Path) -> Path | None:
    """The nearest folder at or above ``file``'s holding a ``Chart.yaml``: the chart to render."""
    folder = file.resolve().parent
    return next(
        (_relative(f) for f in [folder, *folder.parents] if (f / "Chart.yaml").is_file()), None
    )


def _relative(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _no_jobset(label: str, paths: Sequence[str | Path], documents: list[Any]) -> str:
    """The line for no JobSet: what was found instead (a PathwaysJob: the JobSet its controller
    writes), and the files in subfolders, which a folder does not search (a deploy/ with dev/
    and prod/ would mix two environments' JobSets)."""
    operator = next(
        (d for d in documents if isinstance(d, dict) and d.get("kind") == "PathwaysJob"), None
    )
    if operator is not None:
        return (
            f"--acceptance-manifest {label} holds a PathwaysJob, no JobSet: the pathways-job "
            "controller writes the JobSet that runs: apply it, then pass that JobSet (kubectl "
            f"get jobset {_name(operator)} -o yaml > jobset.yaml)"
        )
    kinds = sorted({str(d.get("kind")) for d in documents if isinstance(d, dict) and d.get("kind")})
    found = f" (found {', '.join(kinds[:5])})" if kinds else ""
    below = [f for raw in paths if Path(raw).is_dir() for f in _below(Path(raw))]
    if below:
        more = f" (+{len(below) - 3} more)" if len(below) > 3 else ""
        return (
            f"--acceptance-manifest {label}: no JobSet with replicatedJobs found{found}, and a "
            "folder's subfolders are not searched: pass the file or folder that holds your "
            f"JobSet, e.g. {', '.join(map(str, below[:3]))}{more}"
        )
    return (
        f"--acceptance-manifest {label}: no JobSet with replicatedJobs found{found}: pass the "
        "Pathways JobSet YAML your job deploys (kubectl get jobset NAME -o yaml)"
    )


def _below(folder: Path, limit: int = 200) -> list[Path]:
    """YAML files in ``folder``'s subfolders (not in it), charts' templates left out; the walk
    stops after ``limit`` folders so a home directory passed by mistake answers quickly."""
    from pathways_chaos.harness.acceptance.sources import SKIP_DIRS

    out: list[Path] = []
    for n, (root, dirs, names) in enumerate(os.walk(folder)):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        if "Chart.yaml" in names:
            dirs[:] = [d for d in dirs if d != "templates"]
        if n == 0:
            continue
        out += [Path(root) / x for x in sorted(names) if x.endswith((".yaml", ".yml", ".json"))]
        if n >= limit:
            break
    return out


def unlisted(docs: list[Any]) -> list[Any]:
    """A ``kind: List`` (``kubectl get -o yaml`` of several objects) stands for its items."""
    out: list[Any] = []
    for doc in docs:
        if (
            isinstance(doc, dict)
            and doc.get("kind") == "List"
            and isinstance(doc.get("items"), list)
        ):
            out += doc["items"]
        else:
            out.append(doc)
    return out


def _map(value: Any) -> dict[str, Any]:
    """A mapping field of a manifest, or empty when it is anything else (a list, a number): a
    shape Kubernetes would refuse is not a crash here."""
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The mappings of a list field (containers, volumes), or none when it is not a list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _whole(value: Any, default: int, where: str, field: str) -> int:
    """A count field (``replicas``, ``parallelism``): a whole number >= 0, or one line."""
    if value is None:
        return default
    if type(value) is not int or value < 0:
        raise ChaosConfigError(
            f"{where}: {field} {value!r:.40} is not a whole number >= 0 (Kubernetes refuses "
            "the JobSet): fix the manifest"
        )
    return value


def _pods(jobset: dict[str, Any], label: str) -> list[Pod]:
    name = _map(jobset.get("metadata")).get("name", "<unnamed>")
    spec = _map(jobset.get("spec"))
    coordinator = _map(spec.get("coordinator")).get("replicatedJob") or None
    jobs = spec.get("replicatedJobs")
    pods = []
    for rj in (r for r in (jobs if isinstance(jobs, list) else []) if isinstance(r, dict)):
        job_spec = _map(_map(rj.get("template")).get("spec"))
        pod_spec = _map(_map(job_spec.get("template")).get("spec"))
        job = str(rj.get("name", "<unnamed>"))
        where = f"{Path(label).name}:{job}"
        pod = Pod(
            jobset=str(name),
            job=job,
            replicas=_whole(rj.get("replicas"), 1, where, "replicas"),
            parallelism=_whole(
                job_spec.get("parallelism"),
                _whole(job_spec.get("completions"), 1, where, "completions"),
                where,
                "parallelism",
            ),
            volumes={str(v.get("name")): v for v in _dicts(pod_spec.get("volumes"))},
            priority_class=pod_spec.get("priorityClassName"),
            label=Path(label).name,
            coordinator=job == coordinator,
            node_selector={str(k): str(v) for k, v in _map(pod_spec.get("nodeSelector")).items()},
            backoff_limit=job_spec.get("backoffLimit"),
            max_restarts=_map(spec.get("failurePolicy")).get("maxRestarts"),
            restarts_ignoring_max=_restarts_ignoring_max(spec.get("failurePolicy")),
            ignores_disruption=_ignores_disruption(job_spec.get("podFailurePolicy")),
        )
        for raw in [*_dicts(pod_spec.get("initContainers")), *_dicts(pod_spec.get("containers"))]:
            pod.containers.append(_container(raw, pod))
        for c in pod.containers:
            c.role = _service_role(c)
        pods.append(pod)
    for pod in pods:  # the client and the sidecar depend on the pod's kind
        for c in pod.containers:
            if c.role is None:
                c.role = _other_role(c, pod)
    return pods


def in_memory_volume_sizes(documents: Sequence[Any]) -> list[tuple[str, str]]:
    """(name, inMemoryVolumeSize) of every CheckpointConfiguration among YAML documents."""
    out = []
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "CheckpointConfiguration":
            name = (doc.get("metadata") or {}).get("name", "<unnamed>")
            size = (doc.get("spec") or {}).get("inMemoryVolumeSize")
            out.append((str(name), "" if size is None else str(size)))
    return out


def _rules(policy: Any) -> list[dict[str, Any]]:
    return _dicts(_map(policy).get("rules"))


def _ignores_disruption(policy: Any) -> bool:
    """A ``podFailurePolicy`` rule ``action: Ignore`` on the ``DisruptionTarget`` condition."""
    return any(
        rule.get("action") == "Ignore"
        and any(c.get("type") == "DisruptionTarget" for c in _dicts(rule.get("onPodConditions")))
        for rule in _rules(policy)
    )


def _restarts_ignoring_max(policy: Any) -> bool:
    """A JobSet ``failurePolicy`` rule that restarts it whatever ``maxRestarts`` says."""
    return any(r.get("action") == "RestartJobSetAndIgnoreMaxRestarts" for r in _rules(policy))


def _container(c: dict[str, Any], pod: Pod) -> Container:
    tokens = [str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]]
    words = [w for t in tokens for w in (_split(t) if " " in t else [t])]
    limits = {**((c.get("resources") or {}).get("requests") or {})}
    limits.update((c.get("resources") or {}).get("limits") or {})
    return Container(
        name=str(c.get("name", "")),
        image=str(c.get("image", "") or ""),
        flags=_flags(words),
        env={str(e.get("name")): str(e.get("value", "")) for e in c.get("env") or []},
        mounts={str(v.get("mountPath")): str(v.get("name")) for v in c.get("volumeMounts") or []},
        pod=pod,
        asks_tpu=any(k.startswith("google.com/tpu") for k in limits),
    )


def _service_role(c: Container) -> str | None:
    image = image_name(c.image)
    pathways_image = "pathways" in c.image
    if c.name == PROXY or image == "proxy_server":
        return PROXY
    if c.name == RESOURCE_MANAGER or c.flags.get("node_type") == "resource_manager":
        return RESOURCE_MANAGER
    if c.name == WORKER or (image == "server" and pathways_image) or c.asks_tpu:
        return WORKER
    return None


def _other_role(c: Container, pod: Pod) -> str | None:
    if c.name == SIDECAR:
        return SIDECAR
    if pod.is_worker and (
        "colocated" in c.name or "colocated" in c.image or any(k in c.env for k in _SIDECAR_ENV)
    ):
        return SIDECAR
    if "proxy" in c.env.get("JAX_PLATFORMS", "") or "JAX_BACKEND_TARGET" in c.env:
        return CLIENT
    if pod.is_head:
        return CLIENT
    return None


def _split(token: str) -> list[str]:
    try:
        return shlex.split(token)
    except ValueError:  # an unbalanced quote in a shell script: words are enough
        return token.split()


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


def image_name(image: str) -> str:
    """``proxy_server`` for ``us-docker.pkg.dev/x/pathways/proxy_server:jax-0.10.1``."""
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def is_mtc(volume: dict[str, Any]) -> bool:
    return (volume.get("csi") or {}).get("driver") == MTC_DRIVER
