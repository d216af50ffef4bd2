"""Issue 20, the acceptance side: a port that can never start ends at once and says why; rows
that read a crashed run are NOT JUDGED naming it; the static and manifest holes are closed
(each new check also passes the bundled good port)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from pathways_chaos.harness.acceptance.loop_runtime import LoopRuns
from pathways_chaos.harness.acceptance.manifest_checks import (
    check_manifest_ramdisk,
    check_num_elastic_instances,
    load_manifest,
)
from pathways_chaos.harness.acceptance.runtime_checks import RUNTIME_CHECKS
from pathways_chaos.harness.acceptance.static_checks import (
    check_mesh_from_all_devices,
    check_minimum_slice_count,
    load_sources,
)
from pathways_chaos.harness.acceptance.table import FAIL, NOT_JUDGED, PASS, SKIP
from pathways_chaos.harness.episodes.loop_episode import load_loop

HERE = Path(__file__).parent
GREEDY = HERE / "loops" / "greedy_loop.py"
SAMPLES = HERE.parents[2] / "suites" / "acceptance" / "samples"
GOOD_MANIFEST = SAMPLES / "good_port" / "jobset.yaml"
GOOD_SOURCE = SAMPLES / "good_port" / "train.py"


@pytest.fixture(scope="module")
def greedy_rows(tmp_path_factory):
    runs = LoopRuns(load_loop(f"{GREEDY}:main"), workdir=tmp_path_factory.mktemp("greedy"))
    t0 = time.monotonic()
    rows = {name: check(runs) for name, check in RUNTIME_CHECKS.items()}
    took = time.monotonic() - t0
    runs.close()
    return rows, took


def test_a_port_waiting_for_more_slices_than_the_fake_has_ends_quickly_saying_so(greedy_rows):
    rows, took = greedy_rows
    assert took < 60  # it hung for 11 minutes before
    row = rows["data-order"]
    assert row.status == FAIL
    assert "the loop waits for 5 slices; this cluster has 4" in row.failure_message()


@pytest.mark.parametrize("check", [c for c in RUNTIME_CHECKS if c != "data-order"])
def test_rows_that_need_the_crashed_fault_free_run_are_not_judged_naming_it(greedy_rows, check):
    row = greedy_rows[0][check]
    assert row.status == NOT_JUDGED, row.reason
    assert row.depends_on == "data-order"
    assert "waits for 5 slices" in row.reason


# -- static: minimum_slice_count against the manifest ---------------------------------------
def _source(tmp_path: Path, minimum: str) -> list[Any]:
    path = tmp_path / "train.py"
    path.write_text(
        "from pathwaysutils.elastic import manager\n"
        "m = manager.Manager()\n"
        f"@m.elastic_retry(minimum_slice_count={minimum}, "
        "retry_policy=manager.ElasticRetryLimit(3))\n"
        "def loop():\n    pass\n"
    )
    return load_sources([path])


def test_minimum_slice_count_above_the_manifests_slices_fails(tmp_path):
    manifest = load_manifest(GOOD_MANIFEST)  # 2 worker slices
    row = check_minimum_slice_count(_source(tmp_path, "5"), manifest)
    assert row.status == FAIL
    assert "elastic_retry(minimum_slice_count=5) waits for 5 slices" in row.failure_message()
    assert f"runs {manifest.slice_count}" in row.failure_message()


@pytest.mark.parametrize("minimum", ["1", "2", "None", "n_slices"])
def test_minimum_slice_count_within_the_slices_or_unknown_passes(tmp_path, minimum):
    row = check_minimum_slice_count(_source(tmp_path, minimum), load_manifest(GOOD_MANIFEST))
    assert row.status == PASS, row.failure_message()


@pytest.mark.parametrize(
    ("prelude", "status"),
    [
        ("MIN_SLICES = 3\n", FAIL),  # it PASSED: only a literal was read
        ("MIN_SLICES: int = 3\n", FAIL),
        ("MIN_SLICES = 3\nMIN_SLICES = 1\n", PASS),  # bound twice: not a constant
        ("MIN_SLICES = 3\nfor MIN_SLICES in range(2):\n    pass\n", PASS),
    ],
)
def test_a_module_constant_minimum_is_read(tmp_path, prelude, status):
    path = tmp_path / "train.py"
    path.write_text(
        prelude + "from pathwaysutils.elastic import manager\n"
        "m = manager.Manager()\n"
        "@m.elastic_retry(minimum_slice_count=MIN_SLICES, "
        "retry_policy=manager.ElasticRetryLimit(3))\n"
        "def loop():\n    pass\n"
    )
    row = check_minimum_slice_count(load_sources([path]), load_manifest(GOOD_MANIFEST))
    assert row.status == status, row.reason


def test_the_good_port_passes_minimum_slice_count():
    row = check_minimum_slice_count(load_sources([GOOD_SOURCE]), load_manifest(GOOD_MANIFEST))
    assert row.status == PASS, row.failure_message()
    assert "minimum_slice_count=1" in row.reason


def test_minimum_slice_count_without_worker_slices_is_skipped(tmp_path):
    class NoWorkers:
        slice_count = 0
        label = "x"

    assert check_minimum_slice_count(_source(tmp_path, "5"), NoWorkers()).status == SKIP


# -- manifest: the elastic flag on the wrong container -------------------------------------
def _docs() -> list[Any]:
    return [d for d in yaml.safe_load_all(GOOD_MANIFEST.read_text()) if d]


def _containers(docs: list[Any]) -> list[dict[str, Any]]:
    jobset = next(d for d in docs if d["kind"] == "JobSet")
    out = []
    for rj in jobset["spec"]["replicatedJobs"]:
        spec = rj["template"]["spec"]["template"]["spec"]
        out += spec.get("initContainers", []) + spec["containers"]
    return out


def test_the_elastic_flag_on_the_client_container_is_named_where_it_is(tmp_path):
    docs = copy.deepcopy(_docs())
    every = _containers(docs)
    proxy = next(c for c in every if c["name"] == "pathways-proxy")
    flag = next(a for a in proxy["args"] if a.startswith("--num_elastic_instances"))
    proxy["args"].remove(flag)
    client = next(
        c
        for c in every
        if c["name"] not in ("pathways-proxy", "pathways-rm", "pathways-worker")
        and not c["name"].startswith("colocated")
    )
    client.setdefault("args", []).append(flag)
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    row = check_num_elastic_instances(load_manifest(path))
    assert row.status == FAIL
    message = row.failure_message()
    assert f"{flag} is on container" in message and client["name"] in message
    assert "should be on pathways-proxy" in message


def test_the_good_manifest_still_passes_num_elastic_instances():
    assert check_num_elastic_instances(load_manifest(GOOD_MANIFEST)).status == PASS


# -- static: jax.local_devices() reported as itself ---------------------------------------
@pytest.mark.parametrize("call", ["jax.devices", "jax.local_devices"])
def test_the_device_list_is_named_as_written(tmp_path, call):
    path = tmp_path / "train.py"
    path.write_text(
        "import jax\nimport numpy as np\nfrom pathwaysutils.elastic import manager\n"
        f"devs = {call}()\n"
        "mesh = jax.sharding.Mesh(np.array(devs).reshape(2, -1), ('r', 'd'))\n"
    )
    row = check_mesh_from_all_devices(load_sources([path]))
    assert row.status == FAIL
    assert f"is built from {call}()" in row.failure_message()


def test_the_good_port_still_passes_the_mesh_check():
    assert check_mesh_from_all_devices(load_sources([GOOD_SOURCE])).status == PASS


# -- ramdisk: the fix names a missing CheckpointConfiguration --------------------------------
def test_ramdisk_fix_names_a_missing_checkpoint_configuration(tmp_path):
    docs = [d for d in _docs() if d.get("kind") != "CheckpointConfiguration"]
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    manifest = load_manifest(path)
    if not manifest.uses_mtc:
        pytest.skip("the good port does not use Multi-Tier Checkpointing")
    row = check_manifest_ramdisk(manifest, 8e9)
    assert row.status == FAIL
    assert "add a CheckpointConfiguration" in row.fix
    assert "raise inMemoryVolumeSize" not in row.fix


def test_ramdisk_fix_for_a_short_volume_still_says_raise_it():
    manifest = load_manifest(GOOD_MANIFEST)
    if not manifest.checkpoint_configurations:
        pytest.skip("the good port has no CheckpointConfiguration")
    row = check_manifest_ramdisk(manifest, 1e15)
    assert row.status == FAIL and "raise inMemoryVolumeSize" in row.fix


# -- a toolkit exception inside a row is NOT JUDGED, a user's is theirs ----------------------
def test_a_toolkit_exception_in_a_row_is_not_judged_with_the_traceback():
    from pathways_chaos.harness.acceptance import table

    def row(runs):
        return table.summary([runs])  # raises inside pathways-chaos' own code

    result = table.judge_row("data-order", row, object())
    assert result.status == NOT_JUDGED and result.ok
    assert result.reason.startswith(
        "not judged: the judge failed (bug in pathways-chaos): AttributeError"
    )
    assert "Traceback" in result.judge_error and "table.py" in result.judge_error
    assert result.to_json()["status"] == NOT_JUDGED


def test_an_exception_from_the_users_code_in_a_row_is_their_failure():
    from pathways_chaos.harness.acceptance import table

    def users_init_state():
        raise ValueError("shape mismatch in init")

    def row(adapter):
        return table.CheckResult("data-order", "t", "f", note=str(adapter()))

    result = table.judge_row("data-order", row, users_init_state)
    assert result.status == FAIL
    assert "your code raised ValueError: shape mismatch in init" in result.failure_message()
    assert "test_trainer_guard_rows.py" in result.findings[0].where
    assert "users_init_state" in result.findings[0].where


def test_bad_input_in_a_row_still_raises_its_one_line():
    from pathways_chaos.harness.acceptance import table
    from pathways_chaos.harness.errors import ChaosConfigError

    def row():
        raise ChaosConfigError("--acceptance-x=1: use 2")

    with pytest.raises(ChaosConfigError, match="use 2"):
        table.judge_row("data-order", row)
