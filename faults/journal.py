"""The rollback journal: every cluster change is written here, and fsynced, before it is made.

Why before: a run can die between any two lines (SIGKILL, OOM, a lost laptop lid). If the entry
is on disk first, ``pathways-chaos rollback JOURNAL`` can always undo what might have happened;
an entry whose change never happened undoes to a no-op, because every undo checks the Node or
Job it would touch first. Replaying twice changes nothing the second time.

File format: JSON lines. A change is ``{"seq": N, "action": ..., ...}``; a replay appends
``{"undone": N, "result": ...}``. A torn last line (killed mid-write) is ignored: its change
was never started.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pathways_chaos.faults.safety import CORDONED_BY_ANNOTATION, call_with_retries

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

#: Actions whose change a replay reverts. Pod deletions and evictions are recorded too (so the
#: journal is a full account), but their owner (the Job) recreates the Pod; there is no undo.
REVERSIBLE_ACTIONS = frozenset({"cordon", "taint", "delete_job"})
IRREVERSIBLE_ACTIONS = frozenset({"delete_pod", "evict_pod"})


@dataclass
class ReplayResult:
    """What a replay did, one line per entry, and the entries it could not undo."""

    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class RollbackJournal:
    """Append-only JSONL journal of cluster changes, replayable after any crash."""

    def __init__(self, path: str | os.PathLike[str], run_id: str | None = None) -> None:
        self.path = Path(path)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._seq = max((e["seq"] for e in self._read_changes()), default=0)
        self._replayed = False

    # -- writing ----------------------------------------------------------------------------

    def record(self, action: str, **details: Any) -> int:
        """Writes one change entry and fsyncs it; call this before making the change."""
        if action not in REVERSIBLE_ACTIONS | IRREVERSIBLE_ACTIONS:
            raise ValueError(f"unknown journal action {action!r}")
        with self._lock:
            self._seq += 1
            entry = {
                "seq": self._seq,
                "run": self.run_id,
                "time": time.time(),
                "action": action,
                **details,
            }
            self._append(entry)
            return self._seq

    def _append(self, entry: dict[str, Any]) -> None:
        new_file = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if new_file:  # the directory entry must be durable too, or the file can vanish
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # -- reading ----------------------------------------------------------------------------

    def _read_lines(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        records = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # torn write: that change was never started
        return records

    def _read_changes(self) -> list[dict[str, Any]]:
        return [r for r in self._read_lines() if "seq" in r]

    def entries(self) -> list[dict[str, Any]]:
        """Every change entry, in the order written."""
        return self._read_changes()

    def pending(self) -> list[dict[str, Any]]:
        """Change entries not yet undone, newest first (the order a replay undoes them)."""
        records = self._read_lines()
        undone = {r["undone"] for r in records if "undone" in r}
        changes = [r for r in records if "seq" in r and r["seq"] not in undone]
        return sorted(changes, key=lambda r: r["seq"], reverse=True)

    # -- replaying --------------------------------------------------------------------------

    def replay(
        self, api_client: ApiClient, *, seqs: set[int] | None = None, dry_run: bool = False
    ) -> ReplayResult:
        """Undoes every pending entry (or only ``seqs``), newest first; safe to run again."""
        result = ReplayResult()
        for entry in self.pending():
            if seqs is not None and entry["seq"] not in seqs:
                continue
            try:
                line = undo_entry(api_client, entry, dry_run=dry_run)
            except Exception as error:  # keep going: one failure must not strand the rest
                result.errors.append(f"#{entry['seq']} {entry['action']}: {error}")
                continue
            result.lines.append(f"#{entry['seq']} {line}")
            if not dry_run:
                with self._lock:
                    self._append({"undone": entry["seq"], "result": line})
        if seqs is None and not dry_run:
            self._replayed = True
        return result

    @contextlib.contextmanager
    def guard(self, api_client: ApiClient) -> Iterator[RollbackJournal]:
        """Replays the journal when the block ends, whatever ended it.

        Covers a failing test, KeyboardInterrupt and SIGTERM (turned into KeyboardInterrupt
        while the guard is active, if nobody else handles SIGTERM), and interpreter exit as a
        last resort. A SIGKILL cannot be caught: then ``pathways-chaos rollback`` replays it.
        """
        restore_sigterm = _sigterm_to_keyboard_interrupt()

        def at_exit() -> None:
            if not self._replayed and self.pending():
                self.replay(api_client)

        atexit.register(at_exit)
        try:
            yield self
        finally:
            try:
                result = self.replay(api_client)
                if result.errors:
                    print(
                        "pathways-chaos: rollback incomplete, run `pathways-chaos rollback "
                        f"{self.path}`: " + "; ".join(result.errors),
                        file=sys.stderr,
                    )
            finally:
                atexit.unregister(at_exit)
                restore_sigterm()


def _sigterm_to_keyboard_interrupt() -> Any:
    """Makes SIGTERM unwind like Ctrl-C (so teardown runs); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return lambda: None  # someone handles SIGTERM (e.g. a trainer's suspend path): keep it

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, on_sigterm)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, previous)

    return restore


# -- undo, one function per action --------------------------------------------------------


def undo_entry(api_client: ApiClient, entry: dict[str, Any], *, dry_run: bool = False) -> str:
    """Reverts one journal entry if (and only if) its change is still in place."""
    action = entry["action"]
    if action == "cordon":
        return _undo_cordon(api_client, entry, dry_run)
    if action == "taint":
        return _undo_taint(api_client, entry, dry_run)
    if action == "delete_job":
        return _undo_delete_job(api_client, entry, dry_run)
    if action in IRREVERSIBLE_ACTIONS:
        return (
            f"{action} {entry['namespace']}/{entry['name']}: nothing to undo "
            "(its Job recreates the Pod)"
        )
    raise ValueError(f"unknown journal action {action!r}")


def _read_node(api_client: ApiClient, name: str, uid: str | None) -> Any | None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api_client)
    try:
        node = call_with_retries(
            lambda: core.read_node(name), retry_on=frozenset({429, 500, 502, 503, 504})
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    if uid and node.metadata.uid != uid:
        return None  # a new Node with the same name is not the one we changed
    return node


def _undo_cordon(api_client: ApiClient, entry: dict[str, Any], dry_run: bool) -> str:
    from kubernetes import client

    name, run = entry["node"], entry["run"]
    node = _read_node(api_client, name, entry.get("uid"))
    if node is None:
        return f"uncordon node {name}: node gone, nothing to undo"
    marker = (node.metadata.annotations or {}).get(CORDONED_BY_ANNOTATION)
    if marker != run:
        state = "cordoned by someone else, left alone" if node.spec.unschedulable else "not ours"
        return f"uncordon node {name}: {state}"
    if dry_run:
        return f"DRY RUN: would uncordon node {name}"
    core = client.CoreV1Api(api_client)
    body = {
        "metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}},
        "spec": {"unschedulable": None},
    }
    call_with_retries(lambda: core.patch_node(name, body))
    return f"uncordoned node {name}"


def _undo_taint(api_client: ApiClient, entry: dict[str, Any], dry_run: bool) -> str:
    from kubernetes import client

    name, taint = entry["node"], entry["taint"]
    core = client.CoreV1Api(api_client)
    shown = f"{taint['key']}={taint.get('value') or ''}:{taint['effect']}"

    def remove() -> str:
        node = _read_node(api_client, name, entry.get("uid"))
        if node is None:
            return f"untaint node {name} ({shown}): node gone, nothing to undo"
        current = node.spec.taints or []
        kept = [t for t in current if not _same_taint(t, taint)]
        if len(kept) == len(current):
            return f"untaint node {name} ({shown}): taint not present, nothing to undo"
        if dry_run:
            return f"DRY RUN: would remove taint {shown} from node {name}"
        body = {
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": [api_client.sanitize_for_serialization(t) for t in kept] or None},
        }
        core.patch_node(name, body)  # 409 if the Node changed since we read it: retried
        return f"removed taint {shown} from node {name}"

    return call_with_retries(remove)


def _same_taint(taint: Any, wanted: dict[str, Any]) -> bool:
    return bool(
        taint.key == wanted["key"]
        and (taint.value or "") == (wanted.get("value") or "")
        and taint.effect == wanted["effect"]
    )


def _undo_delete_job(api_client: ApiClient, entry: dict[str, Any], dry_run: bool) -> str:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    namespace, name = entry["namespace"], entry["name"]
    batch = client.BatchV1Api(api_client)
    try:
        batch.read_namespaced_job(name, namespace)
        return f"recreate job {namespace}/{name}: a Job of that name exists, left alone"
    except ApiException as error:
        if error.status != 404:
            raise
    if dry_run:
        return f"DRY RUN: would recreate job {namespace}/{name}"

    def create() -> None:
        try:
            batch.create_namespaced_job(namespace, entry["manifest"])
        except ApiException as error:
            if error.status != 409:  # 409: created meanwhile (by us on a retry, or its owner)
                raise

    call_with_retries(create, retry_on=frozenset({429, 500, 502, 503, 504}))
    return f"recreated job {namespace}/{name}"


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
    ):
        meta.pop(key, None)
    generated = ("controller-uid", "job-name")
    for labels in (meta.get("labels"), data["spec"]["template"].get("metadata", {}).get("labels")):
        for key in generated:
            (labels or {}).pop(key, None)
    if not data["spec"].get("manualSelector"):
        data["spec"].pop("selector", None)
    return data


# -- the CLI command ------------------------------------------------------------------------


def rollback_main(argv: list[str]) -> int:
    """``pathways-chaos rollback JOURNAL``: undo what a crashed run left behind."""
    parser = argparse.ArgumentParser(
        prog="pathways-chaos rollback",
        description="Undo every change recorded in a rollback journal (safe to run twice).",
    )
    parser.add_argument("journal", help="path of the JSONL rollback journal")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube)")
    parser.add_argument("--context", help="kubeconfig context (default: its current context)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be undone, change nothing"
    )
    args = parser.parse_args(argv)
    path = Path(args.journal)
    if not path.exists():
        print(f"pathways-chaos rollback: no journal at {path}", file=sys.stderr)
        return 2
    from kubernetes import config

    api_client = config.new_client_from_config(
        config_file=args.kubeconfig, context=args.context, persist_config=False
    )
    journal = RollbackJournal(path)
    pending = journal.pending()
    if not pending:
        print(f"{path}: nothing to undo")
        return 0
    result = journal.replay(api_client, dry_run=args.dry_run)
    for line in result.lines:
        print(line)
    for error in result.errors:
        print(f"FAILED {error}", file=sys.stderr)
    return 0 if result.ok else 1
