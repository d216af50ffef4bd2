"""``demo --loop`` with the reference trainer's options: they never reached the loop (a blind
tester's ``--steps`` was silently dropped); now one line saying where a loop's options go."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "extra", [["--steps", "40"], ["--mode", "pause_resume"], ["--scale-up", "signal"]]
)
def test_a_trainer_option_with_a_loop_is_one_line(extra: list[str]) -> None:
    loop = "pathways_chaos.harness.reference.user_loop:main"
    code = (
        "import sys; from pathways_chaos.harness.cli.main import main; "
        f"rc = main(['demo', '--loop', {loop!r}, *{extra!r}]); "
        "sys.exit(10 if 'jax' in sys.modules else rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout, out.stderr)
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert f"{extra[0]} set the reference trainer" in out.stderr and "--option" in out.stderr
