"""mypy sees ``pathways_chaos`` as it installs: a cross-module import is its type, never ``Any``.

pyproject's package-dir maps the top-level folders into ``pathways_chaos``; mypy run over the
folders resolved no ``pathways_chaos.*`` import, and ``ignore_missing_imports`` made each one
``Any``, so ``x: int = parse_schedule(3)`` passed. ci/typecheck.py gives mypy a view laid out as
installed; these tests run mypy on a small probe through it (``tox -e type`` checks the whole
package). The run's cache is kept per checkout, so only a first run pays for analysing JAX.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """\
from pathways_chaos import SliceTopology
from pathways_chaos.faults.model import parse_schedule
from pathways_chaos.fixtures.chaos import Chaos

reveal_type(SliceTopology)  # probe: class


def episode(chaos: Chaos) -> None:
    reveal_type(chaos.run("").verdict)  # probe: run-verdict
    reveal_type(chaos.run_loop().verdict)  # probe: loop-verdict


x: int = parse_schedule(3)  # probe: wrong-call

import pathways_chaos as pc

y: int = pc.SliceTopology  # probe: face-type
pc.paly("")  # probe: face-typo
"""


def _typecheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "ci" / "typecheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cache_dir(what: str = "cache") -> Path:
    """mypy's cache for the probe and the view it reads, one per checkout (two checkouts'
    sources differ; a view that stays put keeps the cache valid from run to run)."""
    base = Path(os.environ.get("PATHWAYS_CHAOS_CACHE", Path.home() / ".cache" / "pathways-chaos"))
    return base / "mypy-probe" / hashlib.sha256(str(ROOT).encode()).hexdigest()[:12] / what


def judge(report: str, probe: Path) -> dict[str, str]:
    """What the probe's marked lines got from mypy: the revealed type, or the errors on it."""
    marks = {
        n: m.group(1)
        for n, line in enumerate(probe.read_text().splitlines(), 1)
        if (m := re.search(r"# probe: (\S+)", line))
    }
    seen: dict[str, str] = {}
    for line in report.splitlines():
        m = re.match(rf"{re.escape(str(probe))}:(\d+): (note|error): (.*)", line)
        if m and int(m.group(1)) in marks:
            name = marks[int(m.group(1))]
            seen[name] = (seen.get(name, "") + " " + m.group(3)).strip()
    return seen


def problems(seen: dict[str, str]) -> list[str]:
    """Each way the probe shows mypy not following a cross-module import."""
    found = []
    want = {
        "class": "pathways_chaos.harness.engine.topology.SliceTopology",
        "run-verdict": '"pathways_chaos.harness.judging.verdict.Verdict"',
        "loop-verdict": '"pathways_chaos.harness.judging.verdict.Verdict"',
    }
    for name, text in want.items():
        got = seen.get(name, "(nothing)")
        if "Revealed type is" not in got or text not in got or '"Any"' in got:
            found.append(f"{name}: want a revealed {text}, got {got}")
    if "[assignment]" not in seen.get("wrong-call", ""):
        found.append(f"x: int = parse_schedule(3) passed: {seen.get('wrong-call', '(nothing)')}")
    # The face: its names are their types, and a name it does not export is an error (no
    # ``__getattr__ -> Any`` in a type checker's view of pathways_chaos/__init__.py).
    if "[assignment]" not in seen.get("face-type", ""):
        found.append(f"y: int = pc.SliceTopology passed: {seen.get('face-type', '(nothing)')}")
    if "[attr-defined]" not in seen.get("face-typo", ""):
        found.append(f"pc.paly passed: {seen.get('face-typo', '(nothing)')}")
    return found


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its text differs from run to run (a last comment line): mypy's incremental cache
    replays the report of a module whose text it has seen, under the path it saw it at, so
    an unchanged probe at a new temporary path was judged from a stale report."""
    import uuid

    path = tmp_path_factory.mktemp("types") / "probe.py"
    path.write_text(f"{PROBE}# run {uuid.uuid4().hex}\n")
    return path


def _mypy(probe: Path, *extra: str, view: Path | None = None) -> str:
    args = ["--cache-dir", str(_cache_dir()), "--no-warn-unused-configs", *extra, str(probe)]
    if view is not None:
        done = _typecheck().run(args, root=ROOT, view=view)
    else:  # the repository as it was: no view (a config without mypy_path), imports silenced
        bare = _cache_dir("bare-config")
        bare.mkdir(parents=True, exist_ok=True)
        (bare / "mypy.ini").write_text("[mypy]\npython_version = 3.12\n")
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(bare / "mypy.ini"), *args],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "MYPYPATH"},
            capture_output=True,
            text=True,
            check=False,
        )
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout + done.stderr


def test_cross_module_imports_are_their_types_through_the_installed_view(probe: Path) -> None:
    report = _mypy(probe, "--follow-imports", "silent", view=_cache_dir("view"))

    assert problems(judge(report, probe)) == [], report
    assert "import-not-found" not in report and "import-untyped" not in report, report


def test_plain_mypy_in_the_checkout_sees_the_package_as_installed(probe: Path) -> None:
    """No script: ``mypy file.py`` in the dev checkout, with pyproject's config, reads the view
    ci/bootstrap.sh laid out (``mypy_path``), as pyright and an IDE read ``extraPaths``."""
    assert (ROOT / "build" / "typed" / "pathways_chaos" / "harness").exists(), (
        "no build/typed view: run ci/bootstrap.sh (or python ci/typecheck.py --view)"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(_cache_dir("plain")), str(probe)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "MYPYPATH"},
        capture_output=True,
        text=True,
        check=False,
    )
    report = done.stdout + done.stderr
    assert "Traceback" not in report, report
    assert problems(judge(report, probe)) == [], report


def test_without_the_view_the_probe_sees_any(probe: Path) -> None:
    """The broken layout this guards against (mypy over the bare folders with
    ignore_missing_imports): the same probe must fail the same judge."""
    report = _mypy(probe, "--follow-imports", "silent", "--ignore-missing-imports")

    found = problems(judge(report, probe))
    assert any("class:" in p and '"Any"' in p for p in found), report
    assert any("parse_schedule(3) passed" in p for p in found), report


def test_the_view_maps_each_package_dir_entry(tmp_path: Path) -> None:
    typecheck = _typecheck()
    view = typecheck.build_view(ROOT, tmp_path / "view")

    mapping = typecheck.package_dirs(ROOT)
    assert set(mapping) >= {f"pathways_chaos.{n}" for n in ("harness", "faults", "fixtures")}
    for name, folder in mapping.items():
        if name != "pathways_chaos":
            assert (view / Path(*name.split("."))).resolve() == folder.resolve()
    assert (view / "pathways_chaos" / "__init__.py").resolve() == (
        ROOT / "pathways_chaos" / "__init__.py"
    )
    report = f"{view}/pathways_chaos/faults/model.py:3: error: x"
    assert typecheck.to_repo_paths(report, view, ROOT) == "faults/model.py:3: error: x"
