"""Hypothesis profiles for the property suites, chosen by --chaos-profile (default ci).

``ci`` is fast enough for every push, ``dev`` searches more, ``nightly`` runs thousands of
examples. The seed is printed in the header so any failure reproduces with --hypothesis-seed.
"""

from __future__ import annotations

import os
from pathlib import Path

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
        # ci reports a failure once shrunk; hypothesis's explain phase (which lines only
        # failing runs reached) replays the shrunk episode ~200 times, doubling the wait.
        phases=tuple(p for p in Phase if _name != "ci" or p is not Phase.explain),
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
    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.properties import (
        enable_compilation_cache,
        set_session_trainer,
        trainer_under_test,
    )

    if config.getoption("chaos_loop", None):
        return  # a user's loop: these suites test trainer classes, deselected below
    try:  # the stateful TestCase is built at import, from this choice
        set_session_trainer(trainer_under_test(config))
    except ChaosConfigError as error:
        raise pytest.UsageError(str(error)) from None
    enable_compilation_cache()  # each mesh shape compiles once per session, not per example


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--chaos-loop`` these suites are left out, and the header says so: they drive a
    trainer class through its seams, which a user's loop does not have."""
    if not config.getoption("chaos_loop", None):
        return
    here = Path(__file__).parent
    mine = [item for item in items if Path(item.path).is_relative_to(here)]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if not Path(item.path).is_relative_to(here)]


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("chaos_loop", None):
        return (
            "pathways-chaos properties: not run with --chaos-loop (they test trainer classes "
            "through --chaos-trainer; the chaos suite judges the loop)"
        )
    seed = config.getoption("hypothesis_seed", None)
    name = _profile(config)
    how = (
        "derandomized: the same examples every run" if name == "ci" else f"--hypothesis-seed={seed}"
    )
    trainer = config.getoption("chaos_trainer", None) or "the reference trainer"
    return f"pathways-chaos properties: hypothesis profile {name!r}, {how}; trainer {trainer}"


@pytest.fixture(scope="session")
def chaos_trainer(pytestconfig: pytest.Config) -> str:
    """``--chaos-trainer MODULE:CLASS``: the trainer every episode property runs."""
    del pytestconfig
    from pathways_chaos.harness.properties import session_trainer

    return session_trainer()


@pytest.fixture(scope="session")
def max_devices() -> int:
    import jax

    return len(jax.devices("cpu"))
