"""Fixtures the toolkit's own tests share (the repository's root conftest makes the devices)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported when a Kubernetes test asks: a plain run stays light
    from pathways_chaos.faults.journal import RollbackJournal
    from pathways_chaos.faults.kubernetes import KubeTarget
    from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel once per run, shared by pytest-xdist workers.

    Two builds of one source tree at once collide in setuptools' in-tree build folder, so the
    first worker builds under a lock and the others take its wheel.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "project-wheel"
    with open(shared / "project-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(folder.glob("pathways_chaos-*.whl"))
        if not built:
            out = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), ROOT],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
            built = sorted(folder.glob("pathways_chaos-*.whl"))
    (wheel,) = built
    return wheel


@pytest.fixture
def late_snapshotter_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded machine, made certain: every Orbax Snapshotter made while it is active has a
    worker thread that takes each save 0.2 s late, far longer than the steps between saves.
    Unless a save is finished before training goes on, the next is skipped as "busy"."""
    import queue
    import time
    import types

    from orbax.checkpoint.experimental.v1._src.training.pathways import snapshotter

    class LateQueue(queue.Queue):  # type: ignore[type-arg]
        def get(self, block: bool = True, timeout: float | None = None) -> object:
            with self.not_empty:
                while not self._qsize():
                    self.not_empty.wait()
            time.sleep(0.2)
            return super().get(block, timeout)

    monkeypatch.setattr(snapshotter, "queue", types.SimpleNamespace(Queue=LateQueue))


@pytest.fixture(scope="session", autouse=True)
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The journal key (and journals by default) in a folder of this run, never the user's own
    ``~/.local/state``; subprocesses (a child pytest, the CLI) inherit it and so share the key."""
    folder = tmp_path_factory.mktemp("state")
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(folder)
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


# The Kubernetes fault tests' targets (tests/faults, tests/fixtures, tests/harness/cli):
# armed and dry-run targets on the local workload.


class Echo(list[str]):
    """Collects what a fault prints, so a test can read it."""

    def __call__(self, line: str) -> None:
        self.append(line)


def make_target(
    workload: PathwaysWorkload, *, armed: bool, journal: RollbackJournal | None = None
) -> KubeTarget:
    from pathways_chaos.faults.kubernetes import KubeTarget

    return KubeTarget(
        api_client=workload.api_client,
        namespace=workload.namespace,
        jobset=workload.jobset,
        armed=armed,
        allowed_namespaces=frozenset({workload.namespace}),
        journal=journal,
        echo=Echo(),
    )


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "rollback.jsonl"


@pytest.fixture
def kube_target(pathways_workload: PathwaysWorkload, journal_path: Path) -> Iterator[KubeTarget]:
    """Armed (the local cluster is ours), journalled, rolled back at teardown whatever happens."""
    from pathways_chaos.faults.journal import RollbackJournal

    journal = RollbackJournal(journal_path)
    target = make_target(pathways_workload, armed=True, journal=journal)
    with journal.guard(target.api_client):
        yield target


@pytest.fixture
def dry_target(pathways_workload: PathwaysWorkload) -> KubeTarget:
    return make_target(pathways_workload, armed=False)


@pytest.fixture
def make_kube_target() -> Callable[..., KubeTarget]:
    """``make_kube_target(workload, armed=..., journal=...)`` for tests that need variants."""
    return make_target
