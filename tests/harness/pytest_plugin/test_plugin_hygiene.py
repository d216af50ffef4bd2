"""Installed next to a team's TPU tests, the plugin changes nothing until a session uses it.

Each session here runs in a subprocess, in a folder outside this repository (so this repo's
root conftest, which always makes the devices for the toolkit's own tests, is not loaded).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
#: One test of each chaos suite module, run from the wheel (the rest are collected, not run).
ONE_TEST_PER_CHAOS_MODULE = {
    "test_elastic_recovery.py": "test_replica_resize_four_to_three_slices",
    "test_hard_faults.py": "test_slice_lost_during_a_snapshot_save",
    "test_multi_tier_checkpointing.py": "test_node_loss_restores_from_the_peer_copy",
    "test_user_loop.py": "test_slice_lost_during_a_save",
}
HEAVY = ("jax", "numpy", "orbax", "grain", "pathwaysutils", "kubernetes", "yaml")


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "PYTEST_"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *args,
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_session_that_asks_for_nothing_of_ours_is_untouched(tmp_path):
    (tmp_path / "test_plain.py").write_text(
        "import os, sys\n"
        "def test_untouched():\n"
        f"    heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "    assert heavy == [], heavy\n"
        "    assert 'JAX_PLATFORMS' not in os.environ\n"
        "    assert not any(k.startswith('PATHWAYS_CHAOS') for k in os.environ)\n"
        "def test_jax_settings_are_jaxs_own():\n"
        "    import jax\n"
        "    assert jax.config.jax_platforms is None\n"
        "    assert jax.config.jax_num_cpu_devices == -1\n"
        "    assert len(jax.devices('cpu')) == 1\n"
    )
    out = _pytest(tmp_path, "test_plain.py")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout


def test_a_test_that_asks_for_the_fake_cluster_gets_its_devices(tmp_path):
    (tmp_path / "test_uses_fake.py").write_text(
        "import jax\n"  # imported at collection, before the plugin wakes: still in time
        "def test_slices(fake_cluster):\n"
        "    assert len(jax.devices('cpu')) == 6\n"
        "    assert fake_cluster.topology.num_slices == 3\n"
    )
    env_args = ("--fake-slices=3", "--fake-devices-per-slice=2")
    out = _pytest(tmp_path, "test_uses_fake.py", *env_args)
    assert out.returncode == 0, out.stdout + out.stderr
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n"
        "@pytest.mark.chaos\n"
        "def test_marked():\n"
        "    import jax\n"
        "    assert len(jax.devices('cpu')) == 8\n"
    )
    out = _pytest(tmp_path, "test_marked.py")
    assert out.returncode == 0, out.stdout + out.stderr


def test_jax_started_too_early_is_one_line_saying_what_to_pass(tmp_path):
    (tmp_path / "test_early.py").write_text(
        "import jax\n"
        "jax.devices()\n"  # the backend starts at collection with one CPU device
        "def test_slices(fake_cluster):\n"
        "    pass\n"
    )
    out = _pytest(tmp_path, "test_early.py")
    assert out.returncode == 4, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "JAX already started with 1 CPU devices" in text
    assert "pass --fake-slices/--fake-devices-per-slice" in text
    assert "Traceback" not in text and "INTERNALERROR" not in text


def _fixture_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            "fixture" in ast.unparse(d) for d in node.decorator_list
        ):
            names.add(node.name)
    return names


def test_every_fixture_that_runs_jax_wakes_the_plugin():
    from pathways_chaos.harness.pytest_plugin.activation import DEVICE_FIXTURES

    # Kubernetes connections, and the name of the trainer under test: no JAX in them
    needs_no_devices = {
        "cluster_connection",
        "cluster_journal",
        "pathways_cluster",
        "chaos_trainer",
    }
    defined = _fixture_names(ROOT / "fixtures" / "cluster.py") | _fixture_names(
        ROOT / "fixtures" / "chaos.py"
    )
    defined |= _fixture_names(ROOT / "suites" / "properties" / "conftest.py")
    assert defined - needs_no_devices <= DEVICE_FIXTURES, defined - DEVICE_FIXTURES


def test_the_public_api_is_what_the_docs_document_and_imports_lazily():
    code = (
        "import sys, pathways_chaos as pc\n"
        "assert 'jax' not in sys.modules\n"
        "assert pc.__all__ == sorted(pc._EXPORTS), set(pc.__all__) ^ set(pc._EXPORTS)\n"
        "missing = [n for n in pc.__all__ if getattr(pc, n, None) is None]\n"
        "assert not missing, missing\n"
        "assert issubclass(pc.FaultSpecError, pc.ChaosError)\n"
        "assert issubclass(pc.ChaosConfigError, ValueError)\n"
        "print(' '.join(pc.__all__))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    api = (ROOT / "docs" / "reference" / "api.md").read_text()
    for name in out.stdout.split():
        assert f"::: pathways_chaos.{name}\n" in api, f"pc.{name} is exported but not documented"


def test_every_error_of_ours_has_the_one_base():
    import pathways_chaos as pc
    from pathways_chaos.faults import kubernetes, safety
    from pathways_chaos.fixtures import control_plane
    from pathways_chaos.harness import properties
    from pathways_chaos.harness.judging import data_checks, snapshot_checks
    from pathways_chaos.harness.judging import verdict as verdict_module

    for error in (
        kubernetes.TargetNotFound,
        safety.ChaosRefused,
        control_plane.ControlPlaneError,
        properties.PropertyFailure,
        data_checks.BatchShardingError,
        snapshot_checks.SnapshotShardingError,
        snapshot_checks.SnapshotLostError,
        verdict_module.OracleViolation,
    ):
        assert issubclass(error, pc.ChaosError), error


@pytest.mark.slow
def test_the_wheel_runs_the_chaos_suite_outside_the_repo(tmp_path, project_wheel):
    """A wheel, in a fresh venv outside the repo: `pytest --pyargs pathways_chaos.suites.chaos`.

    The wheel must collect the whole suite and run a test of each of its modules (each module's
    fixtures: the reference trainer's, the MTC runner's, the user loop's); every test of the
    suite runs from the source tree in the same CI run, so running all of them again from the
    wheel would test the same code twice.
    """
    modules = {p.name for p in (ROOT / "suites" / "chaos").glob("test_*.py")}
    assert set(ONE_TEST_PER_CHAOS_MODULE) == modules, "name a test of each chaos suite module"
    wheel = project_wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # The dependencies come from this environment's site-packages (a .pth line, so their own
    # .pth files, this repo's editable install among them, are not run); the project itself
    # only from the wheel.
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "deps.pth").write_text(deps + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    where = tmp_path / "elsewhere"
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "PYTEST_"))}
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import pathways_chaos.harness.pytest_plugin.plugin as p; print(p.__file__)",
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith(site), f"the plugin came from {out.stdout}, not the wheel"
    out = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "--pyargs",
            "pathways_chaos.suites.chaos",
            "-m",
            "chaos",
            "-k",
            " or ".join(ONE_TEST_PER_CHAOS_MODULE.values()),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    from_source = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "chaos", "suites/chaos"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    collected = int(re.search(r"(\d+)(?:/\d+)? tests? collected", from_source).group(1))
    ran = len(ONE_TEST_PER_CHAOS_MODULE)
    assert f"{ran} passed, {collected - ran} deselected" in out.stdout, out.stdout[-2000:]
