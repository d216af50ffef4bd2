"""The local control plane: real 1.20.2 binaries, loopback only, token auth, stopped by PID."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from pathways_chaos.fixtures.control_plane import (
    CONTEXT_NAME,
    LocalControlPlane,
    find_kube_binaries,
)

pytestmark = pytest.mark.kube


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(ip, port) of every TCP socket the process listens on, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            assert len(hex_ip) == width
            if width == 8:
                ip = ".".join(str(int(hex_ip[i : i + 2], 16)) for i in (6, 4, 2, 0))
            else:
                ip = "ipv6:" + hex_ip
            found.add((ip, int(hex_port, 16)))
    return found


def test_kubeconfig_context_reaches_a_real_1_20_apiserver(
    kube_control_plane: LocalControlPlane,
) -> None:
    data = json.loads(kube_control_plane.kubeconfig.read_text())
    assert data["current-context"] == CONTEXT_NAME == kube_control_plane.context
    api = config.new_client_from_config(str(kube_control_plane.kubeconfig), context=CONTEXT_NAME)
    assert client.VersionApi(api).get_code().git_version == "v1.20.2"
    core: Any = client.CoreV1Api(api)
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_a_wrong_token_is_rejected(kube_control_plane: LocalControlPlane) -> None:
    api = kube_control_plane.client_for_token("not-the-token")
    with pytest.raises(ApiException) as raised:
        client.CoreV1Api(api).list_namespace()
    assert raised.value.status == 401


def test_every_process_listens_on_loopback_only(kube_control_plane: LocalControlPlane) -> None:
    pids = kube_control_plane.pids()
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    listening = {name: listening_addresses(pid) for name, pid in pids.items()}
    assert ("127.0.0.1", kube_control_plane.api_port) in listening["kube-apiserver"]
    assert listening["kube-controller-manager"] == set()  # --port=0 --secure-port=0
    # Its config file (scheduling backoff) turns --port=0 off: healthz on one loopback port.
    assert len(listening["kube-scheduler"]) <= 1
    for name, addresses in listening.items():
        assert {ip for ip, _ in addresses} <= {"127.0.0.1"}, (name, addresses)


def test_context_manager_stops_every_process_by_pid(tmp_path: Path) -> None:
    bin_dir = find_kube_binaries()
    assert bin_dir is not None
    with LocalControlPlane(bin_dir, tmp_path, controller_manager=False, scheduler=False) as plane:
        pids = plane.pids()
        assert all(p.alive() for p in plane.processes)
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), name


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    ("args", "env", "outcome"),
    [
        (["-m", "kube"], {}, "error"),
        ([], {"CI": "1"}, "error"),
        ([], {}, "skipped"),
    ],
    ids=["kube-selected", "in-ci", "laptop"],
)
def test_missing_binaries_fail_in_ci_naming_the_build_script(
    tmp_path: Path, args: list[str], env: dict[str, str], outcome: str
) -> None:
    import subprocess
    import sys

    (tmp_path / "test_needs_kube.py").write_text(
        "import pytest\n\n@pytest.mark.kube\ndef test_it(kube_control_plane):\n    pass\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    child_env = {k: v for k, v in os.environ.items() if k not in ("CI", "KUBEBUILDER_ASSETS")}
    child_env.update(
        env,
        KUBEBUILDER_ASSETS=str(empty),
        PATHWAYS_CHAOS_CACHE=str(empty),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "pathways_chaos.fixtures.control_plane",
            "-o",
            "markers=kube",
            "-rs",
            "-q",
            "test_needs_kube.py",
            *args,
        ],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"1 {outcome}" in result.stdout, result.stdout
    assert "run ci/build-kube-binaries.sh" in result.stdout


def test_a_sigkilled_owner_leaks_no_control_plane_process(tmp_path: Path) -> None:
    """Teardown cannot run after SIGKILL; the children must still die with their parent."""
    import signal
    import subprocess
    import sys

    from pathways_chaos.fixtures.control_plane import wait_for

    script = (
        "import json, sys, time\n"
        "from pathways_chaos.fixtures.control_plane import LocalControlPlane\n"
        "plane = LocalControlPlane(controller_manager=False, scheduler=False)\n"
        "plane.start()\n"
        "print(json.dumps(plane.pids()), flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert owner.stdout is not None
    pids = json.loads(owner.stdout.readline())
    assert set(pids) == {"etcd", "kube-apiserver"}
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(10)

    def all_gone() -> bool:
        return not any(
            Path(f"/proc/{pid}").exists() and not _is_zombie(pid) for pid in pids.values()
        )

    wait_for(all_gone, timeout=10, what=f"control plane processes {pids} to die")
