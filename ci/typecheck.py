"""Runs mypy over the package as it installs: ``pathways_chaos.*``, not the repository's folders.

pyproject's ``package-dir`` maps the top-level folders (harness/, faults/, ...) into
``pathways_chaos``; mypy knows nothing of that mapping, so run over the folders every
``pathways_chaos.*`` import was unresolved and, with ``ignore_missing_imports``, typed ``Any``.
This script lays out a typed view under build/typed/ (symlinks, so nothing is copied and an
edit is seen at once), points MYPYPATH at it, and maps the view's paths in mypy's report back to
the files a developer edits.

    python ci/typecheck.py                     # the whole package (what `tox -e type` runs)
    python ci/typecheck.py probe.py --cache-dir /tmp/x   # any mypy arguments; the view is found
    python ci/typecheck.py --view              # only lay out the view (pyproject's mypy_path)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pathways_chaos"


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """pyproject's ``package-dir``: installed package name -> folder in the repository."""
    with open(root / "pyproject.toml", "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in mapping.items()}


def build_view(root: Path = ROOT, view: Path | None = None) -> Path:
    """Lays out ``pathways_chaos`` as a wheel installs it, as symlinks; returns the folder to put
    on MYPYPATH. Rebuilt every call, so a mapping changed in pyproject is followed."""
    view = view or root / "build" / "typed"
    top = view / PACKAGE
    if top.is_symlink() or top.is_file():
        top.unlink()
    top.mkdir(parents=True, exist_ok=True)
    for entry in top.iterdir():  # what an earlier mapping left
        if entry.is_symlink():
            entry.unlink()
    for name, folder in package_dirs(root).items():
        if name == PACKAGE:  # the package's own files: __init__.py, py.typed
            for item in folder.iterdir():
                if item.is_file():
                    (top / item.name).symlink_to(os.path.relpath(item, top))
            continue
        parent, _, leaf = name.rpartition(".")
        if parent != PACKAGE:
            raise SystemExit(f"typecheck.py: package-dir entry {name!r} is not one level deep")
        (top / leaf).symlink_to(os.path.relpath(folder, top))
    return view


def to_repo_paths(text: str, view: Path, root: Path = ROOT) -> str:
    """The view's paths in mypy's report as the repository's (the view's
    pathways_chaos/harness/x.py is harness/x.py)."""
    for name, folder in sorted(package_dirs(root).items(), key=lambda kv: -len(kv[0])):
        inside = Path(*name.split("."))
        for form in (view / inside, (view / inside).relative_to(root, walk_up=True)):
            text = text.replace(f"{form}{os.sep}", f"{os.path.relpath(folder, root)}{os.sep}")
    return text


def run(
    args: list[str], root: Path = ROOT, view: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """mypy with ``args`` over the view (built at ``view``, default build/typed), from ``root``;
    with no file, package or module named in ``args``, the whole package."""
    view = build_view(root, view)
    env = {**os.environ, "MYPYPATH": str(view)}
    named = any(a.endswith(".py") or a in ("-p", "-m", "-c") for a in args)
    command = [sys.executable, "-m", "mypy", *args, *([] if named else ["-p", PACKAGE])]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)


def main() -> int:
    if sys.argv[1:] == ["--view"]:  # ci/bootstrap.sh: lay out the view plain mypy reads
        print(build_view())
        return 0
    done = run(sys.argv[1:])
    view = ROOT / "build" / "typed"
    sys.stdout.write(to_repo_paths(done.stdout, view))
    sys.stderr.write(to_repo_paths(done.stderr, view))
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
