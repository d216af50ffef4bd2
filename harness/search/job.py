"""The nightly search as one object Kubernetes runs: a JobSet of the shards and their merge.

No scheduler of ours: Kubernetes places the Pods, retries a failed one (``backoffLimit``) and
ends a Job after ``activeDeadlineSeconds`` whatever happens. Every shard runs the same command;
the Pod's completion index (``JOB_COMPLETION_INDEX``) and the run's uid (the run's seeds, and
its output folder) come from the downward API.

Why a JobSet and not an Indexed Job whose last Pod merges: a shard exits 0 when it found a
failing schedule (so it is never retried for a finding, and its siblings' results are kept),
which leaves the Indexed Job green whatever the search found. The JobSet runs a ``merge``
replicatedJob once every shard completed (``dependsOn: Complete``, JobSet >= v0.8) and ends as
the merge ends (``successPolicy`` targets it; ``failurePolicy.maxRestarts: 0``): Failed when a
shard found a failing schedule, a shard is missing or a toolkit error happened, Completed
otherwise. The run's folder is named by the JobSet's uid (the ``jobset-uid`` label, JobSet >=
v0.9), shared by the shards and the merge. Pathways on GKE runs on JobSet, so the controller is
there already. ``--shards-only`` prints the bare Indexed Job, for a cluster without JobSet (then
``search merge`` is run by hand).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.search.plan import INDEX_ENV, RUN_ENV

#: Where the shared volume is mounted in each Pod.
MOUNT = "/search"
#: Seconds a Pod may run past its budget (start-up, shrinking a finding, the report) before
#: Kubernetes ends the Job.
GRACE_S = 900
#: Seconds the merge may take (it reads the shards' JSON files) before Kubernetes ends it.
MERGE_DEADLINE_S = 900
#: JobSet's label with the JobSet's uid on every child Job and Pod (api: JobSetUIDKey, v0.9+).
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
#: The merged report's files, in the run's folder beside the shards' files.
REPORT_FILES = {"--html": "report.html", "--json": "report.json", "--junit": "report.xml"}
LABELS = {"app.kubernetes.io/name": "pathways-chaos-search"}
#: The run's folder on the shared volume; Kubernetes expands $(VAR) in args from the env.
RUN_FOLDER = f"{MOUNT}/results/$({RUN_ENV})"


@dataclasses.dataclass(frozen=True)
class JobOptions:
    shards: int
    image: str
    search_args: tuple[str, ...]  # the options every shard runs with (no --shard, --out)
    budget_s: float
    name: str = "pathways-chaos-search"
    namespace: str | None = None
    claim: str = "pathways-chaos-search"
    #: A folder on the node instead of the claim: for a one-node cluster (or the local twin),
    #: where every shard's Pod lands on the same node.
    host_path: str | None = None
    redis_url: str | None = None
    cpu: str = "2"
    memory: str = "8Gi"
    backoff_limit: int | None = None
    service_account: str | None = None
    #: The JobSet of shards and merge (the nightly); False: the shards' Indexed Job alone.
    with_merge: bool = True

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ChaosConfigError(f"--emit-job {self.shards}: use at least 1 shard")
        if not self.image:
            raise ChaosConfigError(
                "--emit-job needs --image: the suite image ci/gke/Dockerfile builds, for "
                "example --image REGISTRY/pathways-chaos-suite:0.1.0"
            )
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?", self.name):
            raise ChaosConfigError(
                f"--job-name {self.name!r}: use lower-case letters, digits and '-' (at most 52)"
            )
        # JobSet's webhook: <name>-shards-0-<index>-<5 chars> must be a DNS label (63).
        longest_pod = f"{self.name}-shards-0-{self.shards - 1}-abcde"
        if self.with_merge and len(longest_pod) > 63:
            raise ChaosConfigError(
                f"--job-name {self.name!r}: with {self.shards} shards its Pods would be named "
                f"{longest_pod!r} ({len(longest_pod)} characters, at most 63): use a shorter name"
            )
        if self.host_path is not None and not self.host_path.startswith("/"):
            raise ChaosConfigError(
                f"--host-path {self.host_path!r}: give an absolute folder on the node"
            )
        if not self.claim and self.host_path is None:
            raise ChaosConfigError(
                "the shards write their episodes to a shared volume: --claim PVC (a "
                "ReadWriteMany PersistentVolumeClaim, e.g. Filestore on GKE)"
            )


def indexed_job(options: JobOptions) -> dict[str, Any]:
    """The shards alone as an Indexed Job (``--shards-only``), ready for ``yaml.safe_dump``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(options, options.name),
        "spec": _shards_spec(options, run_label="controller-uid"),
    }


def nightly_jobset(options: JobOptions) -> dict[str, Any]:
    """The shards and their merge as one JobSet: Failed when the search found anything."""
    merge: dict[str, Any] = {
        "backoffLimit": 0,  # a red merge is the verdict, not a flake to retry
        "completions": 1,
        "parallelism": 1,
        "activeDeadlineSeconds": MERGE_DEADLINE_S,
        "template": {
            "metadata": {"labels": dict(LABELS)},
            "spec": _pod(options, "merge", _merge_args(), run_label=JOBSET_UID_LABEL, small=True),
        },
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(options, options.name),
        "spec": {
            # Any failed Job fails the run: a shard that crashed past its retries, or the merge.
            "failurePolicy": {"maxRestarts": 0},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["merge"]},
            "replicatedJobs": [
                {
                    "name": "shards",
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": dict(LABELS)},
                        "spec": _shards_spec(options, run_label=JOBSET_UID_LABEL),
                    },
                },
                {
                    "name": "merge",
                    "replicas": 1,
                    "dependsOn": [{"name": "shards", "status": "Complete"}],
                    "template": {"metadata": {"labels": dict(LABELS)}, "spec": merge},
                },
            ],
        },
    }


def _metadata(options: JobOptions, name: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if options.namespace:
        metadata["namespace"] = options.namespace
    return metadata


def _shards_spec(options: JobOptions, *, run_label: str) -> dict[str, Any]:
    args = ["search", "--shards", str(options.shards), "--out", RUN_FOLDER, *options.search_args]
    if options.redis_url:
        args += ["--redis", options.redis_url]
    else:
        args += ["--database", f"{MOUNT}/example-db"]
    backoff = options.backoff_limit
    return {
        "completionMode": "Indexed",
        "completions": options.shards,
        "parallelism": options.shards,
        # One retry per shard on average: a Pod lost with its node runs its shard again.
        "backoffLimit": options.shards if backoff is None else backoff,
        "activeDeadlineSeconds": int(options.budget_s) + GRACE_S,
        "template": {
            "metadata": {"labels": dict(LABELS)},
            "spec": _pod(options, "search", args, run_label=run_label),
        },
    }


def _merge_args() -> list[str]:
    args = ["search", "merge", RUN_FOLDER]
    for flag, name in REPORT_FILES.items():
        args += [flag, f"{RUN_FOLDER}/{name}"]
    return args


def _pod(
    options: JobOptions, name: str, args: list[str], *, run_label: str, small: bool = False
) -> dict[str, Any]:
    env = [
        {
            "name": INDEX_ENV,  # set by Kubernetes >= 1.22 too; named here for older ones
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                }
            },
        },
        {
            "name": RUN_ENV,  # one per run, shared by its shards (and the merge)
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{run_label}']"}},
        },
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    cpu, memory = ("250m", "2Gi") if small else (options.cpu, options.memory)
    container: dict[str, Any] = {
        "name": name,
        "image": options.image,
        "command": ["pathways-chaos"],
        "args": args,
        "env": env,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "volumeMounts": [{"name": "search", "mountPath": MOUNT}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "search", **_volume(options)}],
    }
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    return pod


def _volume(options: JobOptions) -> dict[str, Any]:
    if options.host_path is not None:
        return {"hostPath": {"path": options.host_path, "type": "DirectoryOrCreate"}}
    return {"persistentVolumeClaim": {"claimName": options.claim}}


def job_yaml(options: JobOptions) -> str:
    import yaml

    body = nightly_jobset(options) if options.with_merge else indexed_job(options)
    return yaml.safe_dump(body, sort_keys=False)
