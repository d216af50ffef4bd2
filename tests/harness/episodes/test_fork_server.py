"""The fork server: children forked warm are what spawned ones would be, and it steps aside when
it cannot stand in for a spawn."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pathways_chaos.harness.engine import process_tree
from pathways_chaos.harness.episodes import fork_server
from pathways_chaos.harness.play import play_loop

SAMPLE = "pathways_chaos.harness.reference.user_loop:main"


def _child_env_probe(pidfile: str | None = None, **_: object) -> None:
    """A 'loop' that records what its process sees, then trains nothing (it fails)."""
    import sys

    assert pidfile is not None
    environ = Path("/proc/self/environ").read_bytes()
    Path(pidfile).write_text(
        repr(
            {
                "pid": os.getpid(),
                "sid": os.getsid(0),
                "token_in_block": f"{process_tree.TOKEN_VAR}=".encode() in environ
                and fork_server.PLACEHOLDER.encode() not in environ,
                "token": os.environ.get(process_tree.TOKEN_VAR),
                "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
                "cwd": os.getcwd(),
                "marker": os.environ.get("FORK_SERVER_TEST_MARKER"),
                "stdin": sys.stdin.read(),
            }
        )
    )


def test_a_forked_child_has_its_own_session_token_fds_and_the_callers_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORK_SERVER_TEST_MARKER", "seen")
    monkeypatch.chdir(tmp_path)
    pidfile = tmp_path / "probe.txt"
    out = play_loop(_child_env_probe, options={"pidfile": str(pidfile)})
    assert pidfile.exists(), out.verdict.summary()
    seen = eval(pidfile.read_text())
    server = fork_server.server_pid()
    assert server is not None, "no fork server ran the child"
    assert seen["pid"] == seen["sid"]  # a session of its own: one killpg ends it all
    assert seen["token_in_block"] and seen["token"] != fork_server.PLACEHOLDER
    assert seen["fds"][:3] == [0, 1, 2]
    assert seen["cwd"] == str(tmp_path)
    assert seen["marker"] == "seen"  # the caller's environment now, not the server's
    assert seen["stdin"] == ""  # /dev/null, not the server's request pipe
    # the server outlives the episode; the child does not
    assert fork_server.server_pid() == server
    assert not Path(f"/proc/{seen['pid']}").exists()


def test_one_server_serves_episode_after_episode(tmp_path: Path) -> None:
    play_loop(SAMPLE, checkpoint_dir=tmp_path / "a")
    first = fork_server.server_pid()
    out = play_loop(SAMPLE, "data_loss@batch=10:slice=1:repair_after_polls=3", baseline=None)
    assert out.verdict.ok, out.verdict.summary()
    assert first is not None and fork_server.server_pid() == first


def test_spawn_on_request_and_a_new_server_for_a_new_jax_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "probe.txt"
    play_loop(_child_env_probe, options={"pidfile": str(pidfile)})
    server = fork_server.server_pid()
    monkeypatch.setenv(fork_server.START_VAR, "spawn")
    play_loop(_child_env_probe, options={"pidfile": str(pidfile)})
    spawned = eval(pidfile.read_text())
    assert server is not None and spawned["pid"] not in process_tree.descendants(server)
    assert spawned["token_in_block"]
    monkeypatch.delenv(fork_server.START_VAR)
    monkeypatch.setenv("JAX_ENABLE_X64", "1")  # read by JAX at import: the old server cannot
    play_loop(_child_env_probe, options={"pidfile": str(pidfile)})
    assert fork_server.server_pid() not in (None, server)
