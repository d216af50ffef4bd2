"""Why a journal may be believed: who wrote it, where it lies, and that it is whole.

A rollback acts on what a journal says, so a journal is evidence to check, never an
instruction: a file planted by another user, a symlink to a file elsewhere, or a line edited to
name an admin's taint or another Node must be refused, not replayed. Three checks, all before a
line is acted on:

- the file: a regular file (not a symlink, FIFO or device), owned by the current user, no larger
  than ``MAX_JOURNAL_BYTES``, in a folder that no other user can write;
- the lines: each record carries ``mac``, an HMAC-SHA256 chained over the previous record's mac
  and the record itself, keyed by a secret kept in the user's state folder (0600). A line
  edited, inserted, removed or reordered, or a journal written without the key, fails it;
- the holder: the header names the process that writes it (host, boot id, pid and the pid's
  start time), so a live session's journal is left to it, a dead one's is rolled back, and a
  recycled pid (pid 1 after a reboot) is not mistaken for the writer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import Any

from pathways_chaos.faults.safety import ChaosRefused
from pathways_chaos.harness.engine.owned_paths import (
    RefusedPath,
    existing_folder,
    not_private,
    open_new,
)
from pathways_chaos.harness.engine.owned_processes import boot_id, process_start
from pathways_chaos.harness.engine.untrusted_files import shown
from pathways_chaos.harness.errors import ChaosError

KEY_FILE = "journal.key"
KEY_BYTES = 32
MAX_JOURNAL_BYTES = 64 * 1024 * 1024
STATE_DIR_ENV = "XDG_STATE_HOME"


class JournalRefused(ChaosRefused):
    """A journal that may not be believed (planted, edited, symlinked, in an open folder)."""


class JournalUnreadable(ChaosError):
    """A journal or journal folder the current user cannot read: exit 1, never "nothing to do"."""

    exit_code = 1


def state_dir() -> Path:
    """The user's pathways-chaos state folder (``$XDG_STATE_HOME/pathways-chaos``)."""
    base = os.environ.get(STATE_DIR_ENV) or str(Path.home() / ".local" / "state")
    return Path(base) / "pathways-chaos"


def journal_key(create: bool = True, folder: Path | None = None) -> bytes:
    """The user's journal key, made once (0600, in a 0700 folder); refused if others can see it."""
    folder = folder or state_dir()
    path = folder / KEY_FILE
    if create and not path.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            _create_key(folder, path)
        except (OSError, RefusedPath) as error:
            raise JournalUnreadable(
                f"cannot make the journal key {path}: {getattr(error, 'strerror', None) or error}: "
                f"set {STATE_DIR_ENV} to a folder you own"
            ) from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise JournalRefused(
            f"refused: there is no journal key at {path}, so no journal of yours can be "
            "checked: was it written on another machine or by another user?"
        ) from None
    except OSError as error:
        raise JournalRefused(
            f"refused: the journal key {path} cannot be opened ({error.strerror or error}); "
            "it must be a regular file of yours, not a symlink"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise JournalRefused(
                f"refused: the journal key {path} is not a regular file owned by you"
            )
        if info.st_mode & 0o077:
            raise JournalRefused(
                f"refused: the journal key {path} can be read by others "
                f"(mode {stat.S_IMODE(info.st_mode):o}): remove it, a new one is made"
            )
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise JournalRefused(f"refused: the journal key {path} is damaged (not {KEY_BYTES} bytes)")
    return key


def _create_key(folder: Path, path: Path) -> None:
    """Writes a fresh key under a temporary name and links it in: two racing makers agree."""
    temp = folder / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = open_new(temp, what="journal key", mode=0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)
    except FileExistsError:
        pass  # another process made it first: use theirs
    finally:
        temp.unlink(missing_ok=True)


def mac_of(key: bytes, previous: str, record: dict[str, Any]) -> str:
    """The chained MAC of one record (its ``mac`` field left out)."""
    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True)
    return hmac.new(key, f"{previous}\n{body}".encode(), hashlib.sha256).hexdigest()


def signed_line(key: bytes, previous: str, record: dict[str, Any]) -> tuple[bytes, str]:
    """The line to append for ``record`` and its MAC (the next record's ``previous``)."""
    mac = mac_of(key, previous, record)
    return (json.dumps({**record, "mac": mac}, sort_keys=True) + "\n").encode(), mac


def signed_journal(key: bytes, records: list[dict[str, Any]]) -> bytes:
    """A whole journal's text, each record signed in turn (what a run's appends produce)."""
    previous, out = "", b""
    for record in records:
        line, previous = signed_line(key, previous, record)
        out += line
    return out


def mac_ok(key: bytes, previous: str, record: dict[str, Any]) -> bool:
    given = record.get("mac")
    return isinstance(given, str) and hmac.compare_digest(given, mac_of(key, previous, record))


def check_folder(folder: Path, *, what: str = "journal folder") -> None:
    """Refuses a folder another user could write (plant or swap a journal in)."""
    info = existing_folder(folder, what=what, unreadable=JournalUnreadable)
    problem = None if info is None else not_private(info, root_may_own=True)
    if problem is None:
        return
    fix = f"chmod go-w {shown(folder)} or use" if "written" in problem else "use"
    raise JournalRefused(
        f"refused: {what} {shown(folder)} {problem}: anyone could plant a journal there; "
        f"{fix} a folder of your own (--journal-dir)"
    )


def check_journal_file(path: Path, info: os.stat_result) -> None:
    """The open journal's own checks: a regular file of the current user, size-limited."""
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        if stat.S_ISFIFO(info.st_mode):
            kind = "a FIFO (named pipe)"
        elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            kind = "a device"
        raise JournalRefused(f"refused: journal {path} is {kind}, not a journal file")
    if info.st_uid != os.geteuid():
        raise JournalRefused(
            f"refused: journal {path} belongs to uid {info.st_uid}, not you (uid "
            f"{os.geteuid()}): a journal is acted on only by the user who wrote it"
        )
    if info.st_size > MAX_JOURNAL_BYTES:
        raise JournalRefused(
            f"refused: journal {path} is {info.st_size} bytes, more than any run writes "
            f"({MAX_JOURNAL_BYTES}): not a journal of ours"
        )


# -- who holds a journal -------------------------------------------------------------------


def holder_of(pid: int | None = None) -> dict[str, Any]:
    """What identifies a journal's writer: host, boot id, pid and the pid's start time."""
    pid = os.getpid() if pid is None else pid
    return {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": pid,
        "pid_start": process_start(pid),
    }


def holder_state(header: dict[str, Any]) -> tuple[str, str]:
    """``("self" | "live" | "stale" | "unknown", why)`` for the process a header names."""
    pid = header.get("pid")
    host = header.get("host")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(host, str):
        return "stale", "its header names no writer"
    if host != socket.gethostname():
        return "unknown", f"written by pid {pid} on host {host}, not this host"
    recorded_boot = header.get("boot_id")
    if recorded_boot and boot_id() and recorded_boot != boot_id():
        return "stale", f"its writer pid {pid} ran before this host rebooted"
    if pid == os.getpid() and header.get("pid_start", process_start(pid)) == process_start(pid):
        return "self", "written by this process"
    start = process_start(pid)
    if not start:  # no such pid in /proc (or no /proc: then only a signal can tell)
        if Path("/proc/self").exists():
            return "stale", f"its writer pid {pid} has ended"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "stale", f"its writer pid {pid} has ended"
        except PermissionError:
            pass
        return "live", f"in use by pid {pid}"
    recorded_start = header.get("pid_start")
    if recorded_start and start and recorded_start != start:
        return "stale", f"its writer pid {pid} has ended (the pid now belongs to another process)"
    return "live", f"in use by pid {pid}"


__all__ = [
    "MAX_JOURNAL_BYTES",
    "JournalRefused",
    "JournalUnreadable",
    "check_folder",
    "check_journal_file",
    "holder_of",
    "holder_state",
    "journal_key",
    "mac_of",
    "mac_ok",
    "signed_journal",
    "signed_line",
    "state_dir",
]
