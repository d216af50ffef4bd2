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
