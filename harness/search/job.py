"""The search as a Kubernetes Indexed Job: one Pod per shard, the index picks the shard.

No scheduler of ours: Kubernetes places the Pods, retries a failed one (``backoffLimit``) and
ends the Job after ``activeDeadlineSeconds`` whatever happens. Every shard runs the same
command; the Pod's completion index (``JOB_COMPLETION_INDEX``) and the Job's uid (the run's
seeds, and its output folder) come from the downward API.
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
    """The Job as a dict, ready for ``yaml.safe_dump``."""
    # Kubernetes expands $(VAR) in args from the container's env: one folder per run.
    out = f"{MOUNT}/results/$({RUN_ENV})"
    args = ["search", "--shards", str(options.shards), "--out", out, *options.search_args]
    if options.redis_url:
        args += ["--redis", options.redis_url]
    else:
        args += ["--database", f"{MOUNT}/example-db"]
    labels = {"app.kubernetes.io/name": "pathways-chaos-search"}
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
            "name": RUN_ENV,  # the Job's uid: one per run, shared by its shards
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['controller-uid']"}},
        },
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    container: dict[str, Any] = {
        "name": "search",
        "image": options.image,
        "command": ["pathways-chaos"],
        "args": args,
        "env": env,
        "resources": {
            "requests": {"cpu": options.cpu, "memory": options.memory},
            "limits": {"memory": options.memory},
        },
    }
    container["volumeMounts"] = [{"name": "search", "mountPath": MOUNT}]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "search", **_volume(options)}],
    }
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    metadata: dict[str, Any] = {"name": options.name, "labels": dict(labels)}
    if options.namespace:
        metadata["namespace"] = options.namespace
    backoff = options.backoff_limit
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed",
            "completions": options.shards,
            "parallelism": options.shards,
            # One retry per shard on average: a Pod lost with its node runs its shard again.
            "backoffLimit": options.shards if backoff is None else backoff,
            "activeDeadlineSeconds": int(options.budget_s) + GRACE_S,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _volume(options: JobOptions) -> dict[str, Any]:
    if options.host_path is not None:
        return {"hostPath": {"path": options.host_path, "type": "DirectoryOrCreate"}}
    return {"persistentVolumeClaim": {"claimName": options.claim}}


def job_yaml(options: JobOptions) -> str:
    import yaml

    return yaml.safe_dump(indexed_job(options), sort_keys=False)
