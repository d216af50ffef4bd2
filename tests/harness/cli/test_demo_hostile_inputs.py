"""``pathways-chaos demo`` given an empty ``--loop``: refused in one line, exit 2, before JAX;
never the reference trainer run in its place and called "survived"."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("loop", ["", "   "])
def test_an_empty_loop_is_refused_not_replaced_by_the_reference_trainer(loop: str) -> None:
    code = (
        "import sys; from pathways_chaos.harness.cli.main import main; "
        f"rc = main(['demo', '--steps', '6', '--loop', {loop!r}]); "
        "sys.exit(10 if 'jax' in sys.modules else rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout, out.stderr)
    assert out.stderr.strip().count("\n") == 0 and "--loop is empty" in out.stderr, out.stderr
