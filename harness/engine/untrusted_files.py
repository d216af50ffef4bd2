"""Reading a file a user (or anyone) named, as untrusted input: checked before it is read.

Why one module: every reader of a user's file met the same surprises (a FIFO that blocks the
read forever, ``/dev/zero`` read whole into memory, a folder, a binary file decoded as text, a
YAML "billion laughs" document, a symlink out of the folder it was given in), and each answered
with a traceback or a hang. Here each is refused in one line that names the file and the fix.

Opening never blocks: ``O_NONBLOCK`` makes a FIFO's open return at once, and the type check
(``fstat`` on the open descriptor, so nothing can swap the file between the check and the read)
refuses it before any read.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError

#: Default read limit: far above any manifest, source file or journal the toolkit reads.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: A YAML document may expand (aliases followed) to at most this many nodes.
YAML_MAX_NODES = 100_000
#: How much of a user's value a message quotes.
SHOWN_CHARS = 80
#: A JSON value read from a file may nest at most this deep: far deeper than anything the
#: toolkit writes (an event log nests 4 deep), far shallower than Python's recursion limit.
JSON_MAX_DEPTH = 100


class UntrustedFileError(ChaosConfigError):
    """A file that is not what its reader needs (kind, size, encoding, place); exit 2."""


class UnreadableFile(ChaosConfigError):
    """A file or folder the current user may not read: an error, never "nothing there"."""


#: Characters that would break a one-line message (a newline) or a terminal (an escape).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A user's value for a message, cut to ``limit`` characters (a 120k value stays short).

    A path keeps its end (the file's name is what a person needs to find it): the middle goes.
    A newline or other control character is shown escaped (``a\\nb``): a message stays one line.
    """
    text = _CONTROL.sub(lambda m: repr(m[0])[1:-1], str(value))
    if len(text) <= limit:
        return text
    if isinstance(value, os.PathLike) or (text.startswith("/") and "\n" not in text):
        keep = limit - 5
        return f"{text[: keep // 3]}/.../{text[-(keep - keep // 3) :]}"
    return f"{text[:limit]}... ({len(text)} characters)"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISREG(mode):
        return "a file"
    return "not a regular file"


def open_regular(path: Path, *, what: str = "file", follow_symlinks: bool = True) -> int:
    """An open read-only descriptor of a regular file, or a one-line error; never blocks."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UntrustedFileError(f"{what} {shown(path)}: no such file") from None
    except IsADirectoryError:
        raise UntrustedFileError(f"{what} {shown(path)} is a folder: name a file") from None
    except NotADirectoryError:
        raise UntrustedFileError(
            f"{what} {shown(path)}: a part of the path is not a folder"
        ) from None
    except PermissionError:
        raise UnreadableFile(
            f"{what} {shown(path)} cannot be read (permission denied): fix its permissions"
        ) from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UntrustedFileError(
                f"{what} {shown(path)} is a symlink, refused: name the real file"
            ) from None
        raise UnreadableFile(
            f"{what} {shown(path)} cannot be read: {error.strerror or error}"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        suffix = "name a file" if stat.S_ISDIR(info.st_mode) else "name a regular file"
        raise UntrustedFileError(f"{what} {shown(path)} is {_kind(info.st_mode)}: {suffix}")
    os.set_blocking(fd, True)
    return fd


def read_fd(fd: int, path: Path, *, max_bytes: int, what: str) -> bytes:
    """Reads at most ``max_bytes`` from ``fd`` (closing it); more is refused, not truncated."""
    try:
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise UntrustedFileError(
                    f"{what} {shown(path)} is larger than {max_bytes} bytes, the most read: "
                    "name the right file"
                )
        return b"".join(chunks)
    except OSError as error:
        raise UnreadableFile(
            f"{what} {shown(path)} cannot be read: {error.strerror or error}"
        ) from None
    finally:
        os.close(fd)


def read_bytes(
    path: str | os.PathLike[str],
    *,
    what: str = "file",
    max_bytes: int = DEFAULT_MAX_BYTES,
    inside: Path | None = None,
    follow_symlinks: bool = True,
) -> bytes:
    """A regular file's bytes, size-limited; ``inside``: refused if it resolves out of it."""
    target = Path(path)
    if inside is not None:
        target = resolve_inside(inside, target, what=what)
    fd = open_regular(target, what=what, follow_symlinks=follow_symlinks)
    return read_fd(fd, target, max_bytes=max_bytes, what=what)


def decode_utf8(data: bytes, path: Path | str, *, what: str = "file") -> str:
    """UTF-8 text, or one line naming the first bad byte and its line."""
    return _decoded(data, "utf-8", path, what, "is it a binary file? save it as UTF-8")


def decode_python(data: bytes, path: Path | str, *, what: str = "file") -> str:
    """Python source as Python reads it: a UTF-8 BOM or a PEP 263 coding line honoured (a
    ``# -*- coding: latin-1 -*-`` file is valid Python), else UTF-8; one line when it cannot."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        said = f"{what} {shown(path)}: {error.msg}: fix its coding line"
        raise UntrustedFileError(said) from None
    if encoding in ("utf-8", "utf-8-sig"):
        return decode_utf8(data.removeprefix(b"\xef\xbb\xbf"), path, what=what)
    return _decoded(data, encoding, path, what, "its coding line says so: fix the line or the file")


def _decoded(data: bytes, encoding: str, path: Path | str, what: str, fix: str) -> str:
    """``data`` in ``encoding``, or one line naming the first bad byte, its line and ``fix``."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        name = "UTF-8" if encoding == "utf-8" else encoding
        raise UntrustedFileError(
            f"{what} {shown(path)} is not {name} text (byte 0x{data[error.start]:02x} on line "
            f"{line}): {fix}"
        ) from None


def read_text(
    path: str | os.PathLike[str],
    *,
    what: str = "file",
    max_bytes: int = DEFAULT_MAX_BYTES,
    inside: Path | None = None,
) -> str:
    """A regular, size-limited UTF-8 text file, or a one-line error naming it."""
    data = read_bytes(path, what=what, max_bytes=max_bytes, inside=inside)
    return decode_utf8(data, Path(path), what=what)


def load_json(
    text: str | bytes,
    source: Path | str,
    *,
    line: int | None = None,
    what: str = "file",
    fix: str = "give the file pathways-chaos wrote",
) -> Any:
    """``json.loads`` for text read from a file (or one ``line`` of it): every reader of a file
    it did not make goes through here.

    A value nested past ``JSON_MAX_DEPTH`` is refused in one line naming the file, the line
    and ``fix``: deeper than the recursion limit, ``json`` raises ``RecursionError`` (a
    traceback); just under it, whatever walks the value later would. Malformed text raises
    ``json.JSONDecodeError`` as ``json.loads`` does, for the caller to word.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(source, line, what, fix) from None
    if isinstance(text, bytes):  # counted in C: the walk below only for a text that may nest
        opened = text.count(b"[") + text.count(b"{")
    else:
        opened = text.count("[") + text.count("{")
    if opened > JSON_MAX_DEPTH and _deeper_than(value, JSON_MAX_DEPTH):
        raise _too_deep(source, line, what, fix)
    return value


def _too_deep(source: Path | str, line: int | None, what: str, fix: str) -> UntrustedFileError:
    where = f"{shown(source)}:{line}" if line is not None else shown(source)
    return UntrustedFileError(
        f"{what} {where} nests JSON deeper than {JSON_MAX_DEPTH} levels, so pathways-chaos did "
        f"not write it (a forged or damaged file?): {fix}"
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts deeper than ``limit``; walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def resolve_inside(folder: Path, name: str | os.PathLike[str], *, what: str = "file") -> Path:
    """``folder/name`` with every symlink resolved, refused when it leaves ``folder``."""
    base = Path(folder).resolve()
    target = (base / name).resolve()
    if target != base and base not in target.parents:
        raise UntrustedFileError(
            f"{what} {shown(name)} resolves to {shown(target)}, outside {shown(base)}: "
            "name a file inside that folder"
        )
    return target


def load_yaml_all(
    text: str, source: Path | str, *, what: str = "YAML file", max_nodes: int = YAML_MAX_NODES
) -> list[Any]:
    """Every document of a YAML text, safe types only, with alias expansion bounded.

    PyYAML's safe loader shares an aliased node instead of copying it, so a "billion laughs"
    document loads small and explodes later, in whatever walks it (a JSON dump, a comparison).
    The composed graph is measured first, as if every alias were copied, and refused above
    ``max_nodes``; a recursive alias is refused too.
    """
    import yaml

    loader = yaml.SafeLoader(text)
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            size = _expanded_size(node, {}, set(), max_nodes)
            if size > max_nodes:
                raise UntrustedFileError(
                    f"{what} {shown(source)} expands to more than {max_nodes} nodes through its "
                    "aliases (a 'billion laughs' document?): refused"
                )
            documents.append(loader.construct_document(node))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise UntrustedFileError(
            f"{what} {shown(source)}{line}: not valid YAML ({shown(problem)}): fix the file"
        ) from None
    except RecursionError:
        raise UntrustedFileError(
            f"{what} {shown(source)} nests too deeply to read: refused"
        ) from None
    finally:
        loader.dispose()
    return documents


def _expanded_size(node: Any, memo: dict[int, int], stack: set[int], limit: int) -> int:
    import yaml

    key = id(node)
    if key in memo:
        return memo[key]
    if key in stack:
        raise UntrustedFileError("a recursive YAML alias (a node that contains itself): refused")
    stack.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            size += _expanded_size(child, memo, stack, limit)
            if size > limit:
                break
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, memo, stack, limit) + _expanded_size(v, memo, stack, limit)
            if size > limit:
                break
    stack.discard(key)
    memo[key] = size
    return size


#: How every report pathways-chaos writes names its maker in its first bytes (the HTML pages'
#: title, the JSON reports' first key, the JUnit suite's name): the one sign that a file at a
#: report's path is ours to overwrite. The bare name is not: a source carrying the
#: ``# pathways-chaos: ignore`` mark, or a requirements file, has it.
#: An empty file at a report's path is written over only with a report's suffix (made by
#: ``touch`` or ``mkstemp`` for it); an empty ``__init__.py`` is not a report's place.
REPORT_SUFFIXES = frozenset({"", ".html", ".htm", ".json", ".xml"})
REPORT_MARKS = re.compile(
    rb'<title>pathways-chaos |\{\s*"made_by": "pathways-chaos |<testsuite name="pathways-chaos '
)


def check_output_file(path: str | os.PathLike[str], *, what: str = "output file") -> Path:
    """A path a report may be written to: not a folder, not a device or FIFO, not a symlink
    (one planted in a shared folder would have the report written over its target), and, when
    a file is there, one of our reports (``REPORT_MARKS`` in its first bytes): a mistyped
    ``--acceptance-report=src/train.py`` must not turn the user's source into HTML."""
    target = Path(path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        parent = target.parent
        if parent.exists() and not parent.is_dir():
            raise UntrustedFileError(
                f"{what} {shown(target)}: {shown(parent)} is not a folder"
            ) from None
        return target
    except NotADirectoryError:
        raise UntrustedFileError(
            f"{what} {shown(target)}: a part of the path is not a folder"
        ) from None
    except OSError as error:  # a name too long, permission denied...
        raise UntrustedFileError(f"{what} {shown(target)}: {error.strerror or error}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UntrustedFileError(
            f"{what} {shown(target)} is a symlink (to {shown(os.readlink(target))}), refused: "
            "name the real file"
        )
    if stat.S_ISDIR(info.st_mode):
        raise UntrustedFileError(
            f"{what} {shown(target)} is a folder: name a file, e.g. {shown(target)}/report.html"
        )
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedFileError(f"{what} {shown(target)} is {_kind(info.st_mode)}: name a file")
    if not info.st_size and target.suffix.lower() not in REPORT_SUFFIXES:
        raise UntrustedFileError(  # an empty __init__.py is a file too: HTML would break it
            f"{what} {shown(target)} exists and is not a report (a report is .html, .json or "
            ".xml): name another file (nothing was changed)"
        )
    if info.st_size:
        fd = open_regular(target, what=what, follow_symlinks=False)
        try:
            head = os.read(fd, 512)
        finally:
            os.close(fd)
        if not REPORT_MARKS.search(head):
            raise UntrustedFileError(
                f"{what} {shown(target)} exists and is not a report of pathways-chaos: name "
                "another file, or remove it first (nothing was changed)"
            )
    return target


def check_folder_target(path: str | os.PathLike[str], *, what: str = "folder") -> Path:
    """A folder to use or make: refused when it, or a folder above it, is a file or device."""
    target = Path(path)
    for place in (target, *target.parents):
        try:
            info = os.stat(place)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            continue  # a file further up: found when the loop reaches it
        except PermissionError:
            raise UnreadableFile(
                f"{what} {shown(target)}: {shown(place)} cannot be reached (permission denied)"
            ) from None
        except OSError as error:  # a name too long, a loop of symlinks...
            raise UntrustedFileError(
                f"{what} {shown(target)}: {error.strerror or error}: name another folder"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            where = "is" if place == target else f"is under {shown(place)}, which is"
            raise UntrustedFileError(
                f"{what} {shown(target)} {where} {_kind(info.st_mode)}, not a folder: name a folder"
            )
        return target
    return target


__all__ = [
    "DEFAULT_MAX_BYTES",
    "JSON_MAX_DEPTH",
    "UnreadableFile",
    "UntrustedFileError",
    "check_folder_target",
    "check_output_file",
    "decode_utf8",
    "load_json",
    "load_yaml_all",
    "open_regular",
    "read_bytes",
    "read_text",
    "resolve_inside",
    "shown",
]
