"""The rollback journal: every cluster change is written here, and fsynced, before it is made.

Why before: a run can die between any two lines (SIGKILL, OOM, a lost laptop lid). If the entry
is on disk first, ``pathways-chaos rollback JOURNAL`` can always undo what might have happened;
an entry whose change never happened undoes to a no-op, because every undo checks the Node or
Job it would touch first. Replaying twice changes nothing the second time.

Why it names its cluster and what each change set: a journal is replayed later, maybe by
someone else, maybe with another kubeconfig. The first line records the API server, the
cluster's identity (the ``kube-system`` namespace's UID, which no two clusters share) and the
run id, and a replay against any other cluster is refused. Each change records the object's UID
and what it set (a cordon under our field manager, a taint with its own ``timeAdded`` stamp, a
Job's manifest); an undo acts only while the object is still in the state this run left it, so
an admin's later cordon or GKE's identical maintenance taint is never removed.

File format: JSON lines. The header is ``{"journal": 2, "run": ..., "cluster_uid": ...}``; a
change is ``{"seq": N, "action": ..., ...}``; a replay appends ``{"undone": N, "result": ...}``.
A line that is not a JSON object is reported with its line number and skipped (it carries no
instruction). A torn last line (killed mid-write, no newline) is a change never started.

Why every record is signed: a journal is evidence, not an instruction. Each record carries a
chained HMAC under a key in the user's state folder, and the file must be the user's own regular
file in a folder nobody else can write (faults/journal_trust.py): a planted, edited or
symlinked journal is refused in one line, and nothing of it is undone. Undoing one entry
against the live API is faults/undo.py.
"""

# One piece (over 600 lines): writing, reading, replaying and finding journals all pass the same
# trust checks (file, folder, MAC chain, holder, scope), looked up here at call time; the attack
# tests switch them all off on this one module to prove each refusal is the checks' doing.
# Split, a check patched in one module would still run in another.

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import getpass
import json
import os
import signal
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pathways_chaos.faults.journal_trust import (
    MAX_JOURNAL_BYTES,
    JournalRefused,
    JournalUnreadable,
    check_folder,
    check_journal_file,
    holder_of,
    holder_state,
    journal_key,
    mac_ok,
    signed_line,
)
from pathways_chaos.faults.safety import (
    api_status,
    call_with_retries,
    field_manager,
)
from pathways_chaos.faults.undo import (
    IRREVERSIBLE_ACTIONS,
    REVERSIBLE_ACTIONS,
    scope_problem,
    undo_entry,
)
from pathways_chaos.harness.engine.untrusted_files import load_json
from pathways_chaos.harness.errors import ChaosError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

JOURNAL_SCHEMA = 2
#: The fields each action's entry must carry, and their types.
_REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "cordon": {"node": str, "uid": str},
    "taint": {"node": str, "uid": str, "taint": dict},
    "delete_job": {"namespace": str, "name": str, "uid": str, "manifest": dict},
    "delete_pod": {"namespace": str, "name": str},
    "evict_pod": {"namespace": str, "name": str},
}
JOURNAL_DIR_ENV = "PATHWAYS_CHAOS_JOURNAL_DIR"
#: The guard's rollback is tried again after these sleeps (an API outage of a few seconds).
ROLLBACK_RETRY_DELAYS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 2.0)


class JournalError(ChaosError):
    """A journal that cannot be read at all (a folder, a missing file); nothing was undone."""


class WrongCluster(ChaosError):
    """A journal replayed against a cluster it was not written for; nothing was undone."""

    exit_code = 3


def default_journal_dir() -> Path:
    """Where journals live unless told: ``$PATHWAYS_CHAOS_JOURNAL_DIR``, else the XDG state dir."""
    if os.environ.get(JOURNAL_DIR_ENV):
        return Path(os.environ[JOURNAL_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "pathways-chaos" / "journals"


def new_journal_path(directory: Path | None = None, run_id: str | None = None) -> Path:
    """A fresh journal file name in ``directory``: UTC start time and run id, sortable."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return (directory or default_journal_dir()) / f"{stamp}-{run_id or new_run_id()}.jsonl"


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class ClusterIdentity:
    """Which cluster a journal belongs to: the kube-system namespace's UID, and the server."""

    server: str
    cluster_uid: str

    @classmethod
    def of(cls, api_client: ApiClient) -> ClusterIdentity:
        from kubernetes import client

        core: Any = client.CoreV1Api(api_client)
        namespace = call_with_retries(lambda: core.read_namespace("kube-system"))
        return cls(str(api_client.configuration.host), str(namespace.metadata.uid))


@dataclass
class JournalContents:
    """A journal as read: its header, changes, what was undone, and the lines it skipped."""

    header: dict[str, Any] | None
    changes: list[dict[str, Any]]
    undone: set[int]
    problems: list[str]  # "line N: why", for every malformed line skipped
    notes: list[str]  # a torn last line: a change never started

    def pending(self) -> list[dict[str, Any]]:
        """Changes not yet undone, newest first (the order a replay undoes them)."""
        left = [c for c in self.changes if c["seq"] not in self.undone]
        return sorted(left, key=lambda c: c["seq"], reverse=True)


@dataclass
class ReplayResult:
    """What a replay did, one line per entry, the entries it could not undo, the lines skipped."""

    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.skipped


def read_journal(path: Path) -> JournalContents:
    """Reads a journal after checking it may be believed (see faults/journal_trust.py).

    A missing file is an empty journal. A folder is a usage error; a symlink, FIFO, device,
    another user's file, a file in a folder others can write, or a record whose chained MAC
    fails is refused (``JournalRefused``); an unreadable one is ``JournalUnreadable``.
    """
    raw = _read_checked(path)
    if raw is None:
        return JournalContents(None, [], set(), [], [])
    contents, _ = _parse_journal(raw, path)
    return contents


def _read_checked(path: Path) -> bytes | None:
    """The journal's bytes, read without following a symlink and without blocking."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except PermissionError:
        raise JournalUnreadable(
            f"journal {path} cannot be read (permission denied): its cordons and taints may "
            "still be in place; fix its permissions and run rollback again"
        ) from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise JournalRefused(
                f"refused: journal {path} is a symlink: a journal is acted on only as the "
                "regular file its run wrote"
            ) from None
        if error.errno == errno.ENOTDIR:
            raise JournalError(f"journal {path}: a part of the path is not a folder") from None
        raise JournalUnreadable(f"cannot read journal {path}: {error.strerror or error}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise JournalError(f"{path} is a folder, not a journal: name a .jsonl file")
        check_journal_file(path, info)
        check_folder(path.parent)
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, MAX_JOURNAL_BYTES + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_JOURNAL_BYTES:
                raise JournalRefused(f"refused: journal {path} grew past {MAX_JOURNAL_BYTES} bytes")
        return b"".join(chunks)
    except ChaosError:
        raise  # JournalRefused is a PermissionError too: never reworded as unreadable
    except OSError as error:
        raise JournalUnreadable(f"cannot read journal {path}: {error.strerror or error}") from None
    finally:
        os.close(fd)


def parse_journal(
    raw: bytes, path: Path, signing_key: bytes | None = None
) -> tuple[JournalContents, str]:
    """Parses and verifies every line (with ``signing_key``, else the user's journal key);
    returns the contents and the last record's MAC."""
    return _parse_journal(raw, path, signing_key)


def _parse_journal(
    raw: bytes, path: Path, signing_key: bytes | None = None
) -> tuple[JournalContents, str]:
    """Parses and verifies every line; returns the contents and the last record's MAC."""
    header: dict[str, Any] | None = None
    changes: list[dict[str, Any]] = []
    seqs: set[int] = set()
    undone: set[int] = set()
    problems: list[str] = []
    notes: list[str] = []
    lines = raw.split(b"\n")
    torn_tail = not raw.endswith(b"\n") and bool(raw)
    key: bytes | None = None
    previous = ""
    for number, blob in enumerate(lines, start=1):
        if not blob.strip():
            continue
        last = number == len(lines)
        why, record = _parse_line(blob, path, number)
        if why is not None:
            if last and torn_tail and why.startswith("not JSON"):
                notes.append(f"line {number}: torn last line (a change never started), ignored")
            else:
                problems.append(f"line {number}: {why}")
            continue
        assert isinstance(record, dict)
        key = key or signing_key or journal_key()
        if not mac_ok(key, previous, record):
            raise JournalRefused(
                f"refused: journal {path} line {number} is not as your pathways-chaos wrote it "
                "(edited, planted, or signed with another key): nothing in it was undone; "
                "read it and undo by hand what it names"
            )
        previous = str(record.get("mac", ""))
        record = {k: v for k, v in record.items() if k != "mac"}
        why = _check_record(record, seqs)
        if why is not None:
            problems.append(f"line {number}: {why}")
            continue
        if "journal" in record:
            header = record
        elif "undone" in record:
            undone.add(record["undone"])
        else:
            seqs.add(record["seq"])
            changes.append(record)
    return JournalContents(header, changes, undone, problems, notes), previous


#: What a message about a file that is no journal of ours says to do.
_JOURNAL_FIX = "give the journal a session wrote (rollback --pending finds them)"


def _parse_line(blob: bytes, path: Path, number: int) -> tuple[str | None, Any]:
    """Why line ``number`` is not a record, or its record; a line nested too deeply to read
    is refused in one line (``UntrustedFileError``, exit 2) by the shared JSON reader."""
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text", None
    try:
        record = load_json(text, path, line=number, what="journal", fix=_JOURNAL_FIX)
    except json.JSONDecodeError:
        return "not JSON (cut off or edited by hand)", None
    if not isinstance(record, dict):
        return f"not a journal record ({type(record).__name__} {text.strip()[:40]})", None
    return None, record


def _check_record(record: dict[str, Any], seqs: set[int]) -> str | None:
    """Why a parsed record is unusable, or None."""
    if "journal" in record:
        if not isinstance(record.get("cluster_uid"), str) or not isinstance(record.get("run"), str):
            return "a journal header without cluster_uid and run"
        return None
    if "undone" in record:
        return None if _is_int(record["undone"]) else "an undone record without an integer seq"
    seq = record.get("seq")
    if not _is_int(seq):
        return f"a record without an integer seq ({json.dumps(record)[:60]})"
    assert isinstance(seq, int)
    if seq in seqs:
        return f"change #{seq} appears twice"
    action = record.get("action")
    if action not in _REQUIRED:
        return f"change #{seq} has unknown action {action!r}"
    if not isinstance(record.get("run"), str):
        return f"change #{seq} ({action}) has no run id"
    for name, kind in _REQUIRED[action].items():
        if not isinstance(record.get(name), kind):
            return f"change #{seq} ({action}) has no valid {name!r}"
    if action == "taint" and not all(
        isinstance(record["taint"].get(k), str) for k in ("key", "effect")
    ):
        return f"change #{seq} (taint) has no taint key and effect"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class RollbackJournal:
    """Append-only JSONL journal of cluster changes, replayable after any crash."""

    def __init__(self, path: str | os.PathLike[str], run_id: str | None = None) -> None:
        self.path = Path(path)
        contents = read_journal(self.path)
        self._last_mac: str | None = None  # None: read the chain's end from the file
        self._size = -1
        header_run = (contents.header or {}).get("run")
        self.run_id: str = run_id or header_run or new_run_id()
        self.header = contents.header
        self._lock = threading.Lock()
        self._seq = max((c["seq"] for c in contents.changes), default=0)
        self._replayed = False
        #: Called right before each change is recorded (a Lease's ``check_held``): raising
        #: there stops the change before it is journalled or made.
        self.fence: Callable[[], None] | None = None
        #: The holder identity of the Lease behind ``fence``: another process writing this
        #: journal for the same session (an episode's child) checks that the Lease names it.
        self.lease_holder: str | None = None
        #: The changes this object recorded (another process may write the same journal).
        self.written_here: set[int] = set()
        #: A ``JournalMirror``: every record written here is also written on the cluster
        #: (``journal_mirror``), so a rollback from anywhere finds it if this file is lost.
        self.mirror: Any = None

    # -- writing ----------------------------------------------------------------------------

    def bind(self, api_client: ApiClient, **context: Any) -> ClusterIdentity:
        """Ties the journal to the cluster ``api_client`` talks to (writes the header once).

        A journal already bound to another cluster refuses: one journal, one cluster.
        """
        identity = ClusterIdentity.of(api_client)
        with self._lock:
            if self.header is not None:
                self._check_same_cluster(identity)
                return identity
            self.header = {
                "journal": JOURNAL_SCHEMA,
                "run": self.run_id,
                "server": identity.server,
                "cluster_uid": identity.cluster_uid,
                "created": time.time(),
                **holder_of(),
                "user": _user(),
                **context,
            }
            self._append(self.header)
        return identity

    @property
    def bound(self) -> bool:
        return self.header is not None

    @property
    def field_manager(self) -> str:
        return field_manager(self.run_id)

    def record(self, action: str, **details: Any) -> int:
        """Writes one change entry and fsyncs it; call this before making the change."""
        if action not in REVERSIBLE_ACTIONS | IRREVERSIBLE_ACTIONS:
            raise ValueError(f"unknown journal action {action!r}")
        if self.header is None:
            raise JournalError(
                f"journal {self.path} is not bound to a cluster: call bind(api_client) first"
            )
        if self.fence is not None:
            self.fence()
        with self._lock:
            entry = {
                "run": self.run_id,
                "time": time.time(),
                "action": action,
                "manager": self.field_manager,
                **details,
            }
            self._append(entry, numbered=True)
            self.written_here.add(self._seq)
            return self._seq

    def _append(self, entry: dict[str, Any], *, numbered: bool = False) -> None:
        """Appends one signed record and fsyncs it (file and folder checked, never followed).

        ``numbered``: a change, given the next ``seq`` under the file's lock, after whatever
        another writer of the same journal (an episode's child process) appended."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except (FileExistsError, NotADirectoryError):
            raise JournalError(
                f"cannot make the journal folder {folder}: a part of the path is a file; "
                "name a folder (--chaos-journal-dir or $PATHWAYS_CHAOS_JOURNAL_DIR)"
            ) from None
        except OSError as error:
            raise JournalUnreadable(
                f"cannot make the journal folder {folder}: {error.strerror or error}"
            ) from None
        check_folder(folder)
        new_file = not self.path.exists()
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise JournalRefused(
                    f"refused: journal {self.path} is a symlink; not written through"
                ) from None
            raise JournalUnreadable(
                f"cannot write journal {self.path}: {error.strerror or error}"
            ) from None
        try:
            check_journal_file(self.path, os.fstat(fd))
            os.set_blocking(fd, True)
            fcntl.flock(fd, fcntl.LOCK_EX)  # another writer (a rollback) appends whole lines too
            size = os.fstat(fd).st_size
            prefix = b""
            if size != self._size or self._last_mac is None:
                raw = os.pread(fd, size, 0)
                written, self._last_mac = _parse_journal(raw, self.path)
                self._seq = max([self._seq, *(c["seq"] for c in written.changes)])
                prefix = b"\n" if raw and not raw.endswith(b"\n") else b""  # after a torn line
            if numbered:
                self._seq += 1
                entry = {"seq": self._seq, **entry}
            line, mac = signed_line(journal_key(), self._last_mac, entry)
            os.write(fd, prefix + line)
            os.fsync(fd)
            self._last_mac, self._size = mac, size + len(prefix) + len(line)
            if self.mirror is not None:  # before the change, as the line above
                self.mirror.append(entry)
        finally:
            os.close(fd)
        if new_file:  # the directory entry must be durable too, or the file can vanish
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # -- reading ----------------------------------------------------------------------------

    def contents(self) -> JournalContents:
        return read_journal(self.path)

    def entries(self) -> list[dict[str, Any]]:
        """Every well-formed change entry, in the order written."""
        return self.contents().changes

    def pending(self) -> list[dict[str, Any]]:
        """Change entries not yet undone, newest first (the order a replay undoes them)."""
        return self.contents().pending()

    def _check_same_cluster(self, identity: ClusterIdentity) -> None:
        header = self.header or {}
        if header.get("cluster_uid") != identity.cluster_uid:
            raise WrongCluster(
                f"refused: journal {self.path} belongs to cluster {header.get('cluster_uid')} "
                f"at {header.get('server')}, but the kubeconfig points at cluster "
                f"{identity.cluster_uid} at {identity.server}: use that cluster's kubeconfig"
            )

    # -- replaying --------------------------------------------------------------------------

    def replay(
        self,
        api_client: ApiClient,
        *,
        seqs: set[int] | None = None,
        dry_run: bool = False,
        assume_cluster: bool = False,
    ) -> ReplayResult:
        """Undoes every pending entry (or only ``seqs``), newest first; safe to run again.

        Raises ``WrongCluster`` (and changes nothing) when ``api_client`` talks to another
        cluster than the one the journal was written for.
        """
        contents = self.contents()
        result = ReplayResult(skipped=list(contents.problems))
        pending = [e for e in contents.pending() if seqs is None or e["seq"] in seqs]
        if not pending:
            return result
        if contents.header is None:
            if not assume_cluster:
                raise WrongCluster(
                    f"refused: journal {self.path} does not say which cluster it belongs to "
                    "(its header is missing); pass --assume-cluster if you know it is this one"
                )
        else:
            self.header = contents.header
            self._check_same_cluster(ClusterIdentity.of(api_client))

        def note(record: dict[str, Any]) -> None:
            with self._lock:
                self._append(record)

        undo_pending(api_client, contents, pending, result, note, dry_run=dry_run)
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
                self.final_replay(api_client)
            finally:
                atexit.unregister(at_exit)
                restore_sigterm()

    def _drop_mirror(self) -> None:
        """Everything undone: the cluster's copy goes (a failure to delete it is only said;
        a later ``rollback --cluster`` finds nothing pending in it)."""
        if self.mirror is None or self.pending():
            return
        try:
            self.mirror.remove()
        except Exception as error:
            print(
                f"pathways-chaos: the journal's mirror stays: {short_error(error)}", file=sys.stderr
            )

    def final_replay(self, api_client: ApiClient) -> bool:
        """The guard's rollback: retried through an API outage, then one line saying what is left.

        Never raises for an unreachable cluster (a traceback at teardown helps nobody): after
        ``ROLLBACK_RETRY_DELAYS`` it prints the changes left and the command that finishes
        them, and returns False.
        """
        why = ""
        for delay in (*ROLLBACK_RETRY_DELAYS, None):
            try:
                result = self.replay(api_client)
            except WrongCluster:
                raise
            except Exception as error:  # the API unreachable, mid-replay or before it
                why = short_error(error)
            else:
                if not result.errors:
                    self._drop_mirror()
                    if result.skipped:
                        print(
                            f"pathways-chaos: rollback skipped lines of {self.path}: "
                            + "; ".join(result.skipped),
                            file=sys.stderr,
                        )
                    return True
                why = "; ".join(result.errors)
            if delay is not None:
                time.sleep(delay)
        left = [f"#{e['seq']} {_what(e)}" for e in self.pending()]
        print(
            f"pathways-chaos: rollback incomplete after {len(ROLLBACK_RETRY_DELAYS) + 1} tries "
            f"({why}): {len(left)} change(s) left ({', '.join(left)}); finish with "
            f"`pathways-chaos rollback {self.path}`",
            file=sys.stderr,
        )
        return False


def undo_pending(
    api_client: ApiClient,
    contents: JournalContents,
    pending: list[dict[str, Any]],
    result: ReplayResult,
    note_undone: Callable[[dict[str, Any]], None],
    *,
    dry_run: bool = False,
) -> None:
    """Undoes ``pending`` (newest first) within what the journal's header allowed; each undo
    is noted (``{"undone": seq, "result": ...}``) where the journal lives, file or mirror."""
    for entry in pending:
        refused = scope_problem(entry, contents.header)
        if refused is not None:
            result.errors.append(f"#{entry['seq']} {entry['action']}: {refused}")
            continue
        try:
            line = undo_entry(api_client, entry, dry_run=dry_run)
        except Exception as error:  # keep going: one failure must not strand the rest
            result.errors.append(f"#{entry['seq']} {entry['action']}: {short_error(error)}")
            continue
        result.lines.append(f"#{entry['seq']} {line}")
        if not dry_run:
            note_undone({"undone": entry["seq"], "result": line})


def _what(entry: dict[str, Any]) -> str:
    """A change in a few words, for the line that says what a rollback left."""
    action = entry["action"]
    if action in ("cordon", "taint"):
        return f"{action} node {entry['node']}"
    return f"{action} {entry.get('namespace')}/{entry.get('name')}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def short_error(error: BaseException) -> str:
    status = api_status(error)
    if status is not None:
        reason = getattr(error, "reason", "") or ""
        return f"HTTP {status} {reason}".strip()
    return str(error).splitlines()[0] if str(error) else type(error).__name__


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


@dataclass(frozen=True)
class FoundJournal:
    """A journal of the cluster in a folder, and what a rollback may do with it.

    ``state`` is ``"stale"`` (its writer has ended: roll it back), ``"live"`` (a session on
    this host holds it), ``"unknown"`` (written on another host: cannot tell) or ``"error"``
    (``error`` says why it cannot be believed or read).
    """

    path: Path
    state: str
    why: str = ""
    error: ChaosError | None = None


def scan_journal_folder(directory: Path) -> list[tuple[Path, JournalContents | ChaosError]]:
    """Every ``*.jsonl`` in ``directory``, read and checked (no cluster needed), or its error.

    A journal that cannot be read or believed comes with its error, never skipped in silence
    (its cordons may still be in place); FIFOs and devices are refused without blocking.
    """
    check_folder(directory)
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(".jsonl"))
    except PermissionError:
        raise JournalUnreadable(
            f"journal folder {directory} cannot be read (permission denied): its journals may "
            "still have changes to undo; fix its permissions"
        ) from None
    except OSError as error:
        raise JournalUnreadable(
            f"cannot read journal folder {directory}: {error.strerror or error}"
        ) from None
    scanned: list[tuple[Path, JournalContents | ChaosError]] = []
    for name in names:
        path = directory / name
        try:
            scanned.append((path, read_journal(path)))
        except ChaosError as error:
            scanned.append((path, error))
    return scanned


def pending_journals(
    directory: Path,
    identity: ClusterIdentity,
    scanned: list[tuple[Path, JournalContents | ChaosError]] | None = None,
) -> list[FoundJournal]:
    """Journals in ``directory`` of this cluster with changes left, and journals in error."""
    found = []
    for path, contents in scan_journal_folder(directory) if scanned is None else scanned:
        if isinstance(contents, ChaosError):
            found.append(FoundJournal(path, "error", str(contents), contents))
            continue
        header = contents.header or {}
        if header.get("cluster_uid") != identity.cluster_uid or not contents.pending():
            continue
        state, why = holder_state(header)
        found.append(FoundJournal(path, "stale" if state == "self" else state, why))
    return found


__all__ = [
    "ClusterIdentity",
    "FoundJournal",
    "JournalError",
    "JournalRefused",
    "JournalUnreadable",
    "ReplayResult",
    "RollbackJournal",
    "WrongCluster",
    "default_journal_dir",
    "new_journal_path",
    "pending_journals",
    "read_journal",
    "scan_journal_folder",
]
