"""JAX's persistent compilation cache for the processes of a test run, in a folder the user owns.

Each pytest process (an xdist worker, a CI rerun, the inner pytest of a toolkit test) compiles
the same few steps on the same few meshes; served from disk, a compile is a read. The folder:

1. ``PATHWAYS_CHAOS_XLA_CACHE`` when set (``off`` disables the cache);
2. otherwise ``$XDG_CACHE_HOME/pathways-chaos/xla`` (default ``~/.cache/pathways-chaos/xla``).

It is used only if this user owns it and nobody else may write to it (a shared executable
cache is a code-injection path); it is created with mode 0700. Nothing happens when the user
already configured JAX's cache (``JAX_COMPILATION_CACHE_DIR`` or ``jax_compilation_cache_dir``),
and nothing at all in a session that does not use the plugin: only ``activate`` calls ``enable``.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
from pathlib import Path

from pathways_chaos.harness.errors import ChaosConfigError

_logger = logging.getLogger(__name__)

ENV = "PATHWAYS_CHAOS_XLA_CACHE"
#: Compiles shorter than this are not written (the write costs more than a small CPU compile).
MIN_COMPILE_SECONDS = 0.05


def cache_dir() -> Path | None:
    """The folder to use, or None when the user turned the cache off."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("off", "0", "") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pathways-chaos" / "xla"


#: Kernel file systems: never a cache, whatever their modes say (root "owns" /proc).
_PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def check_safe(folder: Path) -> None:
    """Creates ``folder`` (0700) or refuses, in one line, one that cannot be this user's cache.

    Refused: another user could write executables into it; it is a file, or under one; it is
    in /proc, /sys or /dev; a file cannot be written there.
    """
    fix = f"set {ENV} to a folder you own, or to off"
    resolved = folder.resolve()
    if any(resolved == root or root in resolved.parents for root in _PSEUDO_ROOTS):
        raise ChaosConfigError(
            f"compilation cache {folder} is in a kernel file system ({resolved}): {fix}"
        )
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ChaosConfigError(
            f"compilation cache {folder} is a file (or under one), not a folder: {fix}"
        ) from None
    except OSError as error:
        raise ChaosConfigError(
            f"compilation cache {folder} cannot be made ({error.strerror or error}): {fix}"
        ) from None
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ChaosConfigError(
            f"compilation cache {folder} is not this user's alone (owner uid {info.st_uid}, "
            f"mode {stat.filemode(info.st_mode)}): chmod 700 it, or set {ENV} to a folder "
            "you own, or to off"
        )
    try:  # a folder JAX cannot write to fails every compile later, one warning each
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ChaosConfigError(
            f"compilation cache {folder} cannot be written ({error.strerror or error}): {fix}"
        ) from None


def enable() -> Path | None:
    """Points JAX's persistent cache at the folder; returns it, or None when left alone."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None  # the user's own choice
    if "jax" in sys.modules:
        import jax

        if jax.config.jax_compilation_cache_dir:
            return None
    folder = cache_dir()
    if folder is None:
        return None
    check_safe(folder)
    settings = {
        "jax_compilation_cache_dir": str(folder),
        "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    if "jax" in sys.modules:
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:  # read by JAX when it is imported, and by every process this one starts
        for name, value in settings.items():
            os.environ.setdefault(name.upper(), str(value))
    _logger.debug("JAX compilation cache: %s", folder)
    return folder
