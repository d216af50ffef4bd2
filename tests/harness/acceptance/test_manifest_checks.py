"""Each manifest check flags the good sample with its one pitfall put back, and passes it as is;
and the containers are found by role, whatever they and their jobs are called."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pathways_chaos.harness.acceptance.manifest_checks import (
    MANIFEST_CHECKS,
    check_manifest_ramdisk,
    load_manifest,
    run_manifest_checks,
)
from pathways_chaos.harness.errors import ChaosConfigError

SAMPLES = Path(__file__).parents[3] / "suites" / "acceptance" / "samples"
GOOD = SAMPLES / "good_port" / "jobset.yaml"
PITFALLS = SAMPLES / "pitfall_port" / "jobset.yaml"

Docs = list[dict[str, Any]]


def good_docs() -> Docs:
    return [d for d in yaml.safe_load_all(GOOD.read_text()) if d]


def job(docs: Docs, name: str) -> dict[str, Any]:
    jobset = next(d for d in docs if d["kind"] == "JobSet")
    rj = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == name)
    return rj


def pod(docs: Docs, name: str) -> dict[str, Any]:
    return job(docs, name)["template"]["spec"]["template"]["spec"]


def container(docs: Docs, job_name: str, name: str) -> dict[str, Any]:
    spec = pod(docs, job_name)
    every = spec.get("initContainers", []) + spec["containers"]
    return next(c for c in every if c["name"] == name)


def proxy(docs: Docs) -> dict[str, Any]:
    return container(docs, "pathways-head", "pathways-proxy")


def drop_arg(c: dict[str, Any], prefix: str) -> None:
    c["args"] = [a for a in c["args"] if not a.startswith(prefix)]


def xla_only_in_client(docs: Docs) -> None:
    drop_arg(proxy(docs), "--xla_")


def no_scratch(docs: Docs) -> None:
    drop_arg(proxy(docs), "--gcs_scratch_location")


def wrong_elastic_count(docs: Docs) -> None:
    drop_arg(proxy(docs), "--num_elastic_instances")
    proxy(docs)["args"].append("--num_elastic_instances=4")


def latest_image(docs: Docs) -> None:
    proxy(docs)["image"] = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:latest"


def sidecar_skew(docs: Docs) -> None:
    c = container(docs, "worker", "colocated-python-sidecar")
    c["image"] = c["image"].replace("jax-0.10.1", "jax-0.9.0")


def disk_shm(docs: Docs) -> None:
    pod(docs, "pathways-head")["volumes"][0]["emptyDir"] = {}


def no_sidecar_name(docs: Docs) -> None:
    drop_arg(proxy(docs), "--sidecar_name")


def csi_on_head(docs: Docs) -> None:
    head = pod(docs, "pathways-head")
    head["volumes"].append(
        {"name": "ckpt", "csi": {"driver": "multitier-checkpoint.csi.storage.gke.io"}}
    )
    container(docs, "pathways-head", "jax-client")["volumeMounts"].append(
        {"name": "ckpt", "mountPath": "/tmp/mtc_checkpoints"}
    )


def sidecar_without_shared_dir(docs: Docs) -> None:
    c = container(docs, "worker", "colocated-python-sidecar")
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/tmp/sidecar"]


def no_priority(docs: Docs) -> None:
    del pod(docs, "worker")["priorityClassName"]


def worker_fails_at_first_loss(docs: Docs) -> None:
    job(docs, "worker")["template"]["spec"]["backoffLimit"] = 0


# check -> (the pitfall, a phrase the finding must carry)
PITFALLS_BY_CHECK: dict[str, tuple[Callable[[Docs], None], str]] = {
    "xla-flags-on-proxy": (xla_only_in_client, "pathways-head/jax-client: XLA flags"),
    "gcs-scratch-location": (no_scratch, "pathways-proxy: --gcs_scratch_location is missing"),
    "num-elastic-instances": (wrong_elastic_count, "=4 but the worker jobs have 2 slices"),
    "image-pins": (latest_image, "floats on latest"),
    "jax-versions-match": (sidecar_skew, "0.9.0 differs from the client's 0.10.1"),
    "dev-shm": (disk_shm, "/dev/shm is volume dshm, an emptyDir on the node's disk"),
    "mtc-sidecar-name": (no_sidecar_name, "--sidecar_name is not set"),
    "mtc-csi-volume": (csi_on_head, "jax-client: mounts the multitier-checkpoint"),
    "sidecar-shared-dir": (sidecar_without_shared_dir, "does not mount /tmp/sidecar"),
    "worker-priority-class": (no_priority, "worker: the pod template has no priorityClassName"),
    "worker-restarts": (
        worker_fails_at_first_loss,
        "worker: backoffLimit: 0 and no podFailurePolicy",
    ),
}


def write(tmp_path: Path, docs: Docs) -> Path:
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_every_check_has_a_pitfall():
    assert set(PITFALLS_BY_CHECK) == set(MANIFEST_CHECKS)


@pytest.mark.parametrize("check", list(PITFALLS_BY_CHECK))
def test_flags_the_known_bad_manifest(tmp_path, check):
    docs = good_docs()
    pitfall, phrase = PITFALLS_BY_CHECK[check]
    pitfall(docs)
    result = MANIFEST_CHECKS[check](load_manifest(write(tmp_path, docs)))
    assert not result.ok
    assert any(phrase in str(f) for f in result.findings), result.failure_message()
    # Only this check sees the pitfall: the others still pass.
    others = [c for c, fn in MANIFEST_CHECKS.items() if c != check]
    manifest = load_manifest(write(tmp_path, docs))
    assert [c for c in others if not MANIFEST_CHECKS[c](manifest).ok] == []


@pytest.mark.parametrize("check", list(MANIFEST_CHECKS))
def test_passes_the_known_good_manifest(check):
    result = MANIFEST_CHECKS[check](load_manifest(GOOD))
    assert result.ok, result.failure_message()


def test_the_sample_ports():
    bad = run_manifest_checks(PITFALLS, params=8e9)
    good = run_manifest_checks(GOOD, params=8e9)
    assert [r.check for r in bad if not r.ok] == [*MANIFEST_CHECKS, "ramdisk-size"]
    assert all(r.ok for r in good), [r.failure_message() for r in good if not r.ok]


def test_mtc_checks_pass_without_mtc(tmp_path):
    docs = good_docs()
    docs = [d for d in docs if d["kind"] != "CheckpointConfiguration"]
    drop_arg(proxy(docs), "--sidecar_name")
    worker = pod(docs, "worker")
    del worker["initContainers"]
    worker["volumes"] = [v for v in worker["volumes"] if "csi" not in v]
    c = container(docs, "worker", "pathways-worker")
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/tmp/mtc_checkpoints"]
    manifest = load_manifest(write(tmp_path, docs))
    for check in ("mtc-sidecar-name", "mtc-csi-volume"):
        result = MANIFEST_CHECKS[check](manifest)
        assert result.status == "PASS" and result.reason == "no Multi-Tier Checkpointing"
    assert MANIFEST_CHECKS["sidecar-shared-dir"](manifest).reason == "no colocated-Python sidecar"
    assert check_manifest_ramdisk(manifest, 8e9).reason == "no Multi-Tier Checkpointing"


def test_a_sidecar_alone_is_not_mtc(tmp_path):
    """Colocated Python for input processing needs no --sidecar_name=external."""
    docs = [d for d in good_docs() if d["kind"] != "CheckpointConfiguration"]
    drop_arg(proxy(docs), "--sidecar_name")
    worker = pod(docs, "worker")
    worker["volumes"] = [v for v in worker["volumes"] if "csi" not in v]
    for c in worker["initContainers"] + worker["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "checkpoint-mount"]
    manifest = load_manifest(write(tmp_path, docs))
    assert not manifest.uses_mtc
    assert [r.status for r in run_manifest_checks(write(tmp_path, docs), 8e9)] == ["PASS"] * 12


def test_flags_given_as_separate_words_and_native_sidecars(tmp_path):
    docs = good_docs()
    p = proxy(docs)
    drop_arg(p, "--num_elastic_instances")
    p["args"] += ["--num_elastic_instances", "2"]
    manifest = load_manifest(write(tmp_path, docs))
    assert MANIFEST_CHECKS["num-elastic-instances"](manifest).ok
    assert manifest.named("colocated-python-sidecar")  # found among initContainers


def test_digest_pins_and_untagged_images(tmp_path):
    docs = good_docs()
    proxy(docs)["image"] = "us-docker.pkg.dev/x/proxy_server@sha256:" + "a" * 64
    container(docs, "pathways-head", "pathways-rm")["image"] = "registry:5000/pathways/server"
    result = MANIFEST_CHECKS["image-pins"](load_manifest(write(tmp_path, docs)))
    assert [f.message for f in result.findings] == [
        "image registry:5000/pathways/server has no tag (means latest)"
    ]


def test_jax_versions_from_env_when_tags_do_not_say(tmp_path):
    docs = good_docs()
    client = container(docs, "pathways-head", "jax-client")
    sidecar = container(docs, "worker", "colocated-python-sidecar")
    client["image"], sidecar["image"] = "repo/client:v7", "repo/sidecar:v7"
    manifest = load_manifest(write(tmp_path, docs))
    result = MANIFEST_CHECKS["jax-versions-match"](manifest)
    assert result.status == "SKIP"  # pinned, but the version is not given: say it
    assert "version unknown for jobset.yaml:pathways-head/jax-client (repo/client:v7)" in (
        result.reason
    )
    assert "set JAX_VERSION" in result.reason
    client.setdefault("env", []).append({"name": "JAX_VERSION", "value": "0.10.1"})
    sidecar.setdefault("env", []).append({"name": "JAX_VERSION", "value": "0.10.1"})
    assert MANIFEST_CHECKS["jax-versions-match"](load_manifest(write(tmp_path, docs))).ok


@pytest.mark.parametrize("role", ["pathways-proxy", "pathways-rm", "pathways-worker"])
def test_jax_skew_in_a_pathways_image_fails(tmp_path, role):
    """The old check compared the client with the sidecar only."""
    docs = good_docs()
    job_name = "worker" if role == "pathways-worker" else "pathways-head"
    c = container(docs, job_name, role)
    c["image"] = c["image"].replace("jax-0.10.1", "jax-0.9.0")
    result = MANIFEST_CHECKS["jax-versions-match"](load_manifest(write(tmp_path, docs)))
    assert result.status == "FAIL"
    assert [str(f) for f in result.findings] == [
        f"jobset.yaml:{job_name}/{role}: jax/jaxlib 0.9.0 differs from the client's 0.10.1"
    ]


def test_unknown_versions_never_hide_a_known_mismatch(tmp_path):
    docs = good_docs()
    container(docs, "pathways-head", "jax-client")["image"] = "repo/client:latest"
    sidecar = container(docs, "worker", "colocated-python-sidecar")
    sidecar["image"] = sidecar["image"].replace("jax-0.10.1", "jax-0.9.0")
    result = MANIFEST_CHECKS["jax-versions-match"](load_manifest(write(tmp_path, docs)))
    assert result.status == "FAIL"
    assert [f.message for f in result.findings] == [
        "jax/jaxlib 0.9.0 differs from the Pathways images' 0.10.1",
        "version unknown (repo/client:latest)",
    ]
    # Without the skew the floating client is image-pins' finding: not judged here.
    sidecar["image"] = sidecar["image"].replace("jax-0.9.0", "jax-0.10.1")
    result = MANIFEST_CHECKS["jax-versions-match"](load_manifest(write(tmp_path, docs)))
    assert result.status == "NOT JUDGED"
    assert result.reason.startswith("depends on image-pins, which failed: version unknown for")


def test_containers_are_found_by_role_not_by_name(tmp_path):
    """A client called anything, a proxy known by its image, workers in a job called anything
    and the sidecar known by its env: every pitfall is still found."""
    docs = good_docs()
    jobset = docs[0]
    head, worker = jobset["spec"]["replicatedJobs"]
    head["name"], worker["name"] = "controller", "tpu-slices"
    head_pod = head["template"]["spec"]["template"]["spec"]
    worker_pod = worker["template"]["spec"]["template"]["spec"]
    names = {"pathways-proxy": "proxy", "pathways-rm": "rm", "jax-client": "trainer"}
    for c in head_pod["containers"]:
        c["name"] = names[c["name"]]
    head_pod["containers"].reverse()  # not the positions the samples use
    worker_pod["containers"][0]["name"] = "server"
    sidecar = worker_pod["initContainers"][0]
    sidecar["name"] = "py-sidecar"
    sidecar["env"] = [{"name": "GRPC_SERVER_ADDRESS", "value": "0.0.0.0:50051"}]
    jobset["spec"]["coordinator"] = {"replicatedJob": "controller"}
    path = write(tmp_path, docs)
    manifest = load_manifest(path)
    assert [c.name for c in manifest.clients()] == ["trainer"]
    assert [c.name for c in manifest.role("colocated-python-sidecar")] == ["py-sidecar"]
    assert [p.job for p in manifest.worker_pods] == ["tpu-slices"]
    assert all(r.status == "PASS" for r in run_manifest_checks(path, 8e9))
    # The pitfalls, on the renamed roles.
    sidecar["image"] = sidecar["image"].replace("jax-0.10.1", "jax-0.9.0")
    sidecar["volumeMounts"] = []
    del worker_pod["priorityClassName"]
    trainer = next(c for c in head_pod["containers"] if c["name"] == "trainer")
    trainer["volumeMounts"] = []
    failed = {r.check for r in run_manifest_checks(write(tmp_path, docs), 8e9) if not r.ok}
    assert failed == {
        "jax-versions-match",
        "mtc-csi-volume",
        "sidecar-shared-dir",
        "worker-priority-class",
        "dev-shm",
    }


@pytest.mark.parametrize(
    ("args", "status", "phrase"),
    [
        (["--num_elastic_instances=2"], "PASS", "--num_elastic_instances=2 = 2 worker slices"),
        (["--num_elastic_slices=2"], "PASS", "--num_elastic_slices=2 = 2 worker slices"),
        (["--num_elastic_slices", "2"], "PASS", "--num_elastic_slices=2 = 2 worker slices"),
        (["--num_elastic_slices=3"], "FAIL", "--num_elastic_slices=3 but the worker jobs have 2"),
        # fewer is allowed: pathwaysutils' generator and pathways-job's sample run 1 of 2
        (["--num_elastic_slices=1"], "PASS", "--num_elastic_slices=1 of 2 worker slices"),
        (["--num_elastic_slices=0"], "FAIL", "--num_elastic_slices=0 but the worker jobs have 2"),
        (
            ["--num_elastic_instances=2", "--num_elastic_slices=3"],
            "FAIL",
            "--num_elastic_instances=2 and --num_elastic_slices=3 disagree",
        ),
        ([], "FAIL", "neither --num_elastic_instances nor --num_elastic_slices is set"),
    ],
)
def test_both_elastic_spellings(tmp_path, args, status, phrase):
    docs = good_docs()
    drop_arg(proxy(docs), "--num_elastic")
    proxy(docs)["args"] += args
    result = MANIFEST_CHECKS["num-elastic-instances"](load_manifest(write(tmp_path, docs)))
    assert result.status == status
    assert phrase in result.reason


@pytest.mark.parametrize(
    ("volume", "ok"),
    [
        ({"emptyDir": {"medium": "Memory"}}, True),
        ({"emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}, True),
        ({"emptyDir": {}}, False),
        ({"hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}, False),
    ],
)
def test_shared_volumes_are_judged_by_medium(tmp_path, volume, ok):
    """The old shared-directory check never read the medium its fix asked for."""
    docs = good_docs()
    worker = pod(docs, "worker")
    worker["volumes"] = [v for v in worker["volumes"] if v["name"] != "shared-tmp"]
    worker["volumes"].append({"name": "shared-tmp", **volume})
    head = pod(docs, "pathways-head")
    head["volumes"] = [{"name": "dshm", **volume}]
    manifest = load_manifest(write(tmp_path, docs))
    for check in ("sidecar-shared-dir", "dev-shm"):
        assert MANIFEST_CHECKS[check](manifest).ok is ok, check


def test_the_shared_directory_is_where_the_worker_flag_says(tmp_path):
    docs = good_docs()
    for c in (
        container(docs, "worker", "pathways-worker"),
        container(docs, "worker", "colocated-python-sidecar"),
    ):
        for m in c["volumeMounts"]:
            if m["mountPath"] == "/tmp/sidecar":
                m["mountPath"] = "/dev/shm/pathways"
    result = MANIFEST_CHECKS["sidecar-shared-dir"](load_manifest(write(tmp_path, docs)))
    assert not result.ok and "does not mount /tmp/sidecar" in result.reason
    worker = container(docs, "worker", "pathways-worker")
    drop_arg(worker, "--cloud_pathways_sidecar_shm_directory")
    worker["args"].append("--cloud_pathways_sidecar_shm_directory=/dev/shm/pathways")
    result = MANIFEST_CHECKS["sidecar-shared-dir"](load_manifest(write(tmp_path, docs)))
    assert result.ok and result.reason == "/dev/shm/pathways shared through memory"


def test_mtc_without_a_checkpoint_configuration_is_never_a_pass(tmp_path):
    docs = [d for d in good_docs() if d["kind"] != "CheckpointConfiguration"]
    manifest = load_manifest(write(tmp_path, docs))
    for params in (8e9, None):
        result = check_manifest_ramdisk(manifest, params)
        assert result.status == "FAIL"
        assert "no CheckpointConfiguration was given" in result.reason
        assert "--acceptance-manifest" in result.reason


def test_headless_manifests_skip_the_client_checks(tmp_path):
    docs = good_docs()
    head = pod(docs, "pathways-head")
    head["containers"] = [c for c in head["containers"] if c["name"] != "jax-client"]
    manifest = load_manifest(write(tmp_path, docs))
    for check in ("xla-flags-on-proxy", "dev-shm"):
        result = MANIFEST_CHECKS[check](manifest)
        assert result.status == "SKIP" and "no JAX client container" in result.reason


def test_ramdisk_sized_from_the_worker_parallelism(tmp_path):
    manifest = load_manifest(GOOD)  # 16 hosts per slice, 16Gi
    assert check_manifest_ramdisk(manifest, 8e9).ok  # 13.8 GB needed
    short = check_manifest_ramdisk(manifest, 10e9)  # 17.25 GB needed > 17.18 GB
    assert not short.ok and "16 hosts per slice" in short.reason
    unknown = check_manifest_ramdisk(manifest, None)
    assert unknown.status == "SKIP" and "pass --acceptance-params N" in unknown.reason


def test_bad_input_is_one_line_saying_what_to_do(tmp_path):
    with pytest.raises(ChaosConfigError, match="no such file or folder"):
        load_manifest(tmp_path / "missing.yaml")
    (tmp_path / "cm.yaml").write_text("kind: ConfigMap\n")
    with pytest.raises(ChaosConfigError, match="no JobSet with replicatedJobs found"):
        load_manifest(tmp_path / "cm.yaml")
    (tmp_path / "bad.yaml").write_text("kind: [JobSet\n")
    with pytest.raises(ChaosConfigError, match=r"bad.yaml:\d+: not valid YAML"):
        load_manifest(tmp_path / "bad.yaml")


def test_a_folder_of_manifests(tmp_path):
    docs = good_docs()
    (tmp_path / "jobset.yaml").write_text(yaml.safe_dump(docs[0]))
    (tmp_path / "mtc.yml").write_text(yaml.safe_dump(docs[1]))
    manifest = load_manifest(tmp_path)
    assert check_manifest_ramdisk(manifest, 8e9).ok
    assert copy.deepcopy(manifest.slice_count) == 2


@pytest.mark.parametrize(
    ("value", "env", "phrase"),
    [
        ('""', [], "missing or empty"),
        ("/tmp/scratch", [], "is not a Cloud Storage location"),
        ("gs://", [], "is not a Cloud Storage location"),
        ("$(SCRATCH)", [], "refers to $(SCRATCH), which its env does not set"),
        ("$(SCRATCH)", [{"name": "SCRATCH", "value": "/local"}], "not a Cloud Storage"),
        ("$(SCRATCH)/tmp", [{"name": "SCRATCH", "value": "gs://b"}], None),
        ("$(SCRATCH)", [{"name": "SCRATCH", "valueFrom": {"configMapKeyRef": {}}}], None),
        ("'gs://bucket/tmp'", [], None),
    ],
)
def test_the_scratch_location_is_a_bucket(tmp_path, value, env, phrase):
    """An empty string in quotes, a local path and an unset $(VAR) all PASSED."""
    docs = good_docs()
    drop_arg(proxy(docs), "--gcs_scratch_location")
    proxy(docs)["args"].append(f"--gcs_scratch_location={value}")
    proxy(docs)["env"] = proxy(docs).get("env", []) + env
    result = MANIFEST_CHECKS["gcs-scratch-location"](load_manifest(write(tmp_path, docs)))
    if phrase is None:
        assert result.ok, result.failure_message()
    else:
        assert any(phrase in str(f) for f in result.findings), result.failure_message()


def test_a_kustomization_or_a_helm_template_is_refused_with_how_to_render_it(tmp_path):
    """A kustomization's patch (replicas 2 -> 4) was silently not applied, and its base
    PASSED as if deployed; a Helm template said only "not valid YAML"."""
    (tmp_path / "k").mkdir()
    write(tmp_path / "k", good_docs())
    (tmp_path / "k" / "kustomization.yaml").write_text("resources:\n- jobset.yaml\n")
    with pytest.raises(ChaosConfigError, match=r"kubectl kustomize .* > rendered.yaml"):
        load_manifest(tmp_path / "k")
    (tmp_path / "h").mkdir()
    helm = tmp_path / "h" / "jobset.yaml"
    helm.write_text(GOOD.read_text() + "\n---\nreplicas: {{ .Values.slices }}\n")
    with pytest.raises(ChaosConfigError, match=r"Helm template .*helm template"):
        load_manifest(tmp_path / "h")


def test_a_list_or_a_json_file_in_a_folder_is_read(tmp_path):
    """``kind: List`` (kubectl get -o yaml) and a .json file in a folder found no JobSet."""
    import json

    listed = {"apiVersion": "v1", "kind": "List", "items": good_docs()}
    (tmp_path / "jobset.json").write_text(json.dumps(listed))
    manifest = load_manifest(tmp_path)
    assert manifest.slice_count == load_manifest(GOOD).slice_count
    assert MANIFEST_CHECKS["num-elastic-instances"](manifest).ok


def test_no_priority_class_anywhere_is_optional_hot_swap(tmp_path):
    """pathwaysutils' generator writes no priority class by default, and the guide makes
    hot-swap optional: that FAILED. A class on another pod but not the workers still does."""
    docs = good_docs()
    for name in ("worker", "pathways-head"):
        pod(docs, name).pop("priorityClassName", None)
    result = MANIFEST_CHECKS["worker-priority-class"](load_manifest(write(tmp_path, docs)))
    assert result.status == "PASS" and "hot-swap is not set up" in result.reason


def test_a_checkpoint_configuration_for_another_node_pool_is_not_judged_as_this_ones(tmp_path):
    """A second CheckpointConfiguration for a v5e pool (1Gi) FAILED the v6e job's ramdisk-size."""
    docs = good_docs()
    pod(docs, "worker")["nodeSelector"] = {"node.kubernetes.io/instance-type": "ct6e-standard-4t"}
    other = copy.deepcopy(next(d for d in docs if d["kind"] == "CheckpointConfiguration"))
    other["metadata"]["name"] = "other-pool-mtc"
    other["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "ct5lp-hightpu-4t"}
    other["spec"]["inMemoryVolumeSize"] = "1Gi"
    manifest = load_manifest(write(tmp_path, [*docs, other]))
    assert [name for name, _ in manifest.checkpoint_configurations] == ["good-port-mtc"]
    assert check_manifest_ramdisk(manifest, 8e9).ok
    other["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "ct6e-standard-4t"}
    both = load_manifest(write(tmp_path, [*docs, other]))  # the same pool: both are judged
    assert not check_manifest_ramdisk(both, 8e9).ok


IGNORE_DISRUPTION = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


RESTART_ANYWAY = {"rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}


@pytest.mark.parametrize(
    ("backoff", "failure_policy", "elastic", "policy", "status", "phrase"),
    [
        (None, None, True, None, "PASS", "every worker Job may recreate a lost pod"),  # 6
        (24, None, True, None, "PASS", "every worker Job may recreate a lost pod"),  # generator
        (0, None, True, None, "FAIL", "and the JobSet with it"),
        (0, {"maxRestarts": 0}, False, None, "FAIL", "the training ends"),
        (
            0,
            {"maxRestarts": 3},
            True,
            None,
            "PASS",
            "recovery from the last checkpoint, not elastic",
        ),
        (0, {"maxRestarts": 3}, False, None, "PASS", "the guide's recovery by restart"),
        (0, RESTART_ANYWAY, False, None, "PASS", "restarts the whole JobSet, the JAX client too"),
        (0, None, True, IGNORE_DISRUPTION, "PASS", "every worker Job may recreate a lost pod"),
        ("lots", None, True, None, "FAIL", "backoffLimit lots is not a whole number >= 0"),
        (6, {"maxRestarts": -1}, True, None, "FAIL", "maxRestarts -1 is not a whole number >= 0"),
        (0, ["not", "a", "mapping"], True, {"rules": 5}, "FAIL", "and the JobSet with it"),
        (0, {"rules": [{"action": 3}]}, True, {"rules": [{"onPodConditions": 5}]}, "FAIL", "ends"),
    ],
)
def test_worker_restarts(tmp_path, backoff, failure_policy, elastic, policy, status, phrase):
    """A blind tester's broken JobSet (workers' backoffLimit: 0, maxRestarts: 0) passed every
    manifest row: a lost worker pod then fails the JobSet and the training ends. A JobSet
    restart recovers (the guide's way without elastic training; with it, said in the reason).
    Odd shapes Kubernetes would refuse are never a crash."""
    docs = good_docs()
    spec = job(docs, "worker")["template"]["spec"]
    spec.pop("backoffLimit", None)
    if backoff is not None:
        spec["backoffLimit"] = backoff
    if policy is not None:
        spec["podFailurePolicy"] = policy
    if failure_policy is not None:
        jobset = next(d for d in docs if d["kind"] == "JobSet")
        jobset["spec"]["failurePolicy"] = failure_policy
    if not elastic:
        drop_arg(proxy(docs), "--num_elastic_instances")
    result = MANIFEST_CHECKS["worker-restarts"](load_manifest(write(tmp_path, docs)))
    assert result.status == status
    assert phrase in (str(result.findings[0]) if result.findings else result.note), result


@pytest.mark.parametrize(
    ("field", "value"), [("replicas", "abc"), ("replicas", True), ("parallelism", [1])]
)
def test_a_count_kubernetes_would_refuse_is_one_line(tmp_path, field, value):
    docs = good_docs()
    if field == "replicas":
        job(docs, "worker")["replicas"] = value
    else:
        job(docs, "worker")["template"]["spec"][field] = value
    with pytest.raises(ChaosConfigError, match=f"worker: {field} .* is not a whole number >= 0"):
        load_manifest(write(tmp_path, docs))
