"""The nightly as Kubernetes runs it: what ``search --emit-job`` prints (a JobSet of the shards and
their merge) applied to the local twin (a real API server, its job controller and scheduler, the
JobSet stand-in, Pods run as processes, Indexed Jobs emulated on 1.20), one real Redis example
database. The broken trainer's nightly ends Failed with the merged report on the volume naming
the shard that found it; a later run replays it first; a planted broken loop fails the nightly
and the sample loop passes it."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.fixtures.control_plane import find_kube_binaries
from pathways_chaos.harness.reference.mutants import IteratorRestoredFromCurrentPosition, spec_of

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(find_kube_binaries() is None, reason="no local Kubernetes binaries"),
]

MUTANT = spec_of(IteratorRestoredFromCurrentPosition)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def emit(arguments: list[str]) -> dict[str, Any]:
    """``pathways-chaos ARGUMENTS`` as a user runs it (``--emit-job`` imports no JAX), parsed."""
    import contextlib
    import io

    import yaml

    from pathways_chaos.harness.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(arguments)
    assert code == 0, err.getvalue()
    return dict(yaml.safe_load(out.getvalue()))


@pytest.fixture(scope="module")
def twin() -> Iterator[Any]:
    from pathways_chaos.fixtures.twin.twin import NodePool, Twin

    with Twin([NodePool("cpu-np", 1)]) as running:
        yield running


def run_nightly(twin: Any, kept: Path, shards: int, *search_args: str) -> dict[str, Any]:
    """The nightly applied and waited for; its status, its shards' indexes, the merge's log and
    a copy of the run's folder (the twin's goes with it)."""
    from kubernetes import client

    from pathways_chaos.fixtures.twin.nightly import (
        apply_nightly,
        emit_arguments,
        merge_log,
        new_namespace,
        wait_nightly,
    )

    nightly = apply_nightly(
        twin, emit(emit_arguments(shards, new_namespace(), "--budget", "600", *search_args))
    )
    status = wait_nightly(twin, nightly, 900)
    pods = (
        client.CoreV1Api(twin.api)
        .list_namespaced_pod(nightly.namespace, label_selector=f"job-name={nightly.name}-shards-0")
        .items
    )
    shutil.copytree(nightly.results, kept)
    core: Any = client.CoreV1Api(twin.api)
    failed = {
        p.metadata.name: str(core.read_namespaced_pod_log(p.metadata.name, nightly.namespace))[
            -2000:
        ]
        for p in pods
        if p.status.phase == "Failed"
    }
    return {
        "failed_pods": failed,
        "out": kept,
        "status": status,
        # the index of each shard Pod that succeeded (a retried Pod's failure is in
        # failed_pods: seen once under two parallel twins, the run's folder gone mid-run)
        "indexes": sorted(
            p.metadata.annotations[INDEX_ANNOTATION] for p in pods if p.status.phase == "Succeeded"
        ),
        "merge_log": merge_log(twin, nightly),
        "uid": nightly.uid,
        "events": list(twin.controller.events),
    }


@pytest.fixture(scope="module")
def job_run(twin: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = run_nightly(
        twin, tmp_path_factory.mktemp("twin-search") / "results", 4,
        "--trainer", MUTANT, "--properties", "snapshot,dataset,mesh", "--redis", redis_url,
        "--seed", "0", "--rounds", "1", "--examples-per-round", "4",
    )  # fmt: skip
    run["reports"] = [
        json.loads((run["out"] / f"shard-{i}-of-4.json").read_text()) for i in range(4)
    ]
    return run


def test_the_nightly_failed_because_its_merge_found_the_failure(job_run: dict[str, Any]) -> None:
    status = job_run["status"]
    assert status["terminalState"] == "Failed", job_run["events"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert "merge-0" in failed["message"], failed  # the shards completed; the merge is red
    assert "1 failure" in job_run["merge_log"] and "shard 1, dataset: " in job_run["merge_log"]
    assert "replay: pathways-chaos replay --schedule " in job_run["merge_log"]
    out = job_run["out"]
    figures = json.loads((out / "report.json").read_text())
    assert figures["shards"] == [0, 1, 2, 3] and figures["missing"] == []
    (finding,) = figures["findings"]
    assert finding["shard"] == 1 and finding["replay"].startswith("pathways-chaos replay ")
    assert "No two shards ran the same seed" in (out / "report.html").read_text()
    suite = ET.fromstring((out / "report.xml").read_text())
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert sorted(cases) == ["shard 0", "shard 1", "shard 2", "shard 3"]
    failure = cases["shard 1"].find("failure")
    assert failure is not None and finding["replay"] in (failure.text or "")
    assert all(cases[f"shard {i}"].find("failure") is None for i in (0, 2, 3))


@pytest.mark.parametrize(
    ("loop", "ends"),
    [
        ("pathways_chaos.harness.reference.user_loop:main", "Completed"),
        (
            "pathways_chaos.harness.reference.user_loop_bugs:iterator_from_current_position",
            "Failed",
        ),
    ],
    ids=["sample-loop-passes", "planted-broken-loop-fails"],
)
def test_a_loop_nightly_ends_as_the_search_found(
    twin: Any, redis_url: str, tmp_path: Path, loop: str, ends: str
) -> None:
    run = run_nightly(
        twin, tmp_path / "results", 2, "--loop", loop, "--properties", "dataset",
        "--redis", redis_url, "--seed", "7", "--rounds", "1", "--examples-per-round", "2",
        "--no-shrink",  # found is enough to fail the night; shrinking a loop's costs minutes
    )  # fmt: skip
    assert run["status"]["terminalState"] == ends, (run["events"], run["merge_log"])
    assert run["indexes"] == ["0", "1"], run["failed_pods"]
    figures = json.loads((run["out"] / "report.json").read_text())
    assert figures["shards"] == [0, 1] and figures["errors"] == []
    assert bool(figures["findings"]) is (ends == "Failed"), figures["findings"]
    for finding in figures["findings"]:
        assert finding["replay"].startswith(f"pathways-chaos replay --loop {loop} ")


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
