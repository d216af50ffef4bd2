"""Hypothesis profiles for the property suites, chosen by --chaos-profile (default ci).

``ci`` is fast enough for every push, ``dev`` searches more, ``nightly`` runs thousands of
examples. The seed is printed in the header so any failure reproduces with --hypothesis-seed.

Every episode property is the loop search (test_loop_properties.py), over one subject: your
loop (``--chaos-loop``), or by default the reference trainer run as a loop
(``reference/trainer_loop.py``; ``--chaos-trainer`` names another trainer class for it), judged
by the one loop panel. Without ``--chaos-loop`` the properties of the libraries themselves
(snapshot round-trips over generated pytrees, the ElasticIterator across shard counts) run too,
through the trainer's sharding; with it they are left out. The loop search spends at most
``--chaos-budget`` seconds of episodes (120 under ci) and reports what it covered at the end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, Phase, settings

if TYPE_CHECKING:
    from pathways_chaos.harness.properties.loop import LoopSearch

PROFILES = {"ci": 25, "dev": 200, "nightly": 2000}
#: Seconds of episodes the loop search may spend per profile (``--chaos-budget`` overrides).
LOOP_BUDGETS: dict[str, float | None] = {"ci": 120.0, "dev": None, "nightly": None}
#: The loop search's test module: the only one run with --chaos-loop.
LOOP_MODULE = "test_loop_properties.py"
_SEARCH: pytest.StashKey[LoopSearch] = pytest.StashKey()
_TRAINER = pytest.StashKey[str]()  # the --chaos-trainer (the reference trainer by default)
_WORKER_STATS = "pathways_chaos_loop_search"

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
        core.global_force_seed = config.option.hypothesis_seed
    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.properties import enable_compilation_cache, trainer_under_test
    from pathways_chaos.harness.properties.loop import TRAINER_LOOP

    loop = config.getoption("chaos_loop", None)
    options: tuple[tuple[str, str], ...] = ()
    if loop:
        from pathways_chaos.harness.episodes.supervisor import check_loop

        problem = check_loop(str(loop))  # a bad spec: one line now (loaded in a child, never here)
        if problem is not None:
            raise pytest.UsageError(problem)
    else:  # our own loop: no probe child at every start-up, only the trainer it is given
        try:  # a bad --chaos-trainer: one line now, not one per test
            config.stash[_TRAINER] = trainer_under_test(config)
        except ChaosConfigError as error:
            raise pytest.UsageError(str(error)) from None
        loop = TRAINER_LOOP
        if config.getoption("chaos_trainer", None):
            options = (("trainer", config.stash[_TRAINER]),)
    _start_loop_search(config, str(loop), name, options)
    enable_compilation_cache()  # each mesh shape compiles once per session, not per example


def _start_loop_search(
    config: pytest.Config, loop: str, profile: str, options: tuple[tuple[str, str], ...]
) -> None:
    # Through pytest, which rewrites a plugin's asserts (imported plainly first, pytest warns
    # "Module already imported so cannot be rewritten" when the plugin activates).
    config.pluginmanager.import_plugin("pathways_chaos.fixtures.cluster")
    from pathways_chaos.fixtures.cluster import fake_topology
    from pathways_chaos.harness.properties.loop import LoopSearch, LoopTarget

    budget = config.getoption("chaos_budget", None)
    seed = config.getoption("hypothesis_seed", None)
    topology = fake_topology(config)
    shape = f"{topology.num_slices}x{topology.devices_per_slice}"
    config.stash[_SEARCH] = LoopSearch(
        LoopTarget(loop, options=options, topology=shape),
        profile=profile,
        budget_s=float(budget) if budget is not None else LOOP_BUDGETS[profile],
        seed=int(seed) if seed is not None else 0,
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--chaos-loop`` only the loop search runs here: the other properties test the
    libraries through the reference trainer's sharding, which a loop does not have."""
    if not config.getoption("chaos_loop", None):
        return
    here = Path(__file__).parent

    def dropped(item: pytest.Item) -> bool:
        path = Path(item.path)
        return path.is_relative_to(here) and path.name != LOOP_MODULE

    drop = [item for item in items if dropped(item)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not dropped(item)]


@pytest.fixture(scope="session")
def loop_search(pytestconfig: pytest.Config) -> LoopSearch:
    """The search over the loop (``--chaos-loop``, or the reference trainer as a loop): one
    fault-free run for the session."""
    return pytestconfig.stash[_SEARCH]


def pytest_sessionfinish(session: pytest.Session) -> None:
    search = session.config.stash.get(_SEARCH, None)
    workeroutput = getattr(session.config, "workeroutput", None)
    if search is not None and workeroutput is not None:  # an xdist worker: to the controller
        workeroutput[_WORKER_STATS] = search.stats.to_json()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist: a worker's figures join the controller's."""
    del error
    output = getattr(node, "workeroutput", {}).get(_WORKER_STATS)
    config = getattr(node, "config", None)
    search = config.stash.get(_SEARCH, None) if config is not None else None
    if output and search is not None:
        search.stats.merge(output)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """One line (and a JSON file) saying what the loop search covered, within what budget."""
    search = config.stash.get(_SEARCH, None)
    if search is None or hasattr(config, "workerinput"):
        return
    stats = search.stats
    if not stats.schedules and not stats.skipped_for_budget:
        return
    import json

    path = config.getoption("chaos_search_report", None)
    if path is None:
        log_dir = config.getoption("chaos_log_dir", None)
        cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        if log_dir:
            folder = Path(log_dir)
        elif cache is not None:
            folder = Path(str(cache.mkdir("pathways-chaos")))
        else:
            import tempfile

            folder = Path(tempfile.gettempdir()) / "pathways-chaos"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "loop-search.json"
    Path(path).write_text(json.dumps(stats.to_json(), indent=2) + "\n")
    write = terminalreporter.write_line
    write(stats.summary())
    write(f"pathways-chaos loop search figures: {path}")


def pytest_report_header(config: pytest.Config) -> str:
    name = _profile(config)
    search = config.stash.get(_SEARCH, None)
    if search is None:
        return f"pathways-chaos properties: hypothesis profile {name!r}"
    budget = search.budget_s
    spend = f"a budget of {budget:g} s of episodes" if budget else "no time budget"
    loop = config.getoption("chaos_loop", None)
    if loop:
        subject = f"{loop} (the properties of the libraries are left out"
        if config.getoption("chaos_trainer", None):
            subject += "; --chaos-trainer is not searched here: the suites search one subject"
        subject += ")"
    else:
        trainer = config.getoption("chaos_trainer", None) or "the reference trainer"
        subject = f"{trainer} as a loop ({search.target.spec})"
    return (
        f"pathways-chaos properties: the loop search on {subject}, hypothesis profile "
        f"{name!r}, seed {search.seed}, {spend}"
    )


@pytest.fixture(scope="session")
def chaos_trainer(pytestconfig: pytest.Config) -> str:
    """``--chaos-trainer MODULE:CLASS``: the trainer every episode property runs."""
    from pathways_chaos.harness.properties import REFERENCE_TRAINER

    return pytestconfig.stash.get(_TRAINER, REFERENCE_TRAINER)


@pytest.fixture(scope="session")
def max_devices() -> int:
    """CPU devices this process has (--fake-slices x --fake-devices-per-slice), read when a
    test asks, not when its module is imported."""
    from pathways_chaos.harness.properties import available_devices

    return available_devices()
