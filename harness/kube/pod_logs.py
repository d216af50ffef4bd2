"""On a failed chaos test against a cluster: the logs of the head and of the affected slices.

A quiet client log does not mean healthy workers (the migration article's lesson), so the
report carries what the Pods said. Registered by the plugin only with ``--cluster``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import pytest

from pathways_chaos.faults.jobset import (
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    WORKER_JOB_NAMES,
)
from pathways_chaos.harness.kube.kube_cluster import (
    ClusterConnection,
)

TAIL_LINES = 200


def affected_slices(events: Iterable[dict[str, Any]]) -> list[int]:
    return sorted(
        {e["fault"]["slice"] for e in events if e["kind"] == "fault" and "slice" in e["fault"]}
    )


def collect(api: Any, namespace: str, jobset: str, slices: Iterable[int]) -> dict[str, str]:
    """pod/container -> its log tail; an unreadable log says why instead."""
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    wanted = set(slices)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobset}").items
    out: dict[str, str] = {}
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        labels = pod.metadata.labels or {}
        role = labels.get(REPLICATED_JOB_LABEL, "")
        if role in WORKER_JOB_NAMES and int(labels.get(JOB_INDEX_LABEL, -1)) not in wanted:
            continue
        for container in pod.spec.containers:
            key = f"{pod.metadata.name}/{container.name}"
            try:
                out[key] = str(
                    core.read_namespaced_pod_log(
                        pod.metadata.name,
                        namespace,
                        container=container.name,
                        tail_lines=TAIL_LINES,
                        _request_timeout=10,
                    )
                    or "(empty log)"
                )
            except Exception as error:  # no kubelet, Pod gone, forbidden: say so
                status = getattr(error, "status", "")
                out[key] = f"(log unavailable: {type(error).__name__} {status})".strip()
    return out


class PodLogCollector:
    """Attaches Pod logs to the report of every failed test that ran an episode on a cluster.

    It learns of episodes through ``pytest_chaos_episode_finished`` and of the cluster from the
    ``cluster_connection`` fixture (``connect``); it never looks inside a test's fixtures.
    """

    def __init__(self) -> None:
        self.connection: ClusterConnection | None = None
        self._events: dict[str, list[dict[str, Any]]] = {}

    def connect(self, connection: ClusterConnection) -> None:
        self.connection = connection

    def pytest_chaos_episode_finished(self, node: Any, result: Any, verdict: Any) -> None:
        self._events[node.nodeid] = list(result.events)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.when != "call":
            return report
        events = self._events.pop(item.nodeid, None)
        if not report.failed or events is None or self.connection is None:
            return report
        spec = self.connection.spec
        logs = collect(self.connection.api, spec.namespace, spec.jobset, affected_slices(events))
        text = "\n".join(f"--- {pod}\n{body}" for pod, body in logs.items())
        report.sections.append(("pathways-chaos pod logs", text))
        reports = item.config.pluginmanager.get_plugin("pathways-chaos-report")
        if reports is not None:
            for r in reports.reports:
                if r.test == item.nodeid:
                    r.logs.update(logs)
        return report
