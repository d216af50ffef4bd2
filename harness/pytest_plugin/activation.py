"""When the plugin wakes up: only for a session that asks for something of ours.

People install pathways-chaos into the environment of their TPU tests. A session that uses none
of our options, markers, fixtures or suites must run exactly as without us: no JAX import, no
environment variable, no JAX setting. A session that does gets its fake CPU devices made before
the first test runs: at configure time when one of our options asks for them, otherwise right
after collection when a collected test asks for a fixture that needs them, is marked ``chaos``
or lives in our suites.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

#: Fixtures that run JAX on the fake cluster's CPU devices (test_plugin_hygiene.py checks
#: this against the fixtures the plugin's modules define).
DEVICE_FIXTURES = frozenset(
    {
        "chaos",
        "chaos_loop",
        "chaos_mtc",
        "cluster",
        "fake_cluster",
        "fake_cluster_factory",
        "kube_bridged_cluster",
        "loop_search",
        "max_devices",
    }
)
#: Options whose presence on the command line is a request for the fake cluster.
DEVICE_OPTIONS = (
    "fake_slices",
    "fake_devices_per_slice",
    "chaos_loop",
)
ACTIVE_KEY = pytest.StashKey[bool]()


def suites_dir() -> Path:
    import pathways_chaos.suites  # a package of docstrings only: cheap

    return Path(pathways_chaos.suites.__file__).parent


def options_ask_for_devices(config: pytest.Config) -> bool:
    return any(config.getoption(name, None) not in (None, False) for name in DEVICE_OPTIONS)


def items_ask_for_devices(items: Iterable[pytest.Item]) -> bool:
    ours = suites_dir()
    for item in items:
        if DEVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            return True
        if item.get_closest_marker("chaos") is not None:
            return True
        if Path(item.path).is_relative_to(ours):
            return True
    return False


def activate(config: pytest.Config) -> None:
    """Makes the fake cluster's CPU devices (or points JAX at the Pathways proxy), once."""
    if config.stash.get(ACTIVE_KEY, False):
        return
    config.stash[ACTIVE_KEY] = True
    from pathways_chaos.harness.errors import ChaosConfigError

    proxy = config.getoption("pathways_proxy", None)
    if proxy and config.getoption("cluster", None):
        # The JAX backend is the Pathways proxy: no CPU devices to make.
        os.environ.setdefault("JAX_PLATFORMS", "proxy")
        os.environ.setdefault("JAX_BACKEND_TARGET", proxy)
        return
    # Through pytest, which rewrites its asserts: imported plainly here (a conftest may
    # activate before the plugin's own configure), it would warn on every run.
    config.pluginmanager.import_plugin("pathways_chaos.fixtures.cluster")
    from pathways_chaos.fixtures.cluster import fake_topology
    from pathways_chaos.harness.engine import compilation_cache
    from pathways_chaos.harness.engine.topology import request_cpu_devices

    try:
        request_cpu_devices(fake_topology(config).device_count)
        compilation_cache.enable()  # every process of the run compiles a mesh's step once
    except ChaosConfigError as error:
        raise pytest.UsageError(f"pathways-chaos: {error}") from None


def is_active(config: pytest.Config) -> bool:
    return config.stash.get(ACTIVE_KEY, False)
