"""The CLI's demo and errors, and plugin hygiene (entry point, markers, options, light load)."""

from __future__ import annotations

import subprocess
import sys

pytest_plugins = ["pytester"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pathways_chaos.harness.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_prints_a_timeline_recoveries_and_waste(tmp_path):
    log = tmp_path / "demo.jsonl"
    out = _cli(
        "demo", "--steps", "30", "--schedule", "data_loss@step=12:slice=2", "--log", str(log)
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "FAULT data_loss@step=12:slice=2: slice 2 lost with DATA_LOSS" in text
    assert "mesh (3, 2) on slices [0, 1, 3]" in text
    assert "data_loss@step=12:slice=2: ready again after" in text
    assert "steps: 30 committed, 2 wasted" in text and "oracle: survived" in text
    again = _cli("check", str(log))
    assert again.returncode == 0 and "oracle: survived" in again.stdout


def test_bad_input_is_one_line_and_exit_2():
    out = _cli("demo", "--schedule", "data_loss@step=3:slcie=1")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "unknown parameter(s) slcie" in out.stderr
    out = _cli("demo", "--mode", "elastic")
    assert (
        out.returncode == 2
        and "unknown mode 'elastic': use one of pause_resume, resize" in out.stderr
    )
    out = _cli("demo", "--slices", "4", "--devices-per-slice", "0")
    assert out.returncode == 2 and "--devices-per-slice '0': use a whole number" in out.stderr


def test_plugin_imports_nothing_heavy():
    code = (
        "import sys, pathways_chaos.harness.pytest_plugin.plugin\n"
        "names = ('jax', 'orbax', 'grain', 'pathwaysutils', 'kubernetes')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plugin_is_an_entry_point_with_markers_and_an_option_group(pytester):
    from importlib.metadata import entry_points

    assert "pathways_chaos.harness.pytest_plugin.plugin" in {
        e.value for e in entry_points(group="pytest11")
    }
    markers = pytester.runpytest_subprocess("--markers").stdout.str()
    assert "@pytest.mark.chaos:" in markers and "@pytest.mark.kube:" in markers
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    assert "pathways-chaos: elastic training under failure" in help_text
    assert "--fake-slices" in help_text and "--chaos-arm" in help_text


def test_progress_line_shows_step_slices_and_fault_and_is_quiet_under_q(pytester):
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.chaos\n"
        "def test_episode(chaos):\n"
        "    chaos.run('data_loss@step=4:slice=1', final_step=12).verdict.raise_if_failed()\n"
    )
    loud = pytester.runpytest_subprocess("--chaos-progress=on", "--chaos-progress-every=5")
    loud.assert_outcomes(passed=1)
    loud.stdout.fnmatch_lines(
        ["[[]chaos[]] step 10 attempt 2 slices 0,2,3 last fault data_loss@step=4:slice=1"]
    )
    quiet = pytester.runpytest_subprocess("-q", "--chaos-progress=on")
    quiet.assert_outcomes(passed=1)
    assert "[chaos]" not in quiet.stdout.str()
