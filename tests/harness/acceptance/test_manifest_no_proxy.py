"""A JobSet that runs Pathways (a resource manager, workers) without the proxy fails once, not
SKIP three times as "a shared Pathways service?" with exit 0 (a blind tester's case); a client
of a shared service, whose JobSet runs no Pathways of its own, is still SKIP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pathways_chaos.harness.acceptance.manifest_checks import run_manifest_checks

GOOD = Path(__file__).parents[3] / "suites" / "acceptance" / "samples" / "good_port" / "jobset.yaml"
PROXY_ROWS = ("xla-flags-on-proxy", "gcs-scratch-location", "num-elastic-instances")


def _without(tmp_path: Path, *names: str) -> dict[str, str]:
    """The good sample without the containers (or replicatedJobs) named; each row's status."""
    docs = [d for d in yaml.safe_load_all(GOOD.read_text()) if d]
    for doc in docs:
        if doc.get("kind") != "JobSet":
            continue
        jobs: list[dict[str, Any]] = doc["spec"]["replicatedJobs"]
        jobs[:] = [j for j in jobs if j["name"] not in names]
        for j in jobs:
            spec = j["template"]["spec"]["template"]["spec"]
            for key in ("containers", "initContainers"):
                if key in spec:
                    spec[key] = [c for c in spec[key] if c["name"] not in names]
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return {r.check: r.status for r in run_manifest_checks(path, 8e9)}


def test_pathways_without_its_proxy_fails_one_row(tmp_path: Path) -> None:
    rows = _without(tmp_path, "pathways-proxy")
    assert [rows[r] for r in PROXY_ROWS] == ["NOT JUDGED", "NOT JUDGED", "FAIL"]


def test_a_client_of_a_shared_service_is_skipped(tmp_path: Path) -> None:
    rows = _without(tmp_path, "pathways-proxy", "pathways-rm", "pathways-worker", "worker")
    assert [rows[r] for r in PROXY_ROWS] == ["SKIP"] * 3
