"""What "nothing changed on disk" means in the hostile-input tests: every path under a folder
with its kind, mode and content digest."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` (the root included) -> ``"<mode> <digest or link target>"``."""
    found: dict[str, str] = {}
    for path in sorted([root, *root.rglob("*")]):
        info = path.lstat()
        if path.is_symlink():
            body = os.readlink(path)
        elif path.is_file():
            body = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            body = ""
        found[str(path.relative_to(root))] = f"{info.st_mode:o} {body}"
    return found
