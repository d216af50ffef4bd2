"""The rollback journal, mirrored on the cluster it changes: cleanup from anywhere.

Why: a session running inside the cluster (the suite in the head Pod) keeps its journal on the
Pod's disk. If the Pod dies in the middle of a fault, the journal dies with it, and the Nodes it
cordoned can only be found and uncordoned by hand. So an armed session also writes every record
of its journal, signed, into a ConfigMap beside the JobSet (``pathways-chaos-journal-<run>``),
before the change it records. The signing key is a Secret the cluster keeps
(``pathways-chaos-journal-key``, made by the first armed session in the namespace), not a file
on one machine: ``pathways-chaos rollback --cluster=... --namespace=... --jobset=...`` from any
machine whose kubeconfig may read it verifies each mirror's HMAC chain with that key, leaves a
session whose Lease is still live, and undoes the rest. A session that ends cleanly deletes its
mirror.

What is not trusted: a mirror whose chain does not verify (edited, planted, or signed with
another key) is refused whole; a record's undo is checked against the object as the undo of a
local journal is (UID, our annotation, managedFields); a mirror over ``MAX_MIRROR_BYTES`` is
refused rather than read.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pathways_chaos.faults.journal_trust import JournalRefused, signed_line
from pathways_chaos.harness.errors import ChaosError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from pathways_chaos.faults.journal import JournalContents

KEY_SECRET = "pathways-chaos-journal-key"
MIRROR_PREFIX = "pathways-chaos-journal-"
JOURNAL_LABEL = "pathways-chaos/journal"
JOBSET_LABEL = "pathways-chaos/jobset"
DATA_KEY = "journal.jsonl"
#: A ConfigMap holds at most 1 MiB; a session's journal is a few KB (one line per change).
MAX_MIRROR_BYTES = 900 * 1024
_CAS_TRIES = 20


class MirrorError(ChaosError):
    """The mirror could not be written: the change it would record is not made."""


def mirror_name(run_id: str) -> str:
    return f"{MIRROR_PREFIX}{run_id}".lower()[:253]


def _core(api_client: ApiClient) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


def cluster_key(api_client: ApiClient, namespace: str, *, create: bool) -> bytes | None:
    """The namespace's journal key (the Secret's 32 bytes); made once when ``create``."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = _core(api_client)
    for _ in range(2):
        try:
            secret = core.read_namespaced_secret(KEY_SECRET, namespace)
            key = base64.b64decode((secret.data or {}).get("key", ""))
            if len(key) < 32:
                raise JournalRefused(
                    f"refused: the Secret {namespace}/{KEY_SECRET} holds no 32-byte key: "
                    "delete it and let the next armed session make a new one"
                )
            return key
        except ApiException as error:
            if error.status != 404 or not create:
                if error.status == 404:
                    return None
                raise
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=KEY_SECRET, labels={JOURNAL_LABEL: "key"}),
            data={"key": base64.b64encode(secrets.token_bytes(32)).decode()},
        )
        try:
            core.create_namespaced_secret(namespace, body)
        except ApiException as error:
            if error.status != 409:  # 409: another session made it just now: read it
                raise
    raise MirrorError(f"the Secret {namespace}/{KEY_SECRET} could not be read back")


class JournalMirror:
    """Appends a session's journal records, signed with the cluster's key, to its ConfigMap."""

    def __init__(self, api_client: ApiClient, namespace: str, jobset: str, run_id: str) -> None:
        self.api_client, self.namespace, self.jobset = api_client, namespace, jobset
        self.name = mirror_name(run_id)
        self._key: bytes | None = None

    def append(self, record: dict[str, Any]) -> None:
        """Adds ``record`` as the next line (compare-and-swap on the ConfigMap's version, so
        the session and its episodes' children append in turn)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        if self._key is None:
            self._key = cluster_key(self.api_client, self.namespace, create=True)
        assert self._key is not None
        core = _core(self.api_client)
        for _ in range(_CAS_TRIES):
            try:
                current = core.read_namespaced_config_map(self.name, self.namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
                current = None
            raw = "" if current is None else str((current.data or {}).get(DATA_KEY, ""))
            line, _ = signed_line(self._key, _last_mac(raw), record)
            text = raw + line.decode()
            if len(text) > MAX_MIRROR_BYTES:
                raise MirrorError(
                    f"the journal's mirror {self.namespace}/{self.name} is full "
                    f"({len(raw)} bytes): roll back and start a new session"
                )
            labels = {JOURNAL_LABEL: "true", JOBSET_LABEL: self.jobset[:63]}
            meta = client.V1ObjectMeta(name=self.name, labels=labels)
            try:
                if current is None:
                    core.create_namespaced_config_map(
                        self.namespace, client.V1ConfigMap(metadata=meta, data={DATA_KEY: text})
                    )
                else:
                    meta.resource_version = current.metadata.resource_version
                    core.replace_namespaced_config_map(
                        self.name,
                        self.namespace,
                        client.V1ConfigMap(metadata=meta, data={DATA_KEY: text}),
                    )
                return
            except ApiException as error:
                if error.status != 409:  # 409: another writer appended first: read again
                    raise
        raise MirrorError(f"the journal's mirror {self.namespace}/{self.name} kept changing")

    def remove(self) -> None:
        """Deletes the mirror (the session undid everything it did)."""
        from kubernetes.client.rest import ApiException

        try:
            _core(self.api_client).delete_namespaced_config_map(self.name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise


def _last_mac(raw: str) -> str:
    for line in reversed(raw.splitlines()):
        if line.strip():
            try:
                return str(json.loads(line).get("mac", ""))
            except (ValueError, AttributeError):
                return ""
    return ""


@dataclasses.dataclass
class MirroredJournal:
    """One session's mirror, as read back and verified with the cluster's key."""

    name: str
    contents: JournalContents

    @property
    def run_id(self) -> str:
        return str((self.contents.header or {}).get("run") or "")


def read_mirrors(api_client: ApiClient, namespace: str, jobset: str) -> list[MirroredJournal]:
    """Every mirror of ``jobset``'s sessions in ``namespace``, verified; one that does not
    verify raises ``JournalRefused`` naming it (nothing of it may be acted on)."""
    from pathways_chaos.faults.journal import parse_journal

    selector = f"{JOURNAL_LABEL}=true,{JOBSET_LABEL}={jobset[:63]}"
    found = _core(api_client).list_namespaced_config_map(namespace, label_selector=selector)
    if not found.items:
        return []
    key = cluster_key(api_client, namespace, create=False)
    if key is None:
        raise JournalRefused(
            f"refused: {namespace} holds journal mirrors but no key ({KEY_SECRET}) to verify "
            "them: nothing was undone; read them (kubectl get configmap -l "
            f"{JOURNAL_LABEL}=true) and undo by hand what they name"
        )
    out = []
    for item in sorted(found.items, key=lambda i: i.metadata.name):
        raw = str((item.data or {}).get(DATA_KEY, ""))
        if len(raw) > MAX_MIRROR_BYTES:
            raise JournalRefused(f"refused: mirror {namespace}/{item.metadata.name} is too large")
        where = Path(f"configmap/{namespace}/{item.metadata.name}")
        contents, _ = parse_journal(raw.encode(), where, signing_key=key)
        out.append(MirroredJournal(item.metadata.name, contents))
    return out


def roll_back_mirror(
    api_client: ApiClient, namespace: str, jobset: str, found: MirroredJournal, *, dry_run: bool
) -> Any:
    """Undoes what ``found`` says its session left (a ``ReplayResult``); the undos are noted in
    the mirror, which goes once nothing is left to undo."""
    from pathways_chaos.faults.journal import ClusterIdentity, ReplayResult, undo_pending

    contents = found.contents
    result = ReplayResult(skipped=list(contents.problems))
    pending = contents.pending()
    header = contents.header
    if header is None:
        raise JournalRefused(
            f"refused: mirror {namespace}/{found.name} has no header naming its cluster: "
            "nothing of it was undone"
        )
    identity = ClusterIdentity.of(api_client)
    if header.get("cluster_uid") != identity.cluster_uid:
        raise JournalRefused(
            f"refused: mirror {namespace}/{found.name} was written for cluster "
            f"{header.get('cluster_uid')}, not this one ({identity.cluster_uid}): nothing undone"
        )
    mirror = JournalMirror(api_client, namespace, jobset, found.run_id)
    mirror.name = found.name
    undo_pending(api_client, contents, pending, result, mirror.append, dry_run=dry_run)
    if not dry_run and not result.errors:
        mirror.remove()
    return result
