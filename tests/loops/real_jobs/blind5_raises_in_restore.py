# ruff: noqa
# Written blind by a tester who did not read the toolkit's code (2026-12-06, fifth session, second tester); the sample-loop helper inlined.
import jax

from pathways_chaos.harness.reference import user_loop as _ul

_r = jax.device_put
_n = [0]


def _p(*a, **k):
    _n[0] += 1
    if _n[0] == 30:
        raise ValueError("mid")
    return _r(*a, **k)


jax.device_put = _p


def main(**kw):
    return _ul.main(**kw)
