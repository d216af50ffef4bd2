"""The ``--cluster`` backend's slice health from the resource manager's reports: a worker's
connection open is its host up; the connection closed (its process died) is the slice down."""

from __future__ import annotations

import socket
import threading

from pathways_chaos.fixtures.control_plane import free_port
from pathways_chaos.fixtures.twin.pathways import ResourceManager
from pathways_chaos.harness.kube.slice_health import SliceHealthWatch


def test_a_closed_worker_connection_is_the_slice_down_and_a_new_one_is_it_back():
    port = free_port()
    manager = ResourceManager(port, 2)
    threading.Thread(target=manager.serve, daemon=True).start()
    health = SliceHealthWatch(f"127.0.0.1:{port}")
    health.start()
    try:
        health.wait(lambda: health.reports > 0, "a first report", timeout=10)
        assert health.hosts(1) == 0
        worker = socket.create_connection(("127.0.0.1", port))
        worker.sendall(b"WORKER 1 0\nHB\n")
        health.wait_up(1, 1)
        assert health.hosts(0) == 0
        worker.close()  # what the kernel does when the worker process dies
        health.wait_down(1, 1)
        again = socket.create_connection(("127.0.0.1", port))
        again.sendall(b"WORKER 1 0\n")
        health.wait_up(1, 1)
        again.close()
    finally:
        health.stop()
        manager.close()


def test_a_bad_address_is_refused_in_one_line():
    import pytest

    with pytest.raises(ValueError, match="HOST:PORT"):
        SliceHealthWatch("no-port")
