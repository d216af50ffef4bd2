"""A user's Python file (a loop, an adapter) loaded as a module, once per process.

Registered in ``sys.modules`` before it runs, under a name its resolved path makes unique: a
dataclass or a pickled object in it looks its module up there, and the same file loaded again is
the same module. A module that fails to run is removed again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: Path, prefix: str) -> ModuleType:
    resolved = path.resolve()
    if not resolved.is_file():
        raise ImportError(f"{path} is not a file")
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
