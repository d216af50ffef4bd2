"""Shared pieces of the Kubernetes fault tests: armed and dry-run targets on the workload."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import KubeTarget
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload


class Echo(list[str]):
    """Collects what a fault prints, so a test can read it."""

    def __call__(self, line: str) -> None:
        self.append(line)


def make_target(
    workload: PathwaysWorkload, *, armed: bool, journal: RollbackJournal | None = None
) -> KubeTarget:
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
