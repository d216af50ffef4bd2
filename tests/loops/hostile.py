"""Loops that end, hang, fork, flood or tamper as hostile or careless user code does.

Each must end in a verdict that names what it did, within its deadline, with nothing left
running and nothing changed in the process that judged it (tests/harness/episodes/
test_hostile_loops.py). None of them trains: what they do happens at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import posix
import signal
import socket
import subprocess
import sys
import threading
import time
from os import _exit
from typing import Any


def _note(pidfile: str | None, pid: int) -> None:
    """Writes a started process's pid where the test can check it is gone afterwards."""
    if pidfile:
        with open(pidfile, "a") as f:
            f.write(f"{pid}\n")


def sys_exit_3(**_: Any) -> Any:
    sys.exit(3)


def sys_exit_0(**_: Any) -> Any:
    sys.exit(0)


def os_exit_0(**_: Any) -> Any:
    os._exit(0)


def imported_exit(**_: Any) -> Any:
    _exit(0)  # `from os import _exit`: no patch of os._exit could see this


def posix_exit_7(**_: Any) -> Any:
    posix._exit(7)


def restores_os_exit(**_: Any) -> Any:
    os._exit = posix._exit  # puts back what a patch would have replaced
    os._exit(4)


def execs_true(**_: Any) -> Any:
    os.execv("/bin/true", ["true"])  # the process becomes another program, which exits 0


def execs_python(**_: Any) -> Any:
    os.execl(sys.executable, "python", "-c", "raise SystemExit(5)")


def aborts(**_: Any) -> Any:
    os.abort()


def kills_itself(**_: Any) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


def kills_its_group(**_: Any) -> Any:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def pthread_kills(**_: Any) -> Any:
    signal.pthread_kill(threading.get_ident(), signal.SIGKILL)


def terminates_itself(**_: Any) -> Any:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)


def segfaults(**_: Any) -> Any:
    ctypes.string_at(0)


def recurses(**_: Any) -> Any:
    def deeper(n: int) -> int:
        return deeper(n + 1) + 1

    return deeper(0)


def waits_on_an_event(**_: Any) -> Any:
    threading.Event().wait()


def sleeps_forever(**_: Any) -> Any:
    time.sleep(10**6)


def blocks_in_recv(**_: Any) -> Any:
    a, _b = socket.socketpair()
    a.recv(1)


def deadlocks(**_: Any) -> Any:
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def spins(**_: Any) -> Any:
    x = 0
    while True:
        x += 1


def ignores_the_stack_signal_and_sleeps(**_: Any) -> Any:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(10**6)


def stops_itself(**_: Any) -> Any:
    os.kill(os.getpid(), signal.SIGSTOP)


def leaves_a_thread(**_: Any) -> Any:
    threading.Thread(target=time.sleep, args=(10**6,), name="forgotten-prefetch").start()
    return None


def leaves_a_thread_in_a_library(**_: Any) -> Any:
    """Its own thread, which runs only jax's code (``tree_map`` calling ``time.sleep``): started
    by the loop, so the loop's, though no line of the loop's is on its stack."""
    import jax

    threading.Thread(
        target=jax.tree_util.tree_map, args=(time.sleep, [10**6]), name="library-in-my-thread"
    ).start()
    return None


def forks_and_leaves_a_copy(pidfile: str | None = None, **_: Any) -> Any:
    pid = os.fork()
    if pid == 0:
        time.sleep(10**6)  # the copy of the loop's process, never joined
        os._exit(0)
    _note(pidfile, pid)
    return None


def forks_ten(pidfile: str | None = None, **_: Any) -> Any:
    for _ in range(10):
        pid = os.fork()
        if pid == 0:
            time.sleep(10**6)
            os._exit(0)
        _note(pidfile, pid)
    return None


def starts_a_daemon_in_its_own_session(pidfile: str | None = None, **_: Any) -> Any:
    child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    _note(pidfile, child.pid)
    return None


def closes_stdout_and_stderr(**_: Any) -> Any:
    os.close(1)
    os.close(2)
    raise ValueError("raised after closing fds 1 and 2")


class Boom(BaseException):
    """Not an Exception: no ``except Exception`` takes it."""


def raises_a_base_exception(**_: Any) -> Any:
    raise Boom("a BaseException subclass")


def raises_keyboard_interrupt(**_: Any) -> Any:
    raise KeyboardInterrupt


def raises_signal_sigint(**_: Any) -> Any:
    signal.raise_signal(signal.SIGINT)


def is_a_generator(**_: Any) -> Any:
    yield 1


def returns_a_gigabyte(**_: Any) -> Any:
    import numpy as np

    return {"big": np.ones(1 << 28, dtype=np.float32)}


def hogs_memory(**_: Any) -> Any:
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
        hog[-1][::4096] = b"x" * len(hog[-1][::4096])


def floods_stdout(**_: Any) -> Any:
    line = b"x" * 65535 + b"\n"
    while True:
        os.write(1, line)


def floods_stdout_and_returns(**_: Any) -> Any:
    """20 MiB at once, then returns: ended before the watch's next look at the output."""
    os.write(1, b"x" * (20 << 20))


def replaces_its_log(**_: Any) -> Any:
    """Finds the event log among its open files and puts a folder where it was."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".jsonl"):
            os.unlink(target)
            os.mkdir(target)


def changes_the_directory(**_: Any) -> Any:
    os.chdir("/")
    raise RuntimeError("after chdir('/')")


def writes_into_its_log(**_: Any) -> Any:
    """Finds the toolkit's event log among its open files and writes into it: a line that is
    not JSON, and a forged run_end saying it completed."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
                os.write(int(fd), b"not json\n")
                os.write(int(fd), b'{"seq": 99999, "kind": "run_end", "status": "completed"}\n')
    raise RuntimeError("after writing into the event log")


def patches_jax(**_: Any) -> Any:
    import jax

    jax.jit = None  # type: ignore[assignment]
    jax.config.update("jax_enable_x64", True)
    raise RuntimeError("after patching jax.jit and jax_enable_x64")


def installs_signal_handlers(**_: Any) -> Any:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *a: None)
    raise RuntimeError("after installing signal handlers")


def floods_stdout_and_exits_1(**_: Any) -> Any:
    """20 MiB at once, then ``os._exit(1)``: the output was kept whole when the exit was the
    cause of the end."""
    os.write(1, b"x" * (20 << 20))
    os._exit(1)
