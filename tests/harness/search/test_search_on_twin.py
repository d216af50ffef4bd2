"""The search as Kubernetes runs it: ``search --emit-job 4`` applied to the local twin (a real
API server, its job controller and scheduler, Pods run as processes, Indexed Jobs emulated on
1.20), one real Redis example database. One shard finds the broken trainer's failure, a later
run replays it first, the merged report shows all four shards."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from pathways_chaos.fixtures.control_plane import find_kube_binaries
from pathways_chaos.harness.reference.mutants import IteratorRestoredFromCurrentPosition, spec_of

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(find_kube_binaries() is None, reason="no local Kubernetes binaries"),
]

MUTANT = spec_of(IteratorRestoredFromCurrentPosition)
IMAGE = "REGISTRY/pathways-chaos-suite:0.1.0"  # the twin maps it to this checkout's venv
HOST_PATH = "/pathways-chaos-search"


def _cli(*args: str) -> tuple[int, str, str]:
    from pathways_chaos.harness.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def job_run(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from kubernetes import client

    from pathways_chaos.faults.watching import wait_for
    from pathways_chaos.fixtures.twin.indexed import apply_indexed_job
    from pathways_chaos.fixtures.twin.twin import NodePool, Twin

    ns = f"search-{uuid.uuid4().hex[:6]}"
    code, text, err = _cli(
        "search", "--emit-job", "4", "--image", IMAGE, "--namespace", ns,
        "--host-path", HOST_PATH, "--cpu", "100m", "--memory", "1Gi",
        "--trainer", MUTANT, "--properties", "snapshot,dataset,mesh", "--redis", redis_url,
        "--seed", "0", "--rounds", "1", "--examples-per-round", "4", "--budget", "600",
    )  # fmt: skip
    assert code == 0, err
    job = yaml.safe_load(text)
    with Twin([NodePool("cpu-np", 1)]) as twin:
        client.CoreV1Api(twin.api).create_namespace({"metadata": {"name": ns}})
        created = apply_indexed_job(twin.api, ns, job)
        batch = client.BatchV1Api(twin.api)

        def done() -> Any:
            status = batch.read_namespaced_job_status(job["metadata"]["name"], ns).status
            if status.failed:
                pytest.fail(f"a shard's Pod failed: {status}")
            return status if (status.succeeded or 0) >= 4 else None

        wait_for(done, 600, interval=0.5, what="the search Job's 4 completions")
        pods = client.CoreV1Api(twin.api).list_namespaced_pod(ns).items
        indexes = sorted(
            p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods
        )
        host = twin.workdir / "kubelet" / "nodes" / "cpu-np-0" / "host"
        out = host / HOST_PATH.lstrip("/") / "results" / created.metadata.uid
        kept = tmp_path_factory.mktemp("twin-search") / "results"
        import shutil

        shutil.copytree(out, kept)  # the twin's folder goes with it
    reports = [json.loads((kept / f"shard-{i}-of-4.json").read_text()) for i in range(4)]
    return {"out": kept, "reports": reports, "indexes": indexes, "uid": created.metadata.uid}


def test_each_pod_ran_its_own_shard_and_one_found_the_failure(job_run: dict[str, Any]) -> None:
    assert job_run["indexes"] == ["0", "1", "2", "3"]
    reports = job_run["reports"]
    assert [r["shard"] for r in reports] == [0, 1, 2, 3]
    assert len({r["base_seed"] for r in reports}) == 1  # one run: the Job's uid
    found = {r["shard"]: r["findings"] for r in reports if r["findings"]}
    assert list(found) == [1], found
    (finding,) = found[1]
    assert finding["property"] == "dataset" and finding["schedule"].count("@") == 1
    assert finding["replay"].startswith("pathways-chaos replay --schedule ")


def test_a_later_run_replays_the_failure_first(
    job_run: dict[str, Any], redis_url: str, tmp_path: Path
) -> None:
    (finding,) = job_run["reports"][1]["findings"]
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JOB_COMPLETION_INDEX"}
    proc = subprocess.run(
        [sys.executable, "-m", "pathways_chaos.harness.cli.main", "search", "--shard", "0/1",
         "--trainer", MUTANT, "--properties", "dataset", "--out", str(tmp_path / "again"),
         "--redis", redis_url, "--seed", "424242", "--rounds", "1", "--examples-per-round", "4"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads((tmp_path / "again" / "shard-0-of-1.jsonl").read_text().splitlines()[0])
    assert first["schedule"] == finding["schedule"] and not first["ok"] and first["from_database"]


def test_the_merged_report_shows_all_four_shards(job_run: dict[str, Any], tmp_path: Path) -> None:
    page, figures = tmp_path / "search.html", tmp_path / "search.json"
    code, out, _ = _cli(
        "search", "merge", str(job_run["out"]), "--html", str(page), "--json", str(figures)
    )
    assert code == 1 and "4 of 4 shards, 1 failure" in out
    data = json.loads(figures.read_text())
    assert data["shards"] == [0, 1, 2, 3] and data["missing"] == [] and data["overlaps"] == []
    assert "No two shards ran the same seed" in page.read_text()
