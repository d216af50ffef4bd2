"""Control planes started at the same moment (one per pytest-xdist worker) never share a port.

``free_port`` asks the kernel for a free port and lets it go; another worker can bind it before
our etcd or apiserver does. The start then fails with "address already in use" and is retried
on new ports, instead of failing the worker's first Kubernetes test.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pathways_chaos.fixtures import control_plane
from pathways_chaos.fixtures.control_plane import LocalControlPlane, find_kube_binaries

pytestmark = pytest.mark.kube


def test_a_port_taken_before_the_apiserver_binds_it_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = find_kube_binaries()
    if bin_dir is None:
        pytest.fail(control_plane.missing_binaries_message(), pytrace=False)
    with socket.socket() as taken:  # what another worker's apiserver holds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([control_plane.free_port(), control_plane.free_port(), port])
        real = control_plane.free_port
        monkeypatch.setattr(control_plane, "free_port", lambda: next(picks, None) or real())
        with LocalControlPlane(
            bin_dir, tmp_path, controller_manager=False, scheduler=False
        ) as plane:
            assert plane.api_port != port
            assert all(p.alive() for p in plane.processes)
            assert [p.name for p in plane.processes] == ["etcd", "kube-apiserver"]
