"""The README's main command prints no warning of ours (issue 33: a PytestAssertRewriteWarning
on every run, because a fixture module was imported before pytest could rewrite it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _collect(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``pytest`` entry point (``python -m pytest`` loads plugins in another order and did
    not show the warning), collecting only."""
    pytest = str(Path(sys.executable).with_name("pytest"))
    return subprocess.run(
        [pytest, *args, "--co", "-q", "-W", "error::pytest.PytestAssertRewriteWarning"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_collecting_the_chaos_suite_warns_nothing() -> None:
    done = _collect(ROOT, "suites/chaos", "-m", "chaos")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "40 tests collected" in done.stdout
    assert "Warning" not in done.stdout + done.stderr


def test_the_loop_search_from_another_folder_warns_nothing(tmp_path: Path) -> None:
    """A blind tester ran ``pytest /path/to/suites/properties --chaos-loop=...`` from a folder
    of its own: the suite's conftest imported the cluster fixtures plainly before the plugin
    activated, and pytest warned on every run."""
    loop = "--chaos-loop=pathways_chaos.harness.reference.user_loop:main"
    done = _collect(tmp_path, str(ROOT / "suites" / "properties"), loop, "-p", "no:randomly")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # the loop search's 4, the libraries' own properties deselected beside it
    collected = r"\b4/\d+ tests collected \(\d+ deselected\)"
    assert re.search(collected, done.stdout), done.stdout[-2000:]
    assert "Warning" not in done.stdout + done.stderr, done.stdout[-2000:]
