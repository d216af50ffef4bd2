"""A real Redis server on a loopback port (Debian's redis-server; ``ci/bootstrap.sh --redis``
installs it), started for the module that asks for it and stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a fresh server: no persistence, loopback only."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (ci/bootstrap.sh --redis installs Debian's)")
    redis = pytest.importorskip("redis")
    folder: Path = tmp_path_factory.mktemp("redis")
    port = _free_loopback_port()
    proc = subprocess.Popen(
        [
            server,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        for _ in range(100):
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited with {proc.returncode} on port {port}")
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail(f"redis-server on port {port} did not answer within 5 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
