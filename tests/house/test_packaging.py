"""The card's folders install under one namespace, editable and as a wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_editable_install_imports_from_the_repo():
    import pathways_chaos.faults.model
    import pathways_chaos.fixtures.chaos
    import pathways_chaos.harness.pytest_plugin.plugin

    assert (
        Path(pathways_chaos.harness.pytest_plugin.plugin.__file__).parent
        == ROOT / "harness" / "pytest_plugin"
    )
    assert Path(pathways_chaos.faults.model.__file__).parent == ROOT / "faults"
    assert Path(pathways_chaos.fixtures.chaos.__file__).parent == ROOT / "fixtures"


def test_wheel_holds_the_namespace_and_the_entry_points(tmp_path, project_wheel):
    wheel = project_wheel
    names = zipfile.ZipFile(wheel).namelist()
    for module in (
        "harness/pytest_plugin/plugin.py",
        "harness/reference/trainer.py",
        "faults/model.py",
        "fixtures/chaos.py",
        "suites/chaos/test_elastic_recovery.py",
        "suites/acceptance/samples/pitfall_port/jobset.yaml",
    ):
        assert f"pathways_chaos/{module}" in names
    assert not any(n.startswith(("harness/", "fixtures/", "faults/", "suites/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "pathways_chaos = pathways_chaos.harness.pytest_plugin.plugin" in text
    assert "pathways-chaos = pathways_chaos.harness.cli.main:main" in text

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    code = "import pathways_chaos.harness.engine.topology as t; print(t.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip().startswith(str(target))


def test_every_package_folder_is_in_the_wheel():
    """A subpackage left out of pyproject's list imports in the repo and fails from a wheel."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        "pathways_chaos." + str(init.parent.relative_to(ROOT)).replace("/", ".")
        for top in ("harness", "faults", "fixtures", "suites")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
