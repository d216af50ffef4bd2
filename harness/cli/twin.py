"""``pathways-chaos twin up --manifest my-jobset.yaml`` / ``twin down``: the local twin for users.

Why: a team preparing its first GKE run can apply its own JobSet to a local twin of Pathways on
GKE (Pods as processes, a JobSet stand-in) and point ``pytest -m chaos --cluster=...`` at it.
``up`` starts the twin in a background process and prints the ``--cluster`` line; ``down``
stops it by PID and removes its folder, leaving no process, port or file behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pathways-chaos" / "twin"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid(state: Path) -> int | None:
    try:
        return int((state / "daemon.pid").read_text())
    except (OSError, ValueError):
        return None


def up(args: argparse.Namespace) -> int:
    state: Path = args.state_dir
    manifest: Path = args.manifest
    if not manifest.is_file():
        print(
            f"pathways-chaos twin: no manifest at {manifest}: pass --manifest FILE", file=sys.stderr
        )
        return 2
    pid = _pid(state)
    if pid is not None and _alive(pid):
        print(
            f"pathways-chaos twin: a twin is already up in {state} (pid {pid}): "
            "run `pathways-chaos twin down` first",
            file=sys.stderr,
        )
        return 3
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "pathways_chaos.fixtures.twin.daemon",
        f"--state-dir={state}",
        f"--manifest={manifest.resolve()}",
        f"--spare-slices={args.spare_slices}",
        *([f"--namespace={args.namespace}"] if args.namespace else []),
        *(f"--image={item}" for item in args.image),
    ]
    with open(state / "daemon.log", "wb") as log:
        daemon = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (state / "daemon.pid").write_text(str(daemon.pid))
    deadline = time.monotonic() + args.timeout
    while not (state / "ready.json").exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            error = state / "error.txt"
            why = error.read_text() if error.exists() else "see " + str(state / "daemon.log")
            _stop(state)
            print(f"pathways-chaos twin: did not come up: {why}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    ready = json.loads((state / "ready.json").read_text())
    print(f"twin up (pid {daemon.pid}); JobSet {ready['namespace']}/{ready['jobset']} applied")
    print(f"export KUBECONFIG={ready['kubeconfig']}")
    print(
        f"pytest -m chaos --cluster={ready['kubeconfig']}:{ready['context']} "
        f"--namespace={ready['namespace']} --jobset={ready['jobset']} --chaos-arm"
    )
    print("pathways-chaos twin down  # when done")
    return 0


def _stop(state: Path, timeout: float = 60.0) -> bool:
    """SIGTERM to the daemon by PID (it stops its Pods and control plane), SIGKILL at timeout."""
    pid = _pid(state)
    if pid is None or not _alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return True


def down(args: argparse.Namespace) -> int:
    state: Path = args.state_dir
    stopped = _stop(state)
    existed = state.exists()
    shutil.rmtree(state, ignore_errors=True)
    if stopped:
        print(f"twin down: stopped, {state} removed")
    elif existed:
        print(f"twin down: nothing was running; {state} removed")
    else:
        print(f"twin down: no twin in {state}")
    return 0


def twin_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="pathways-chaos twin", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start the twin and apply a JobSet manifest")
    start.add_argument("--manifest", type=Path, required=True, help="YAML with your JobSet")
    start.add_argument("--namespace", default=None, help="default: the JobSet's, else default")
    start.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="IMAGE=COMMAND",
        help="run IMAGE's containers as COMMAND (e.g. my/train=python -m mytrain); "
        "Pathways images and the toolkit's are mapped already",
    )
    start.add_argument("--spare-slices", type=int, default=0, help="extra TPU node pools")
    start.add_argument("--timeout", type=float, default=120.0)
    start.add_argument("--state-dir", type=Path, default=default_state_dir())
    stop = sub.add_parser("down", help="stop the twin and remove everything it made")
    stop.add_argument("--state-dir", type=Path, default=default_state_dir())
    args = parser.parse_args(list(argv))
    return up(args) if args.command == "up" else down(args)
