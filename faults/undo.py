"""Undoing one rollback-journal entry: one function per action, each reverting a change only
if the object is still as this run left it (same UID, same state), else saying why it left it
alone. Split from ``journal`` (which records and replays) because undo is where the journal
meets the live API."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pathways_chaos.faults.jobset import JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL
from pathways_chaos.faults.safety import (
    CORDONED_BY_ANNOTATION,
    RECREATED_BY_ANNOTATION,
    RETRY_READS,
    call_with_retries,
    write_confirmed,
)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

#: Actions whose change a replay reverts. Pod deletions and evictions are recorded too (so the
#: journal is a full account), but only a controller (the Pod's Job) brings a Pod back.
REVERSIBLE_ACTIONS = frozenset({"cordon", "taint", "delete_job"})
IRREVERSIBLE_ACTIONS = frozenset({"delete_pod", "evict_pod"})
#: How long an undo waits for a Job still terminating (a finalizer) before giving up.
TERMINATING_JOB_WAIT_S = 30.0


class _LeftAlone(Exception):
    """An undo found the object in a state this run did not leave: say why, change nothing."""


def undo_entry(api_client: ApiClient, entry: dict[str, Any], *, dry_run: bool = False) -> str:
    """Reverts one journal entry if (and only if) its change is still as this run left it."""
    action = entry["action"]
    undo: dict[str, Callable[[ApiClient, dict[str, Any], bool], str]] = {
        "cordon": _undo_cordon,
        "taint": _undo_taint,
        "delete_job": _undo_delete_job,
    }
    if action in undo:
        try:
            return undo[action](api_client, entry, dry_run)
        except _LeftAlone as why:
            return str(why)
    if action in IRREVERSIBLE_ACTIONS:
        where = f"{entry['namespace']}/{entry['name']}"
        owner = entry.get("owner")
        if owner:
            return f"{action} {where}: nothing to undo (its {owner} recreates the Pod)"
        if "owner" in entry:
            return f"{action} {where}: nothing to undo, and nothing recreates it (no controller)"
        return f"{action} {where}: nothing to undo (its controller recreates the Pod)"
    raise ValueError(f"unknown journal action {action!r}")


def _core(api_client: ApiClient) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


def _read_node(api_client: ApiClient, name: str, uid: str | None, what: str) -> Any:
    """The Node we changed, or ``_LeftAlone`` when it is gone or replaced by a namesake."""
    from kubernetes.client.rest import ApiException

    try:
        node = call_with_retries(lambda: _core(api_client).read_node(name), retry_on=RETRY_READS)
    except ApiException as error:
        if error.status == 404:
            raise _LeftAlone(f"{what}: node gone, nothing to undo") from None
        raise
    if uid and node.metadata.uid != uid:
        raise _LeftAlone(f"{what}: node replaced (another uid), not the one we changed; left alone")
    return node


def field_owners(obj: Any, path: tuple[str, ...]) -> list[str] | None:
    """The field managers whose managedFields entry holds ``path`` (e.g. spec.unschedulable).

    None when the server keeps no managedFields (then only the annotation can tell).
    """
    entries = getattr(obj.metadata, "managed_fields", None)
    if not entries:
        return None
    owners = []
    for entry in entries:
        fields: Any = entry.fields_v1 or {}
        for part in path:
            fields = fields.get(f"f:{part}") if isinstance(fields, dict) else None
        if fields is not None:
            owners.append(entry.manager)
    return owners


def _undo_cordon(api_client: ApiClient, entry: dict[str, Any], dry_run: bool) -> str:
    name, run = entry["node"], entry["run"]
    what = f"uncordon node {name}"
    manager = entry.get("manager")

    def check(node: Any) -> None:
        marker = (node.metadata.annotations or {}).get(CORDONED_BY_ANNOTATION)
        if marker != run or not node.spec.unschedulable:
            state = "cordoned by someone else" if node.spec.unschedulable else "not cordoned"
            raise _LeftAlone(f"{what}: {state} (not this run's cordon), left alone")
        owners = field_owners(node, ("spec", "unschedulable"))
        if manager and owners is not None and manager not in owners:
            raise _LeftAlone(
                f"{what}: cordoned again since by {', '.join(owners) or 'another writer'} "
                "(not this run's cordon), left alone"
            )

    node = _read_node(api_client, name, entry.get("uid"), what)
    check(node)
    if dry_run:
        return f"DRY RUN: would uncordon node {name}"

    def write() -> str:
        current = _read_node(api_client, name, entry.get("uid"), what)
        check(current)
        body = {
            "metadata": {
                "resourceVersion": current.metadata.resource_version,
                "annotations": {CORDONED_BY_ANNOTATION: None},
            },
            "spec": {"unschedulable": None},
        }
        _core(api_client).patch_node(name, body, field_manager=manager or None)
        return f"uncordoned node {name}"

    def confirm() -> str | None:
        current = _read_node(api_client, name, entry.get("uid"), what)
        marker = (current.metadata.annotations or {}).get(CORDONED_BY_ANNOTATION)
        if marker != run:  # our patch removed the mark and the cordon together
            return f"uncordoned node {name} (confirmed by reading it back)"
        return None

    return write_confirmed(write, confirm)


def same_taint(taint: Any, wanted: dict[str, Any]) -> bool:
    """The exact taint we added: key, value, effect and our ``timeAdded`` stamp."""
    data = taint if isinstance(taint, dict) else _taint_dict(taint)
    return bool(
        data.get("key") == wanted["key"]
        and (data.get("value") or "") == (wanted.get("value") or "")
        and data.get("effect") == wanted["effect"]
        and _same_time(data.get("timeAdded"), wanted.get("timeAdded"))
    )


def _taint_dict(taint: Any) -> dict[str, Any]:
    added = taint.time_added
    return {
        "key": taint.key,
        "value": taint.value,
        "effect": taint.effect,
        "timeAdded": added.strftime("%Y-%m-%dT%H:%M:%SZ") if added else None,
    }


def _same_time(a: Any, b: Any) -> bool:
    return (a or None) == (b or None)


def _undo_taint(api_client: ApiClient, entry: dict[str, Any], dry_run: bool) -> str:
    name, taint = entry["node"], entry["taint"]
    shown = f"{taint['key']}={taint.get('value') or ''}:{taint['effect']}"
    what = f"untaint node {name} ({shown})"

    def ours(node: Any) -> bool:
        return any(same_taint(t, taint) for t in node.spec.taints or [])

    node = _read_node(api_client, name, entry.get("uid"), what)
    if not ours(node):
        namesake = any(
            t.key == taint["key"] and t.effect == taint["effect"] for t in node.spec.taints or []
        )
        if namesake:
            return f"{what}: the taint there now was set by someone else since, left alone"
        return f"{what}: taint not present, nothing to undo"
    if dry_run:
        return f"DRY RUN: would remove taint {shown} from node {name}"

    def write() -> str:
        current = _read_node(api_client, name, entry.get("uid"), what)
        kept = [t for t in current.spec.taints or [] if not same_taint(t, taint)]
        if len(kept) == len(current.spec.taints or []):
            return f"{what}: taint not present, nothing to undo"
        body = {
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"taints": [api_client.sanitize_for_serialization(t) for t in kept] or None},
        }
        _core(api_client).patch_node(name, body, field_manager=entry.get("manager") or None)
        return f"removed taint {shown} from node {name}"

    def confirm() -> str | None:
        current = _read_node(api_client, name, entry.get("uid"), what)
        return None if ours(current) else f"removed taint {shown} from node {name} (confirmed)"

    return write_confirmed(write, confirm)


def _undo_delete_job(api_client: ApiClient, entry: dict[str, Any], dry_run: bool) -> str:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    namespace, name, uid = entry["namespace"], entry["name"], entry.get("uid")
    batch: Any = client.BatchV1Api(api_client)
    mark = f"{entry['run']}#{entry['seq']}"
    what = f"recreate job {namespace}/{name}"

    def read() -> Any | None:
        try:
            return call_with_retries(
                lambda: batch.read_namespaced_job(name, namespace), retry_on=RETRY_READS
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def ours(job: Any) -> bool:
        return (job.metadata.annotations or {}).get(RECREATED_BY_ANNOTATION) == mark

    job = read()
    if job is not None and job.metadata.uid == uid:
        if job.metadata.deletion_timestamp is None:
            return f"{what}: the Job was never deleted, nothing to undo"
        if dry_run:
            return f"DRY RUN: would wait for job {namespace}/{name} to finish terminating"
        job = _wait_gone(read, uid, what)
    if job is not None:
        if ours(job):
            return f"recreated job {namespace}/{name} (already, by this rollback)"
        return f"{what}: a Job of that name exists (not ours), left alone"
    _check_live_jobset(api_client, entry["manifest"], namespace, what)
    if dry_run:
        return f"DRY RUN: would recreate job {namespace}/{name}"
    manifest = json.loads(json.dumps(entry["manifest"]))
    meta = manifest.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), RECREATED_BY_ANNOTATION: mark}

    def write() -> str:
        batch.create_namespaced_job(namespace, manifest)
        return f"recreated job {namespace}/{name}"

    def confirm() -> str | None:
        current = read()
        if current is None:
            return None
        if not ours(current):
            raise _LeftAlone(f"{what}: someone else created a Job of that name meanwhile")
        return f"recreated job {namespace}/{name} (confirmed by reading it back)"

    line = write_confirmed(write, confirm)
    created = read()
    if created is None or not ours(created):  # verified: a Job we made is there now
        raise RuntimeError(f"{what}: the create was answered but no Job of ours exists")
    return line


def _jobset_template(jobset: dict[str, Any], replicated: str | None) -> dict[str, Any] | None:
    for job in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(job, dict) and job.get("name") == replicated:
            template = ((job.get("template") or {}).get("spec") or {}).get("template")
            return template if isinstance(template, dict) else None
    return None


def _containers(pod_template: dict[str, Any] | None) -> list[tuple[Any, Any, Any]]:
    """What a recreated Job would run: each container's name, image and security context."""
    spec = (pod_template or {}).get("spec") or {}
    return [
        (c.get("name"), c.get("image"), c.get("securityContext") or None)
        for kind in ("initContainers", "containers")
        for c in spec.get(kind) or []
        if isinstance(c, dict)
    ]


def _check_live_jobset(
    api_client: ApiClient, manifest: dict[str, Any], namespace: str, what: str
) -> None:
    """A Job owned by a JobSet is recreated only from that live JobSet's own template.

    The JobSet must still exist with the UID the Job recorded, and the containers the manifest
    would run (names, images, security contexts) must be the ones its replicatedJob's template
    runs; otherwise ``_LeftAlone`` says why and nothing is created.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    meta = manifest.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == "JobSet"]
    if not refs:
        return
    ref = refs[0]
    group, _, version = str(ref.get("apiVersion", "jobset.x-k8s.io/v1alpha2")).partition("/")
    custom: Any = client.CustomObjectsApi(api_client)
    try:
        jobset = call_with_retries(
            lambda: custom.get_namespaced_custom_object(
                group, version, namespace, "jobsets", ref.get("name")
            ),
            retry_on=RETRY_READS,
        )
    except ApiException as error:
        if error.status == 404:
            raise _LeftAlone(f"{what}: its JobSet {ref.get('name')} is gone; left alone") from None
        raise
    if (jobset.get("metadata") or {}).get("uid") != ref.get("uid"):
        raise _LeftAlone(f"{what}: its JobSet {ref.get('name')} was replaced; left alone")
    replicated = (meta.get("labels") or {}).get(REPLICATED_JOB_LABEL)
    template = _jobset_template(jobset, replicated)
    recorded = ((manifest.get("spec") or {}).get("template")) or {}
    if template is None or _containers(template) != _containers(recorded):
        raise _LeftAlone(
            f"{what}: the recorded manifest is not JobSet {ref.get('name')}'s own template "
            f"for {replicated!r} (its containers differ); nothing created"
        )


def _wait_gone(read: Callable[[], Any | None], uid: str | None, what: str) -> Any | None:
    """Waits (bounded) until the Job with ``uid`` is gone; returns what holds the name then."""
    from pathways_chaos.faults.watching import wait_for

    seen: list[Any] = [None]

    def gone() -> bool:
        seen[0] = read()
        return seen[0] is None or seen[0].metadata.uid != uid

    try:
        wait_for(gone, TERMINATING_JOB_WAIT_S, interval=0.2, what=what)
    except TimeoutError:
        finalizers = ", ".join(seen[0].metadata.finalizers or []) or "none"
        raise RuntimeError(
            f"{what}: the deleted Job is still terminating after "
            f"{TERMINATING_JOB_WAIT_S:.0f} s (finalizers: {finalizers}); run rollback again"
        ) from None
    return seen[0]


def job_manifest_for_recreate(api_client: ApiClient, job: Any) -> dict[str, Any]:
    """The Job as a create body: server-set fields and the generated selector removed."""
    data: dict[str, Any] = api_client.sanitize_for_serialization(job)
    data.pop("status", None)
    meta = data.get("metadata", {})
    for key in (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
    ):
        meta.pop(key, None)
    generated = ("controller-uid", "job-name")
    for labels in (meta.get("labels"), data["spec"]["template"].get("metadata", {}).get("labels")):
        for key in generated:
            (labels or {}).pop(key, None)
    if not data["spec"].get("manualSelector"):
        data["spec"].pop("selector", None)
    return data


def scope_problem(entry: dict[str, Any], header: dict[str, Any] | None) -> str | None:
    """Why an entry's undo would reach outside what its run was allowed to touch, or None.

    Only ``delete_job`` creates anything on undo: its Job must be in a namespace the run was
    allowed (its header names them), carry its own namespace and name, and belong to the run's
    JobSet. Nodes are checked by UID and state in the undo itself; Pod entries undo nothing.
    """
    if entry["action"] != "delete_job":
        return None
    header = header or {}
    allowed = {str(n) for n in header.get("allowed_namespaces") or []}
    if isinstance(header.get("namespace"), str):
        allowed.add(header["namespace"])
    namespace, name, manifest = entry["namespace"], entry["name"], entry["manifest"]
    if namespace not in allowed:
        shown = ", ".join(sorted(allowed)) or "none"
        return (
            f"refused: namespace {namespace!r} is not one this run was allowed to touch "
            f"({shown}); nothing created"
        )
    meta: dict[str, Any] = (
        manifest["metadata"] if isinstance(manifest.get("metadata"), dict) else {}
    )
    if meta.get("namespace") not in (None, namespace) or meta.get("name") != name:
        return (
            f"refused: the recorded manifest is not Job {namespace}/{name}'s own; nothing created"
        )
    if manifest.get("kind", "Job") != "Job" or manifest.get("apiVersion", "batch/v1") != "batch/v1":
        return "refused: the recorded manifest is not a batch/v1 Job; nothing created"
    jobset = header.get("jobset")
    labels: dict[str, Any] = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
    if isinstance(jobset, str) and labels.get(JOBSET_NAME_LABEL) != jobset:
        return (
            f"refused: the recorded Job {namespace}/{name} is not a Job of JobSet {jobset!r}; "
            "nothing created"
        )
    return None
