"""Bad input by generation for the pytest plugin: every option of its group (the acceptance
options too), found by walking the plugin's own ``pytest_addoption``, given hostile values.

Each case is a new ``pytest --co`` on a one-test file, as a person would type it: it must end
within its timeout, with exit 0 (the value was accepted) or 4 (pytest's usage error), a refusal
on ONE line of stderr naming the option (no argparse usage block, no traceback), and a decoy
tree outside the scratch folder exactly as it was. A value no number option may take (nan,
inf, a 400-digit count) must be refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.house.test_generated_bad_inputs import (
    HOSTILE,
    NEVER_A_NUMBER,
    _digest,
    _fill,
    _scratch,
    generated,
)

#: A NUL cannot reach a process's argv at all (exec refuses it): the rest of HOSTILE can.
TYPABLE = tuple(value for value in HOSTILE if "\x00" not in value)
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q"]
TINY_TEST = "def test_nothing():\n    pass\n"


def plugin_options() -> dict[str, object]:
    """Each option of the plugin's group and its argparse ``type`` (None: text)."""
    from _pytest.config.argparsing import Parser

    from pathways_chaos.harness.pytest_plugin.plugin import pytest_addoption

    parser = Parser(_ispytest=True)
    pytest_addoption(parser)
    found: dict[str, object] = {}
    for option in parser.getgroup("pathways-chaos").options:
        attrs = option.attrs()
        if attrs.get("nargs") == 0:  # a switch: no value to draw
            continue
        found[option.names()[-1]] = attrs.get("type")
    return found


#: Options that take numbers: their values are checked by option_values' one parser.
NUMERIC = {
    "--fake-slices",
    "--fake-devices-per-slice",
    "--chaos-progress-every",
    "--chaos-budget",
    "--chaos-lease-seconds",
    "--chaos-deadline",
    "--chaos-wall-deadline",
    "--acceptance-params",
}


def run_case(option: str, value: str) -> tuple[subprocess.CompletedProcess[str], str]:
    with _scratch() as places:
        scratch = Path(places["scratch"])
        (scratch / "test_tiny.py").write_text(TINY_TEST)
        decoy = _digest(Path(places["decoy"]))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PATHWAYS_CHAOS_")}
        env.update(
            PYTHONWARNINGS="ignore",
            XDG_STATE_HOME=str(scratch / "state"),
            PATHWAYS_CHAOS_JOURNAL_DIR=str(scratch / "journals"),
        )
        argv = [*PYTEST, "--co", "test_tiny.py", f"{option}={_fill(value, places)}"]
        try:
            out = subprocess.run(
                argv,
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=90,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{option}={value!r}: still running after 90 s")
        why = f"{option}={value!r} -> {out.returncode}\nstdout: {out.stdout[-1500:]}\n"
        why += f"stderr: {out.stderr[-1500:]}"
        assert _digest(Path(places["decoy"])) == decoy, why
        return out, why


@generated(int(os.environ.get("PATHWAYS_CHAOS_PLUGIN_CASES", "80")))
@given(data=st.data())
def test_generated_bad_plugin_values_are_one_usage_line(data: st.DataObject) -> None:
    option = data.draw(st.sampled_from(sorted(plugin_options())), label="option")
    value = data.draw(st.sampled_from(TYPABLE), label="value")
    out, why = run_case(option, value)
    assert out.returncode in (0, 4), why
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "INTERNALERROR" not in text, why
    if out.returncode == 4:
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and option in lines[0], why
    if option in NUMERIC and value in NEVER_A_NUMBER:
        assert out.returncode == 4, f"{why}\naccepted as a number"


def test_the_walk_finds_the_plugin_options_and_none_is_a_bare_int_or_float() -> None:
    """A bare ``type=int``/``float`` is pytest's usage block and takes nan or 400 digits."""
    found = plugin_options()
    assert set(found) >= NUMERIC
    assert {"--chaos-loop", "--chaos-log-dir", "--acceptance-report"} <= set(found)
    bare = [name for name, kind in found.items() if kind in (int, float)]
    assert not bare, bare
