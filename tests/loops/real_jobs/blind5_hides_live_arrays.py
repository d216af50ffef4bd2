# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fifth session, second tester); paths made relative.
import importlib.util, sys, jax
from pathlib import Path

_p = (
    Path(__file__).parents[2]
    / "harness"
    / "judging"
    / "loop_catalogue"
    / "broken"
    / "attempt_history_kept.py"
)
sys.path.insert(0, str(_p.parents[1]))
_spec = importlib.util.spec_from_file_location("ahk", _p)
_m = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_m)
jax.live_arrays = lambda *a, **k: []  # hides the leak from anything that asks jax


def main(**kw):
    return _m.main(**kw)
