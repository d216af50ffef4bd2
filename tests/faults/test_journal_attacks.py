"""A journal is evidence, not an instruction: each attack of issue 25, against the real API server.

Each attack is run twice: as shipped, where it must be refused and leave the cluster (and any
file it aimed at) as it was; and against a broken variant, the trust checks switched off by
monkeypatch, where the same assertions must fail. The second run is what shows that the first
one's assertions could be false: without the checks, the attack really does harm.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults import journal as journal_module
from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.journal_trust import holder_of
from pathways_chaos.faults.kubernetes import CordonNodes, KubeTarget, TaintNode
from pathways_chaos.faults.safety import CORDONED_BY_ANNOTATION
from pathways_chaos.fixtures.control_plane import LocalControlPlane
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload
from pathways_chaos.harness.cli import rollback as rollback_module
from pathways_chaos.harness.cli.rollback import rollback_main

pytestmark = pytest.mark.kube

ATTACKER_UID = 65534  # nobody


def cli(plane: LocalControlPlane, *argv: str) -> list[str]:
    return [*argv, "--kubeconfig", str(plane.kubeconfig), "--context", plane.context]


def dead_pid() -> int:
    done = subprocess.run(["true"], check=True)
    assert done.returncode == 0
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def private_folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    return path


@dataclasses.dataclass
class Victim:
    """A live armed session: it cordoned slice 0's Nodes, and its journal is its own."""

    workload: PathwaysWorkload
    journal: RollbackJournal
    nodes: list[Any]

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.workload.api_client)

    def intact(self) -> bool:
        """Every Node this session cordoned is still cordoned, under its own mark."""
        for node in self.nodes:
            now = self.core.read_node(node.metadata.name)
            marker = (now.metadata.annotations or {}).get(CORDONED_BY_ANNOTATION)
            if not now.spec.unschedulable or marker != self.journal.run_id:
                return False
        return True


@pytest.fixture
def victim(
    pathways_workload: PathwaysWorkload, make_kube_target: Any, tmp_path: Path
) -> Iterator[Victim]:
    journal = RollbackJournal(private_folder(tmp_path / "victim") / "session.jsonl")
    target: KubeTarget = make_kube_target(pathways_workload, armed=True, journal=journal)
    CordonNodes(slice=0).inject(target)
    names = sorted({p.spec.node_name for p in pathways_workload.worker_pods(0)})
    core: Any = client.CoreV1Api(pathways_workload.api_client)
    yield Victim(pathways_workload, journal, [core.read_node(n) for n in names])
    journal.replay(pathways_workload.api_client)


def forged(victim: Victim, entries: list[dict[str, Any]], **header: Any) -> str:
    """A journal as an attacker writes it by hand: the victim's run id read off its Nodes."""
    import json

    kube_system: Any = victim.core.read_namespace("kube-system")
    run = victim.journal.run_id
    head = {
        "journal": 2,
        "run": run,
        "cluster_uid": kube_system.metadata.uid,
        "server": victim.workload.api_client.configuration.host,
        "host": socket.gethostname(),
        "pid": dead_pid(),
        "namespace": victim.workload.namespace,
        "jobset": victim.workload.jobset,
        "allowed_namespaces": [victim.workload.namespace],
        **header,
    }
    lines = [head] + [{"seq": i, "run": run, **e} for i, e in enumerate(entries, start=1)]
    return "".join(json.dumps(x) + "\n" for x in lines)


def uncordon_entries(victim: Victim) -> list[dict[str, Any]]:
    return [
        {"action": "cordon", "node": n.metadata.name, "uid": n.metadata.uid} for n in victim.nodes
    ]


def break_trust(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken variant: every check a journal passes before it is believed, switched off."""
    monkeypatch.setattr(journal_module, "mac_ok", lambda *args: True)
    monkeypatch.setattr(journal_module, "check_folder", lambda *args, **kwargs: None)
    monkeypatch.setattr(journal_module, "check_journal_file", lambda *args: None)
    monkeypatch.setattr(journal_module, "scope_problem", lambda *args: None)
    monkeypatch.setattr(journal_module.os, "O_NOFOLLOW", 0)
    monkeypatch.setattr(journal_module, "holder_state", lambda header: ("stale", "ended"))
    monkeypatch.setattr(rollback_module, "holder_state", lambda header: ("stale", "ended"))


@dataclasses.dataclass
class Attack:
    code: int
    out: str
    err: str


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Attack:
    capsys.readouterr()
    code = rollback_main(argv)
    captured = capsys.readouterr()
    return Attack(code, captured.out, captured.err)


def refused(attack: Attack, code: int, says: str) -> None:
    assert attack.code == code, (attack.code, attack.out, attack.err)
    assert says in attack.err, attack.err
    assert "Traceback" not in attack.out + attack.err


BROKEN = pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])


def expect(broken: bool, check: Callable[[], None]) -> None:
    """Shipped: ``check`` holds. Broken variant: it must fail (the attack got through)."""
    if broken:
        with pytest.raises(AssertionError):
            check()
    else:
        check()


# -- 1. planted by another user in a world-writable journal folder ---------------------------


@BROKEN
def test_a_journal_planted_by_another_user_in_a_shared_folder_is_refused(
    victim: Victim,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / "20260101T000000Z-planted.jsonl"
    planted.write_text(forged(victim, uncordon_entries(victim)))
    os.chown(planted, ATTACKER_UID, ATTACKER_UID)
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, "--pending", "--journal-dir", str(shared)), capsys)

    def check() -> None:
        refused(attack, 3, "can be written by other users")
        assert victim.intact()

    expect(broken, check)


# -- 2. a *.jsonl symlink to a file outside the folder ---------------------------------------


@BROKEN
def test_a_symlinked_journal_is_neither_read_nor_written_through(
    victim: Victim,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    folder = private_folder(tmp_path / "journals")
    outside = private_folder(tmp_path / "elsewhere") / "notes.txt"
    outside.write_text(forged(victim, uncordon_entries(victim)))
    before = outside.read_bytes()
    (folder / "20260101T000000Z-link.jsonl").symlink_to(outside)
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, "--pending", "--journal-dir", str(folder)), capsys)

    def check() -> None:
        refused(attack, 3, "is a symlink")
        assert outside.read_bytes() == before  # no "undone" line appended through the link
        assert victim.intact()

    expect(broken, check)


# -- 3. a journal of ours, edited to name an admin's taint on another Node -------------------


@BROKEN
def test_a_journal_edited_to_name_an_admins_taint_is_refused(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    import json

    api = pathways_workload.api_client
    core: Any = client.CoreV1Api(api)
    journal = RollbackJournal(private_folder(tmp_path / "j") / "run.jsonl")
    TaintNode(slice=1, host=0).inject(
        make_kube_target(pathways_workload, armed=True, journal=journal)
    )
    admins_node = core.read_node(pathways_workload.worker_pods(0)[0].spec.node_name)
    admin_taint = {"key": "example.com/admin-hold", "value": "yes", "effect": "NoSchedule"}
    core.patch_node(admins_node.metadata.name, {"spec": {"taints": [admin_taint]}})
    lines = journal.path.read_text().splitlines()
    entry = json.loads(lines[1])
    entry.update(node=admins_node.metadata.name, uid=admins_node.metadata.uid, taint=admin_taint)
    lines[1] = json.dumps(entry, sort_keys=True)  # the old MAC kept: an edit by hand
    journal.path.write_text("\n".join(lines) + "\n")
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, str(journal.path)), capsys)

    def check() -> None:
        refused(attack, 3, "line 2 is not as your pathways-chaos wrote it")
        taints = core.read_node(admins_node.metadata.name).spec.taints or []
        assert [t.key for t in taints] == ["example.com/admin-hold"]

    expect(broken, check)


# -- 4. a planted journal that copies a live session's run id from its Nodes' annotation -----


@BROKEN
def test_a_journal_copying_a_live_sessions_run_id_is_refused(
    victim: Victim,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    folder = private_folder(tmp_path / "mine")  # a private folder, the file is ours: only the
    path = folder / "copied.jsonl"  # MAC can tell it was not written by pathways-chaos
    path.write_text(forged(victim, uncordon_entries(victim)))
    path.chmod(0o600)
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, str(path)), capsys)

    def check() -> None:
        refused(attack, 3, "line 1 is not as your pathways-chaos wrote it")
        assert victim.intact()

    expect(broken, check)


# -- 5. a delete_job entry naming kube-system with a privileged manifest ---------------------

PRIVILEGED_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "pc-escalate", "namespace": "kube-system"},
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "hostPID": True,
                "containers": [
                    {
                        "name": "root",
                        "image": "busybox",
                        "securityContext": {"privileged": True},
                    }
                ],
            }
        }
    },
}


def kube_system_jobs(api: Any) -> set[str]:
    batch: Any = client.BatchV1Api(api)
    return {j.metadata.name for j in batch.list_namespaced_job("kube-system").items}


@pytest.fixture
def no_escalation(pathways_workload: PathwaysWorkload) -> Iterator[None]:
    """Whatever a broken variant created in kube-system is removed after."""
    yield
    batch: Any = client.BatchV1Api(pathways_workload.api_client)
    if "pc-escalate" in kube_system_jobs(pathways_workload.api_client):
        batch.delete_namespaced_job("pc-escalate", "kube-system", propagation_policy="Background")


@BROKEN
@pytest.mark.parametrize("signed", [False, True], ids=["planted", "signed-by-the-key"])
def test_a_delete_job_entry_never_creates_a_job_outside_the_allowed_namespaces(
    victim: Victim,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_escalation: None,
    broken: bool,
    signed: bool,
) -> None:
    """Planted: the MAC refuses the journal. Signed (a journal of ours, say from a bug or an
    older version): the namespace rule refuses the entry, and nothing is created."""
    import json

    entry = {
        "action": "delete_job",
        "namespace": "kube-system",
        "name": "pc-escalate",
        "uid": "0000",
        "manifest": PRIVILEGED_JOB,
    }
    path = private_folder(tmp_path / "j") / "escalate.jsonl"
    text = forged(victim, [entry])
    if signed:
        journal = RollbackJournal(path)
        for line in text.splitlines():
            journal._append(json.loads(line))
    else:
        path.write_text(text)
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, str(path)), capsys)

    def check() -> None:
        if signed:
            refused(attack, 1, "namespace 'kube-system' is not one this run was allowed")
        else:
            refused(attack, 3, "is not as your pathways-chaos wrote it")
        assert "pc-escalate" not in kube_system_jobs(victim.workload.api_client)

    expect(broken, check)


# -- 6. `rollback JOURNAL` of a live session's journal ----------------------------------------


@pytest.fixture
def live_process() -> Iterator[int]:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield sleeper.pid
    sleeper.kill()
    sleeper.wait()


def journal_held_by(
    monkeypatch: pytest.MonkeyPatch,
    workload: PathwaysWorkload,
    make_kube_target: Any,
    path: Path,
    holder: dict[str, Any],
) -> RollbackJournal:
    """A real session's journal (slice 0 cordoned) whose header names ``holder`` as writer."""
    journal = RollbackJournal(path)
    with monkeypatch.context() as patch:
        patch.setattr(journal_module, "holder_of", lambda: holder)
        CordonNodes(slice=0).inject(make_kube_target(workload, armed=True, journal=journal))
    return journal


def cordoned(workload: PathwaysWorkload) -> bool:
    core: Any = client.CoreV1Api(workload.api_client)
    names = {p.spec.node_name for p in workload.worker_pods(0)}
    return all(core.read_node(n).spec.unschedulable for n in names)


@BROKEN
def test_rollback_of_a_live_sessions_journal_is_refused(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    kube_control_plane: LocalControlPlane,
    live_process: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    path = private_folder(tmp_path / "j") / "live.jsonl"
    journal = journal_held_by(
        monkeypatch, pathways_workload, make_kube_target, path, holder_of(live_process)
    )
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, str(path)), capsys)

    def check() -> None:
        refused(attack, 3, f"in use by pid {live_process} on this host")
        assert cordoned(pathways_workload)

    expect(broken, check)
    journal.replay(pathways_workload.api_client)


# -- 7. a journal of another host's session, in a shared folder -------------------------------


@BROKEN
def test_another_hosts_journal_is_left_and_said_so_not_taken_as_abandoned(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    folder = private_folder(tmp_path / "nfs")
    holder = {**holder_of(), "host": "another-host.example", "pid": 4242}
    journal_held_by(monkeypatch, pathways_workload, make_kube_target, folder / "a.jsonl", holder)
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, "--pending", "--journal-dir", str(folder)), capsys)

    def check() -> None:
        refused(attack, 1, "on host another-host.example, not this host")
        assert "--holder-gone" in attack.err
        assert cordoned(pathways_workload)

    expect(broken, check)
    # The documented way out, once the user knows that session has ended.
    assert rollback_main(cli(kube_control_plane, str(folder / "a.jsonl"), "--holder-gone")) == 0
    assert not cordoned(pathways_workload)


# -- 8. a recycled pid (pid 1) is not mistaken for the live writer ----------------------------


@pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])
def test_a_journal_whose_pid_was_reused_is_rolled_back_not_skipped_forever(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    folder = private_folder(tmp_path / "j")
    holder = {**holder_of(), "pid": 1, "pid_start": "999999999"}  # pid 1 now: another process
    journal_held_by(monkeypatch, pathways_workload, make_kube_target, folder / "a.jsonl", holder)
    if broken:  # the old rule: a pid that answers a signal is the writer, alive

        def by_pid_only(header: dict[str, Any]) -> tuple[str, str]:
            return "live", f"in use by pid {header['pid']}"

        monkeypatch.setattr(journal_module, "holder_state", by_pid_only)

    attack = run(cli(kube_control_plane, "--pending", "--journal-dir", str(folder)), capsys)

    def check() -> None:
        assert attack.code == 0, attack.err
        assert "the pid now belongs to another process" in attack.out
        assert "uncordoned node" in attack.out
        assert not cordoned(pathways_workload)

    expect(broken, check)
    if broken:
        monkeypatch.undo()
        assert rollback_main(cli(kube_control_plane, str(folder / "a.jsonl"))) == 0


# -- 9. FIFOs and devices named *.jsonl: refused without blocking ----------------------------

HANG_S = 12.0
BROKEN_READER = """
import os, sys
from pathways_chaos.faults import journal
from pathways_chaos.harness.cli.rollback import rollback_main
journal.os.O_NONBLOCK = 0
journal.check_journal_file = lambda *a: None
sys.exit(rollback_main(sys.argv[1:]))
"""


@BROKEN
@pytest.mark.parametrize("how", ["pending", "named"])
def test_a_fifo_named_like_a_journal_is_refused_without_blocking(
    pathways_workload: PathwaysWorkload,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    broken: bool,
    how: str,
) -> None:
    folder = private_folder(tmp_path / "j")
    fifo = folder / "20260101T000000Z-fifo.jsonl"
    os.mkfifo(fifo, 0o600)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    args = ["--pending", "--journal-dir", str(folder)] if how == "pending" else [str(fifo)]
    prefix = (
        ["-c", BROKEN_READER] if broken else ["-m", "pathways_chaos.harness.cli.main", "rollback"]
    )
    try:
        out = subprocess.run(
            [sys.executable, *prefix, *cli(kube_control_plane, *args)],
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
        result: subprocess.CompletedProcess[str] | None = out
    except subprocess.TimeoutExpired:
        result = None  # it hung on the FIFO

    def check() -> None:
        assert result is not None, f"rollback hung for {HANG_S} s on a FIFO"
        assert result.returncode == 3, result.stderr
        assert "is a FIFO (named pipe)" in result.stderr
        assert "Traceback" not in result.stderr

    expect(broken, check)


# -- 10. an unreadable journal folder is an error, not "nothing to undo" --------------------


@BROKEN
def test_an_unreadable_journal_folder_is_an_error_naming_it(
    victim: Victim,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    """Root reads through any mode, so the permission error is the one os.scandir raises."""
    folder = victim.journal.path.parent
    real_scandir = os.scandir

    def denied(path: Any = ".") -> Any:
        if Path(path) == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(journal_module.os, "scandir", denied)
    if broken:  # the old reading: glob() swallows the error and finds nothing
        monkeypatch.setattr(
            journal_module.os, "scandir", lambda path=".": real_scandir(tmp_path / "empty")
        )
        (tmp_path / "empty").mkdir()

    attack = run(cli(kube_control_plane, "--pending", "--journal-dir", str(folder)), capsys)

    def check() -> None:
        refused(attack, 1, f"journal folder {folder} cannot be read (permission denied)")

    expect(broken, check)


# -- 11. --assume-cluster never relaxes the rules ---------------------------------------------


@BROKEN
def test_assume_cluster_on_a_header_less_journal_still_creates_nothing_outside_the_run(
    victim: Victim,
    kube_control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_escalation: None,
    broken: bool,
) -> None:
    """Signed but without a header, the journal names no namespace it was allowed: with
    --assume-cluster its Pod and Node entries may be replayed, never a Job created."""
    entry = {
        "seq": 1,
        "run": victim.journal.run_id,
        "action": "delete_job",
        "namespace": victim.workload.namespace,
        "name": "pc-escalate",
        "uid": "0000",
        "manifest": {**PRIVILEGED_JOB, "metadata": {"name": "pc-escalate"}},
    }
    path = private_folder(tmp_path / "j") / "old.jsonl"
    RollbackJournal(path)._append(entry)
    if broken:
        break_trust(monkeypatch)

    attack = run(cli(kube_control_plane, str(path), "--assume-cluster"), capsys)

    def check() -> None:
        refused(attack, 1, "is not one this run was allowed to touch (none)")
        batch: Any = client.BatchV1Api(victim.workload.api_client)
        names = {
            j.metadata.name for j in batch.list_namespaced_job(victim.workload.namespace).items
        }
        assert "pc-escalate" not in names

    expect(broken, check)
