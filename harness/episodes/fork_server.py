"""Episode children started by fork from a warm server: JAX and the libraries imported once.

A child started with ``python -m`` spends about 1.6 s importing JAX, Orbax, grain and
pathwaysutils before the loop's first line; an episode's run is 3-5 s. The fork server is one
process per parent (pytest worker, CLI) that imports all of that once, never initialises a JAX
backend (the device count differs per episode, and forking after a backend's threads start is
unsafe), and forks one child per request. The child is then what a spawned one would be:

- its own session (``setsid``), so the parent ends its whole group with one ``killpg``;
- the episode's token in its environment *block* (``/proc/PID/environ``), rewritten in place
  over a placeholder of the same length, so a process the loop forks without ``exec`` is found
  and ended like one it execs (``process_tree``);
- the parent's current environment, working folder and output file; stdin ``/dev/null``; no
  inherited descriptor beyond 0-2; numpy's global generator and ``random`` reseeded;
- an exit as an interpreter's: non-daemon threads joined, ``atexit`` run, then the code.

What it shares with its siblings: the server's hash seed (``PYTHONHASHSEED``), fixed when the
server started. A loop whose result depends on the iteration order of a ``set`` of strings
behaves the same in every run of a session here, where separate containers would differ;
``PATHWAYS_CHAOS_CHILD_START=spawn`` starts every child with ``python -m`` instead.

The server is used only when the parent's JAX-relevant environment is the one it was started
with (JAX reads ``JAX_*`` at import); otherwise, or if it is busy or gone, the parent spawns.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine import process_tree

#: ``fork-server`` (default) or ``spawn``: how episode children start.
START_VAR = "PATHWAYS_CHAOS_CHILD_START"
#: What the server's environment block holds until a child writes its own token there.
PLACEHOLDER = "0" * len(process_tree.new_token())
_PR_SET_PDEATHSIG = 1


class ForkedChild:
    """A child the server forked: the parts of ``subprocess.Popen`` the supervisor uses."""

    def __init__(self, server: _Server, pid: int) -> None:
        self._server, self.pid = server, pid
        self.returncode: int | None = None
        #: The server died before it could say how the child ended.
        self.status_lost = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("fork-server child", timeout or 0.0)
            self._settle(0.2 if left is None else min(0.2, left))
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, number)

    def _settle(self, timeout: float) -> None:
        line = self._server.line(timeout)
        if line is None:
            return
        if line.startswith("exit "):
            self.returncode = int(line.split()[1])
        elif line == "EOF":  # the server is gone (the loop signalled its parent?)
            self.returncode, self.status_lost = -signal.SIGKILL, True
        if self.returncode is not None:
            self._server.busy.release()


class _Server:
    """The parent's handle on one fork server."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key, self.owner = key, os.getpid()
        self.busy = threading.Lock()
        self._buffer = b""
        env = dict(os.environ, **{process_tree.TOKEN_VAR: PLACEHOLDER})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pathways_chaos.harness.episodes.fork_server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        ready = self.line(60.0)
        if ready != "ready":
            self.close()
            raise OSError(f"the fork server did not start ({ready})")

    def line(self, timeout: float) -> str | None:
        """The server's next line, ``EOF`` when it is gone, or None after ``timeout``."""
        out = self.process.stdout
        assert out is not None
        end = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            readable, _, _ = select.select([out], [], [], max(0.0, left))
            if not readable:
                return None
            chunk = os.read(out.fileno(), 4096)
            if not chunk:
                return "EOF"
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\n", 1)
        return raw.decode()

    def fork(self, spec_file: str, output: str, env: dict[str, str], token: str) -> ForkedChild:
        request = {"spec": spec_file, "output": output, "env": env, "token": token}
        request["cwd"] = os.getcwd()
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(request).encode() + b"\n")
        stdin.flush()
        answer = self.line(30.0)
        if answer is None or not answer.startswith("pid "):
            raise OSError(f"the fork server did not fork ({answer})")
        return ForkedChild(self, int(answer.split()[1]))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with contextlib.suppress(Exception):
            self.process.wait(timeout=5)
        with contextlib.suppress(Exception):
            self.process.kill()


#: This process's servers: one serves one child at a time, so children run side by side (a
#: loop's scenarios in parallel) each need one; at most ``MAX_SERVERS``.
_servers: list[_Server] = []
_lock = threading.Lock()
MAX_SERVERS = max(1, os.cpu_count() or 1)


def _key(env: dict[str, str]) -> tuple[Any, ...]:
    """What the server's imports depend on: a different value needs a different server."""
    relevant = sorted(
        (k, v)
        for k, v in env.items()
        if k.startswith(("JAX_", "PYTHON", "TF_", "ORBAX", "GRAIN"))
        and k not in ("PYTHONHASHSEED",)
    )
    return (sys.executable, tuple(sys.path), tuple(relevant))


def _free_server(key: tuple[Any, ...]) -> _Server | None:
    """An idle server for ``key``, held (its ``busy`` lock taken); a new one if there is room."""
    with _lock:
        for server in list(_servers):
            if server.owner != os.getpid():  # inherited through a fork: not ours to use
                _servers.remove(server)
            elif (server.key != key or server.process.poll() is not None) and server.busy.acquire(
                blocking=False
            ):  # idle and stale: closed
                _servers.remove(server)
                server.close()
        for server in _servers:
            if server.key == key and server.busy.acquire(blocking=False):
                return server
        if len(_servers) >= MAX_SERVERS:
            return None
        try:
            server = _Server(key)
        except OSError:
            return None
        server.busy.acquire()
        _servers.append(server)
        return server


def start_child(spec_file: str, output: str, env: dict[str, str], token: str) -> ForkedChild | None:
    """A child forked from one of this process's servers, or None: the caller spawns instead."""
    if os.environ.get(START_VAR, "fork-server") == "spawn" or not hasattr(os, "fork"):
        return None
    server = _free_server(_key(env))
    if server is None:
        return None
    try:
        return server.fork(spec_file, output, env, token)
    except OSError:
        server.busy.release()
        return None


def server_pid() -> int | None:
    """This process's (first live) fork server, if it has one: the one child of ours that
    outlives episodes (its own children, the episodes' processes, do not)."""
    for server in _servers:
        if server.owner == os.getpid() and server.process.poll() is None:
            return server.process.pid
    return None


def server_pids() -> list[int]:
    """Every live fork server of this process."""
    return [s.process.pid for s in _servers if s.owner == os.getpid() and s.process.poll() is None]


@atexit.register
def _stop() -> None:
    for server in _servers:
        if server.owner == os.getpid():
            server.close()


# -- the server process ------------------------------------------------------------------------
def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _retag(token: str) -> None:
    """Writes ``token`` over the placeholder in this process's environment block, where
    ``/proc/PID/environ`` (and so ``process_tree.tagged``) reads it, and in ``os.environ``
    for the processes it execs."""
    os.environ[process_tree.TOKEN_VAR] = token
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
    block = ctypes.string_at(start, end - start)
    old = f"{process_tree.TOKEN_VAR}={PLACEHOLDER}".encode()
    # A whole entry, the first one included: its offset in the block is the separator's in
    # the block with one more separator in front.
    at = (b"\0" + block).find(b"\0" + old + b"\0")
    if at < 0:
        raise OSError("no placeholder token in the environment block")
    new = f"{process_tree.TOKEN_VAR}={token}".encode()
    assert len(new) == len(old)
    ctypes.memmove(start + at, new, len(new))


def _forked(request: dict[str, Any]) -> None:
    """The child's side of one request; never returns."""
    code = 70
    try:
        os.setsid()
        _die_with_parent()
        os.environ.clear()
        os.environ.update(request["env"])
        _retag(request["token"])
        os.chdir(request["cwd"])
        out = os.open(request["output"], os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, 1 << 16)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own
        import numpy as np

        np.random.seed()
        from pathways_chaos.harness.episodes import child

        sys.argv = [child.__file__, request["spec"]]
        code = 0
        try:
            child.main([request["spec"]])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        # As the interpreter ends: join non-daemon threads, run atexit, flush.
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:  # a child never returns into the server's loop
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
        code = code or 70
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    _die_with_parent()
    import importlib

    from pathways_chaos.harness.episodes.child import PRELOAD

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from jax._src import xla_bridge

    out = sys.stdout.buffer

    def say(text: str) -> None:
        out.write(text.encode() + b"\n")
        out.flush()

    if xla_bridge.backends_are_initialized() or threading.active_count() != 1:
        say("not forkable: a JAX backend or a thread started while importing")
        return
    say("ready")
    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        pid = os.fork()
        if pid == 0:
            _forked(request)
        say(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        say(f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    serve()
