"""Hypothesis profiles for the property suites, chosen by --chaos-profile (default ci).

``ci`` is fast enough for every push, ``dev`` searches more, ``nightly`` runs thousands of
examples. The seed is printed in the header so any failure reproduces with --hypothesis-seed.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

PROFILES = {"ci": 25, "dev": 200, "nightly": 2000}

for _name, _examples in PROFILES.items():
    settings.register_profile(
        _name,
        max_examples=_examples,
        deadline=None,  # an episode compiles on a new mesh; wall time is the bench's business
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=_name == "ci",  # CI is reproducible run to run; dev/nightly explore
        phases=tuple(Phase),
        print_blob=True,
        stateful_step_count=12,
    )


def _profile(config: pytest.Config) -> str:
    return str(config.getoption("chaos_profile") or os.environ.get("PATHWAYS_CHAOS_PROFILE", "ci"))


def pytest_configure(config: pytest.Config) -> None:
    name = _profile(config)
    if name not in PROFILES:
        raise pytest.UsageError(f"--chaos-profile {name!r}: use one of {', '.join(PROFILES)}")
    settings.load_profile(name)
    if name != "ci" and config.getoption("hypothesis_seed", None) is None:
        # One seed for the whole session, printed in the header: pass it back with
        # --hypothesis-seed to rerun exactly these examples.
        import random

        from hypothesis import core

        # Under pytest-xdist every worker draws from the run's shared id: one seed for all.
        run_id = getattr(config, "workerinput", {}).get("testrunuid")
        config.option.hypothesis_seed = int(run_id[:8], 16) if run_id else random.getrandbits(32)
        core.global_force_seed = config.option.hypothesis_seed  # type: ignore[attr-defined]
    from pathways_chaos.harness.properties import enable_compilation_cache

    enable_compilation_cache()  # each mesh shape compiles once per session, not per example


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed", None)
    name = _profile(config)
    how = (
        "derandomized: the same examples every run" if name == "ci" else f"--hypothesis-seed={seed}"
    )
    return f"pathways-chaos properties: hypothesis profile {name!r}, {how}"


@pytest.fixture(scope="session")
def max_devices() -> int:
    import jax

    return len(jax.devices("cpu"))
