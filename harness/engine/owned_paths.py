"""Folders and files the project makes, told apart from everything it did not make.

A folder a command may later empty or delete carries the project's marker file, written when
the command made it; a folder without it (``--state-dir ~`` typed by mistake) is never deleted
or emptied. State folders are made 0700. Files are created with ``O_EXCL | O_NOFOLLOW`` (a
symlink planted where the file goes is refused, never written through) and replaced by an
atomic rename (which replaces a planted symlink, never follows it). A command never writes over
a file it reads in the same run. Every refusal is one line naming the path and the fix.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from pathways_chaos.harness.engine.untrusted_files import (
    UntrustedFileError,
    check_folder_target,
    shown,
)
from pathways_chaos.harness.errors import ChaosError

#: The file that says "pathways-chaos made this folder and may delete it".
MARKER = ".pathways-chaos-owned"
MARKER_TEXT = b"made by pathways-chaos; this folder is deleted by the command that made it\n"
#: Appending to a log: made if missing, never through a symlink, never blocking on a FIFO.
_APPEND = (
    os.O_WRONLY
    | os.O_APPEND
    | os.O_CREAT
    | os.O_NOFOLLOW
    | os.O_NONBLOCK
    | getattr(os, "O_CLOEXEC", 0)
)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class RefusedPath(UntrustedFileError):
    """A path the project did not make, or cannot write safely: nothing was changed; exit 2."""


def lstat_or_none(path: Path, what: str) -> os.stat_result | None:
    """``os.lstat(path)``; None when nothing is there; any other failure (a name too long, a
    part that is a file, no permission) is one line naming ``what``."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise RefusedPath(f"{what} {shown(path)}: a part of the path is not a folder") from None
    except OSError as error:  # a name too long, a loop of symlinks, permission denied...
        raise RefusedPath(f"{what} {shown(path)}: {error.strerror or error}") from None


def _check_not_symlink(
    path: Path, info: os.stat_result | None, what: str, noun: str = "folder"
) -> None:
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise RefusedPath(
            f"{what} {shown(path)} is a symlink (to {shown(os.readlink(path))}), refused: name "
            f"the real {noun}"
        )


def existing_folder(
    path: str | os.PathLike[str],
    *,
    what: str = "folder",
    unreadable: type[ChaosError] = RefusedPath,
) -> os.stat_result | None:
    """The folder at ``path`` (a symlink to a folder is followed), None when nothing is there.
    A file, or a path under a file, is refused (``RefusedPath``, exit 2); a folder that cannot
    be reached (no permission, a name too long) is ``unreadable``'s one line."""
    target = Path(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise RefusedPath(f"{what} {shown(target)}: a part of the path is not a folder") from None
    except PermissionError:
        raise unreadable(f"{what} {shown(target)} cannot be read (permission denied)") from None
    except OSError as error:
        raise unreadable(f"{what} {shown(target)}: {error.strerror or error}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise RefusedPath(f"{what} {shown(target)} is not a folder: name a folder")
    return info


def not_private(info: os.stat_result, *, root_may_own: bool = False) -> str | None:
    """Why a folder is not the current user's alone, so a file in it may have been planted: it
    belongs to another user (root too, unless ``root_may_own``), or others may write it."""
    owners = (os.geteuid(), 0) if root_may_own else (os.geteuid(),)
    if info.st_uid not in owners:
        return f"belongs to uid {info.st_uid}, not you"
    if info.st_mode & 0o022:
        return f"can be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def is_owned(path: Path) -> bool:
    """Whether ``path`` is a real folder of the current user holding our marker file."""
    info = lstat_or_none(path, "folder")
    if info is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    marker = lstat_or_none(path / MARKER, "folder")
    return marker is not None and stat.S_ISREG(marker.st_mode) and marker.st_uid == os.geteuid()


def check_real_folder(path: str | os.PathLike[str], *, what: str = "folder") -> Path:
    """A folder to write into that is what it says: not a symlink (to somewhere else), not a
    file, not under a file; it need not exist yet."""
    target = Path(path)
    check_folder_target(target, what=what)
    info = lstat_or_none(target, what)
    _check_not_symlink(target, info, what)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise RefusedPath(f"{what} {shown(target)} is not a folder: name a folder")
    return target


def check_owned(path: str | os.PathLike[str], *, what: str = "folder") -> bool:
    """False when ``path`` does not exist; True when it is a folder we made; else refused."""
    target = Path(path)
    check_folder_target(target, what=what)
    info = lstat_or_none(target, what)
    if info is None:
        return False
    _check_not_symlink(target, info, what)
    if not stat.S_ISDIR(info.st_mode):
        raise RefusedPath(f"{what} {shown(target)} is not a folder: name a folder")
    if not is_owned(target):
        raise RefusedPath(
            f"{what} {shown(target)} was not made by pathways-chaos (no {MARKER} marker "
            "file), so it is left as it is: name a new or empty folder"
        )
    return True


def make_owned_folder(path: str | os.PathLike[str], *, what: str = "folder") -> Path:
    """A folder of ours at ``path``: made 0700 with our marker, or an existing folder of ours
    (or an empty one, then marked); a folder holding anything else is refused."""
    target = Path(path)
    check_folder_target(target, what=what)
    info = lstat_or_none(target, what)
    _check_not_symlink(target, info, what)
    if info is None:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(target, 0o700)
        except OSError as error:
            raise RefusedPath(
                f"{what} {shown(target)} cannot be made: {error.strerror or error}"
            ) from None
    elif not stat.S_ISDIR(info.st_mode):
        raise RefusedPath(f"{what} {shown(target)} is not a folder: name a folder")
    elif is_owned(target):
        return target
    elif not_private(info) or any(target.iterdir()):
        raise RefusedPath(
            f"{what} {shown(target)} already holds files pathways-chaos did not make (no "
            f"{MARKER} marker), so it is left as it is: name a new or empty folder"
        )
    write_new(target / MARKER, MARKER_TEXT, what=what)
    return target


def remove_owned_folder(path: str | os.PathLike[str], *, what: str = "folder") -> bool:
    """Deletes a folder we made (checked first, never followed through a symlink); False when
    there was none; a folder we did not make is refused and left whole."""
    target = Path(path)
    if not check_owned(target, what=what):
        return False
    shutil.rmtree(target)  # fd-based on Linux: a symlink inside is removed, never followed
    return True


def renew_owned_folder(path: str | os.PathLike[str], *, what: str = "folder") -> Path:
    """A folder of ours at ``path``, empty but for our marker: one we made earlier (an earlier
    session's) is deleted first; a folder we did not make is refused and left whole."""
    remove_owned_folder(path, what=what)
    return make_owned_folder(path, what=what)


def write_new(path: Path, data: bytes, *, what: str = "file", mode: int = 0o600) -> None:
    """Creates ``path`` holding ``data``: refused when anything (a symlink too) is there."""
    fd = open_new(path, what=what, mode=mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def open_new(path: Path, *, what: str = "file", mode: int = 0o600) -> int:
    """A write descriptor of a file made now: never an existing file, never through a symlink."""
    try:
        return os.open(path, _NEW_FILE, mode)
    except FileExistsError:
        raise RefusedPath(
            f"{what} {shown(path)} appeared while it was being made (a planted file or "
            "symlink?): refused, nothing was written through it"
        ) from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise RefusedPath(f"{what} {shown(path)} is a symlink: refused") from None
        raise RefusedPath(f"{what} {shown(path)} cannot be written: {error.strerror}") from None


def open_append(path: Path, *, what: str = "file", mode: int = 0o644) -> int:
    """A descriptor appending to the regular file ``path`` (made when missing): a symlink
    there (planted in a shared folder) is refused, never written through, and a FIFO or
    device is refused without blocking."""
    try:
        fd = os.open(path, _APPEND, mode)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO nobody reads
            check_appendable(path, what=what)
        raise RefusedPath(f"{what} {shown(path)} cannot be written: {error.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _not_a_file(path, info, what)
    return fd


def check_appendable(path: Path, *, what: str = "file") -> Path:
    """What :func:`open_append` refuses, said before anything starts (nothing is made)."""
    info = lstat_or_none(path, what)
    if info is None:
        check_folder_target(path.parent, what=what)
        return path
    _check_not_symlink(path, info, what, noun="file")
    if not stat.S_ISREG(info.st_mode):
        raise _not_a_file(path, info, what)
    return path


def _not_a_file(path: Path, info: os.stat_result, what: str) -> RefusedPath:
    if stat.S_ISDIR(info.st_mode):
        return RefusedPath(f"{what} {shown(path)} is a folder: name a file in it")
    kind = "a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
    return RefusedPath(f"{what} {shown(path)} is {kind}: name a file")


def open_fresh(path: Path, *, what: str = "file", mode: int = 0o644) -> int:
    """``open(path, "w")`` that never writes through what is there: an old file or a planted
    symlink is unlinked (a symlink's target is untouched), then the file is made anew."""
    if _replaceable(path, what):
        path.unlink()
    return open_new(path, what=what, mode=mode)


def _replaceable(path: Path, what: str) -> bool:
    """Whether something is at ``path`` that a new file may replace: a regular file or a
    symlink (the link goes, its target stays). A folder, device, FIFO or socket is refused:
    renaming over ``/dev/zero`` as root would replace the device for every process."""
    info = lstat_or_none(path, what)
    if info is None:
        return False
    if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
        return True
    kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, FIFO or socket"
    raise RefusedPath(f"{what} {shown(path)} is {kind}, not a file: name a file")


def write_atomic(path: Path, data: bytes, *, what: str = "file", mode: int = 0o644) -> None:
    """Writes ``data`` under a new temporary name and renames it over ``path``: a reader sees
    the old or the new file, never half; a symlink at ``path`` is replaced, not followed."""
    _replaceable(path, what)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = open_new(temp, what=what, mode=mode)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def check_not_an_input(output: Path, inputs: Iterable[Path], *, what: str = "output file") -> None:
    """Refuses ``output`` when it is (by path or by inode) one of the command's own inputs."""
    try:
        out_info: os.stat_result | None = os.stat(output)
    except OSError:
        out_info = None
    resolved = output.resolve()
    for source in inputs:
        same = source.resolve() == resolved
        if not same and out_info is not None:
            try:
                info = os.stat(source)
            except OSError:
                continue
            same = (info.st_dev, info.st_ino) == (out_info.st_dev, out_info.st_ino)
        if same:
            raise RefusedPath(
                f"{what} {shown(output)} is one of this command's inputs ({shown(source)}): "
                "writing it would destroy it; name another file"
            )


__all__ = [
    "MARKER",
    "RefusedPath",
    "check_appendable",
    "check_not_an_input",
    "check_owned",
    "check_real_folder",
    "existing_folder",
    "is_owned",
    "lstat_or_none",
    "make_owned_folder",
    "not_private",
    "open_append",
    "open_fresh",
    "open_new",
    "remove_owned_folder",
    "renew_owned_folder",
    "write_atomic",
    "write_new",
]
