"""Redis dying mid-search: one line, exit 2 (the documented code for a service that failed),
and the shard's report kept with what it ran, never a 60-line ``ConnectionError`` traceback."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (ci/bootstrap.sh --redis installs Debian's)")
    redis = pytest.importorskip("redis")
    port = _free_port()
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
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    for _ in range(100):
        try:
            client.ping()
            return proc, url
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("redis-server did not answer")


def test_redis_dying_mid_search_is_one_line_exit_2_and_the_report_is_kept(tmp_path: Path) -> None:
    server, url = _redis(tmp_path)
    out = tmp_path / "out"
    search = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pathways_chaos.harness.cli.main",
            "search",
            "--shard",
            "0/1",
            "--out",
            str(out),
            "--redis",
            url,
            "--properties",
            "dataset,mesh",
            "--budget",
            "240",
            "--examples-per-round",
            "3",
            "--seed",
            "7",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    episodes = out / "shard-0-of-1.jsonl"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and search.poll() is None:
            if episodes.exists() and episodes.read_text().count("\n") >= 1:
                break
            time.sleep(0.1)
        server.kill()  # mid-search: at least one episode ran
        server.wait()
        stdout, stderr = search.communicate(timeout=300)
    finally:
        server.kill()
        search.kill()
    assert search.returncode == 2, (search.returncode, stdout[-2000:], stderr[-4000:])
    assert stderr.strip().count("\n") == 0 and "stopped answering" in stderr, stderr[-4000:]
    assert "Traceback" not in stderr
    report = json.loads((out / "shard-0-of-1.json").read_text())
    assert report["schedules"] >= 1 and "stopped answering" in report["errors"][-1]["error"]
