"""The one loader of what a user names (a loop, an adapter, a trainer class): ``MODULE:NAME``,
``FILE.py:NAME`` or ``MODULE.NAME``. Callers only word their own errors.

A user's Python file is loaded as a module once per process, registered in ``sys.modules``
before it runs, under a name its resolved path makes unique: a dataclass or a pickled object in
it looks its module up there, and the same file loaded again is the same module. A module that
fails to run is removed again.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def load_name(spec: str, file_prefix: str = "pathways_chaos_user_") -> Any:
    """The object ``spec`` names; ``NAME`` may be dotted (``Class.attr``).

    Raises ``ValueError`` for a spec naming no module, else whatever importing the module (the
    user's code runs) or looking the name up raises.
    """
    target, sep, attr = spec.rpartition(":")
    if not sep:
        if "." not in spec:
            raise ValueError("no module")
        return pkgutil.resolve_name(spec)
    if not target or not attr:
        raise ValueError("no module or no name")
    if target.endswith(".py"):
        found: Any = import_file(Path(target), file_prefix)
    else:
        found = importlib.import_module(target)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


def import_file(path: Path, prefix: str) -> ModuleType:
    resolved = path.resolve()
    if not resolved.is_file():
        raise ImportError(f"{path} is not a file" if resolved.exists() else f"no such file {path}")
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
    name = f"{prefix}{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
