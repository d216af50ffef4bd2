"""Fixtures of the ci/gke/ manifest tests: a namespace of their own on the local server."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from pathways_chaos.fixtures.control_plane import LocalControlPlane


@pytest.fixture
def gke_namespace(kube_control_plane: LocalControlPlane) -> Iterator[str]:
    """A fresh namespace (a dry run into a missing namespace is refused), deleted afterwards."""
    from kubernetes import client

    name = f"gke-manifests-{secrets.token_hex(3)}"
    api = kube_control_plane.api_client()
    core: Any = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)
        api.close()
