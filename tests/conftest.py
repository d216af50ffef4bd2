"""Fixtures the toolkit's own tests share (the repository's root conftest makes the devices)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel, once per test process (two tests read it)."""
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = folder.glob("pathways_chaos-*.whl")
    return wheel
