"""How a user's loop travels to its episode's process: by name, never imported here, or
pickled by reference with the files of the modules the pickle names.

The parent (pytest, the CLI) imports a loop it was given as ``MODULE:FUNCTION`` never; a
callable the test already imported goes by reference, as ``pickle`` sends it, and the child
loads the modules it names from the same files when no ``sys.path`` entry finds them (a file
loaded as ``FILE.py:FUNCTION``, a test module under pytest's ``--import-mode=importlib``).
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

from pathways_chaos.harness.episodes.loop_episode import loop_name
from pathways_chaos.harness.errors import ChaosConfigError

#: Module names ``user_modules`` gives a file it loads (``FILE.py:NAME``).
FILE_MODULE_PREFIXES = ("pathways_chaos_loop_", "pathways_chaos_user_")


def file_modules(data: bytes) -> list[tuple[str, str]]:
    """The modules loaded from files (under made-up names) that pickled ``data`` names: the
    child loads each file under the same name before it unpickles."""
    out = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.startswith(FILE_MODULE_PREFIXES) and file and name.encode() in data:
            prefix = next(p for p in FILE_MODULE_PREFIXES if name.startswith(p))
            out.append((prefix, str(file)))
    return out


def named_modules(data: bytes) -> list[tuple[str, str]]:
    """The user's modules pickled ``data`` names, with their files, for a child whose
    ``sys.path`` may not find them (not the toolkit's, not installed, not ``__main__``)."""
    installed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    out = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if (
            file
            and name != "__main__"
            and not name.startswith(("pathways_chaos", *FILE_MODULE_PREFIXES))
            and not os.path.abspath(file).startswith(installed)
            and name.encode() in data
        ):
            out.append((name, str(file)))
    return out


def loop_reference(loop: Callable[..., Any] | str) -> tuple[str | None, bytes | None, str]:
    """The loop as the child will find it: a spec string (never imported here), or a callable
    pickled by reference (the test imported it already)."""
    if isinstance(loop, str):
        if not loop.strip():
            raise ChaosConfigError(
                "the loop is empty: write MODULE:FUNCTION, for example "
                "pathways_chaos.harness.reference.user_loop:main"
            )
        return loop, None, loop
    name = loop_name(loop)
    module = sys.modules.get(getattr(loop, "__module__", "") or "")
    qualname = getattr(loop, "__qualname__", "")
    file = getattr(module, "__file__", None)
    if module is not None and module.__name__.startswith(FILE_MODULE_PREFIXES) and file:
        # Loaded from a file (``FILE.py:FUNCTION``) under a made-up module name the child
        # would not find: the child loads the same file.
        return f"{file}:{qualname}", None, name
    try:
        data = pickle.dumps(loop)
    except Exception as error:
        raise ChaosConfigError(
            f"the loop {name} cannot be sent to the episode's process ({type(error).__name__}): "
            "pass a module-level function (or functools.partial of one), or 'MODULE:FUNCTION'"
        ) from None
    return None, data, name
