"""``pathways-chaos twin up --manifest my-jobset.yaml`` / ``twin down``: the local twin for users.

Why: a team preparing its first GKE run can apply its own JobSet to a local twin of Pathways on
GKE (Pods as processes, a JobSet stand-in) and point ``pytest -m chaos --cluster=...`` at it.
``up`` checks the manifest and every option, then starts the twin in a background process and
prints the ``--cluster`` line; ``down`` stops the process ``up`` recorded (only if it is still
that process: harness.engine.owned_processes) and removes the folder ``up`` made (only if it
carries the project's marker: harness.engine.owned_paths), leaving no process, port or file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from pathways_chaos.fixtures.twin.manifest import (
    CheckedManifest,
    check_images,
    check_ports_free,
    load_manifest,
)
from pathways_chaos.fixtures.twin.rootless import (
    USER_NAMESPACE,
    check_overlay_path,
    needs_user_namespace,
)
from pathways_chaos.harness.engine.command_errors import reported
from pathways_chaos.harness.engine.option_values import (
    OneLineArgumentParser,
    Range,
    parse_number,
    parse_whole,
)
from pathways_chaos.harness.engine.owned_paths import (
    check_owned,
    make_owned_folder,
    open_new,
    remove_owned_folder,
    write_atomic,
    write_new,
)
from pathways_chaos.harness.engine.owned_processes import (
    NotOurProcess,
    ProcessIdentity,
    identity_of_started,
    ownership,
    stop_ours,
)
from pathways_chaos.harness.engine.untrusted_files import (
    UntrustedFileError,
    load_json,
    read_bytes,
    read_text,
    shown,
)
from pathways_chaos.harness.errors import ChaosConfigError, ChaosError


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pathways-chaos" / "twin"


PID_FILE = "daemon.pid"
#: What ``up`` runs as ``python -m DAEMON_MODULE``: a pid file naming anything else is refused.
DAEMON_MODULE = "pathways_chaos.fixtures.twin.daemon"
#: ``--spare-slices`` and ``--timeout``: what a laptop's twin can hold, and a minute's patience.
SPARE_SLICES = Range(0, 16, whole=True, unit="spare node pools")
TIMEOUT = Range(0, 3600, unit="seconds", inclusive=False)


def _recorded_daemon(state: Path) -> ProcessIdentity | None:
    """The daemon ``up`` started, as it recorded it; None without a pid file; a pid file that
    does not hold our record (-1, 0, 1, a bare or reused pid, garbage) is refused."""
    path = state / PID_FILE
    try:
        data = read_bytes(path, what="pid file", max_bytes=64 * 1024, follow_symlinks=False)
    except UntrustedFileError as error:
        if not (state / PID_FILE).exists() and not (state / PID_FILE).is_symlink():
            return None
        raise NotOurProcess(f"{error}: nothing signalled") from None
    try:
        record = load_json(data, path, what="pid file")
    except (UnicodeDecodeError, json.JSONDecodeError):
        record = None
    return ProcessIdentity.from_record(record, f"pid file {shown(path)}")


def _daemon_state(state: Path) -> tuple[ProcessIdentity | None, str]:
    """The recorded daemon and ``"ours" | "gone"``; a live pid that is not ours, or that runs
    no twin daemon (a record copied from /proc of the user's own process), is refused."""
    recorded = _recorded_daemon(state)
    if recorded is None:
        return None, "gone"
    verdict, why = ownership(recorded, module=DAEMON_MODULE)
    if verdict == "other":
        raise NotOurProcess(
            f"pid file {shown(state / PID_FILE)} names a process that is not a pathways-chaos "
            f"twin daemon ({why}), nothing signalled: if no twin runs, delete {shown(state)} "
            "yourself"
        )
    return recorded, verdict


def _down_command(state: Path) -> str:
    """The ``twin down`` line for ``state``: with ``--state-dir`` unless it is the default, so
    the printed line stops this twin, not the default folder's."""
    if state.absolute() == default_state_dir().absolute():
        return "pathways-chaos twin down"
    return f"pathways-chaos twin down --state-dir {shlex.quote(str(state.absolute()))}"


def _check_kubeconfig_path(state: Path) -> None:
    """The kubeconfig lives in the state folder, and ``KUBECONFIG`` and ``--cluster=PATH:CONTEXT``
    split on ':': a ':' in its path fails a minute later as "Invalid kube-config file"."""
    text = str(state.absolute())
    if ":" in text:
        raise ChaosConfigError(
            f"--state-dir {shown(text)} holds ':', which the twin's kubeconfig path cannot "
            "(KUBECONFIG and --cluster=PATH:CONTEXT split on it): choose a folder whose path "
            "has none"
        )


def _check_up(args: argparse.Namespace) -> CheckedManifest:
    """Every input of ``up``, before anything is made or started."""
    args.spare_slices = parse_whole(args.spare_slices, "--spare-slices", SPARE_SLICES)
    args.timeout = parse_number(args.timeout, "--timeout", TIMEOUT)
    check_images(args.image)
    _check_kubeconfig_path(args.state_dir)
    if needs_user_namespace():
        check_overlay_path(args.state_dir)
    return load_manifest(args.manifest, args.namespace)


class MachineNotReady(ChaosError):
    """The machine lacks what the twin needs (root, util-linux, the Kubernetes binaries)."""


def _check_machine() -> None:
    """What the twin needs of this machine, said before anything is made or started."""
    from pathways_chaos.fixtures.control_plane import find_kube_binaries, missing_binaries_message
    from pathways_chaos.fixtures.twin.kubelet import container_requirements
    from pathways_chaos.fixtures.twin.rootless import user_namespace_problem

    problem = user_namespace_problem() if needs_user_namespace() else container_requirements()
    if problem is None and find_kube_binaries() is None:
        problem = missing_binaries_message()
    if problem is not None:
        raise MachineNotReady(f"twin up: {problem}")


def up(args: argparse.Namespace) -> int:
    state: Path = args.state_dir
    checked = _check_up(args)
    ours = check_owned(state, what="--state-dir")
    if ours:
        recorded, verdict = _daemon_state(state)
        if recorded is not None and verdict == "ours":
            print(
                f"pathways-chaos twin: a twin is already up in {state} (pid {recorded.pid}): "
                f"run `{_down_command(state)}` first",
                file=sys.stderr,
            )
            return 3
    _check_machine()
    check_ports_free(checked)
    if ours:  # a twin of ours that ended: its folder goes, a new one is made
        remove_owned_folder(state, what="--state-dir")
    make_owned_folder(state, what="--state-dir")
    manifest = state / "manifest.yaml"  # the checked objects: what was read is what runs
    write_new(manifest, yaml.safe_dump_all(checked.docs).encode(), what="manifest copy")
    command = [
        sys.executable,
        "-m",
        DAEMON_MODULE,
        f"--state-dir={state.absolute()}",
        f"--manifest={manifest.absolute()}",
        f"--spare-slices={args.spare_slices}",
        f"--namespace={checked.namespace}",
        *(f"--image={item}" for item in args.image),
    ]
    log = open_new(state / "daemon.log", what="daemon log")
    # Not root: the daemon in a user namespace of its own (unshare execs it: same pid, and
    # its command line is ``command`` once it runs).
    prefix = list(USER_NAMESPACE) if needs_user_namespace() else []
    try:
        daemon = subprocess.Popen(
            [*prefix, *command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the only one `down` may signal
        )
    finally:
        os.close(log)
    identity = identity_of_started(daemon.pid, command)
    if identity is None:  # ended (or never ran the command) before it could be recorded
        daemon.kill()
        daemon.wait()
        print(f"pathways-chaos twin: did not come up: see {state / 'daemon.log'}", file=sys.stderr)
        return 1
    write_atomic(
        state / PID_FILE, json.dumps(identity.as_record()).encode(), what="pid file", mode=0o600
    )
    return _wait_ready(state, daemon, identity, args.timeout)


def _wait_ready(
    state: Path, daemon: subprocess.Popen[bytes], identity: ProcessIdentity, timeout: float
) -> int:
    deadline = time.monotonic() + timeout
    while not (state / "ready.json").exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            error = state / "error.txt"
            why = error.read_text() if error.exists() else "see " + str(state / "daemon.log")
            stop_ours(identity)
            daemon.poll()
            print(f"pathways-chaos twin: did not come up: {why}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    ready = json.loads(read_text(state / "ready.json", what="ready file"))
    print(f"twin up (pid {daemon.pid}); JobSet {ready['namespace']}/{ready['jobset']} applied")
    print(f"export KUBECONFIG={ready['kubeconfig']}")
    print(
        f"pytest -m chaos --cluster={ready['kubeconfig']}:{ready['context']} "
        f"--namespace={ready['namespace']} --jobset={ready['jobset']} --chaos-arm"
    )
    print(f"{_down_command(state)}  # when done")
    return 0


def down(args: argparse.Namespace) -> int:
    state: Path = args.state_dir
    if not check_owned(state, what="--state-dir"):
        print(f"twin down: no twin in {state}")
        return 0
    recorded, verdict = _daemon_state(state)
    stopped = (
        recorded is not None and verdict == "ours" and stop_ours(recorded, module=DAEMON_MODULE)
    )
    remove_owned_folder(state, what="--state-dir")
    if stopped:
        print(f"twin down: stopped, {state} removed")
    else:
        print(f"twin down: nothing was running; {state} removed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="pathways-chaos twin", description=__doc__)
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
    start.add_argument("--spare-slices", default="0", help="extra TPU node pools (0-16)")
    start.add_argument("--timeout", default="120", help="seconds to wait for the twin")
    start.add_argument("--state-dir", type=Path, default=default_state_dir())
    stop = sub.add_parser("down", help="stop the twin and remove everything it made")
    stop.add_argument("--state-dir", type=Path, default=default_state_dir())
    return parser


def twin_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    return reported("pathways-chaos twin", lambda: up(args) if args.command == "up" else down(args))
