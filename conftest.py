"""Root conftest of the toolkit's own repository (not shipped).

The plugin itself loads through its pytest11 entry point and stays inert until a session asks
for something of ours. The toolkit's own tests call JAX directly, so here the fake cluster's
CPU devices are always made, before any test module is imported.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from pathways_chaos.harness.pytest_plugin import activation

    activation.activate(config)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` for this repository's suite: one worker more than the cores it may use.

    About a third of this suite's time is spent waiting (on pytest and CLI subprocesses, and
    on the local API server's controllers), so a worker per core leaves cores idle; measured on
    2 cores: 340 s with 2 workers, 298 s with 3. PYTEST_XDIST_AUTO_NUM_WORKERS still wins.
    """
    import os

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses != "auto":
        return None  # xdist's own answer
    return len(os.sched_getaffinity(0)) + 1
