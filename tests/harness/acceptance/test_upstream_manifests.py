"""The manifest checks on manifests nobody here wrote, each held to the rows it must give.

Two sources: pathwaysutils' own JobSet generator (``pathwaysutils.experimental.gke.jobset``,
called the way its test ``pathwaysutils/test/experimental/gke/jobset_test.py`` calls it, plus
that test's own ``testdata`` manifest), and the JobSet YAML of the resilient-training guide in
``/work/shared/reference`` (extracted verbatim into ``data/``; the Multi-Tier Checkpointing
guide and the migration article give ``gcluster`` flags, no YAML). A row a correct upstream
manifest fails is a bug in the check; the FAIL rows below are settings the upstream manifest
really leaves out (a floating ``latest`` image, no elastic flag, no priority class).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pathways_chaos.harness.acceptance.manifest_checks import run_manifest_checks

gke = pytest.importorskip("pathwaysutils.experimental.gke.jobset")
from kubernetes import client  # noqa: E402  (after the generator, which needs it)

DATA = Path(__file__).parent / "data"
TESTDATA = (
    Path(gke.__file__).parents[2] / "test" / "experimental" / "gke" / "testdata"
) / "model_lite_tpuv5e_4x8.yaml"
IMAGES = "us-docker.pkg.dev/my-project/train"
CKPT = "checkpoint-mount"
MTC = client.V1Volume(
    name=CKPT,
    csi=client.V1CSIVolumeSource(driver="multitier-checkpoint.csi.storage.gke.io"),
)
CKPT_MOUNT = client.V1VolumeMount(name=CKPT, mount_path="/tmp/mtc_checkpoints")
CHECKPOINT_CONFIGURATION = {
    "apiVersion": "checkpointing.gke.io/v1",
    "kind": "CheckpointConfiguration",
    "metadata": {"name": "upstream-mtc"},
    "spec": {
        "cloudStorageBucketName": "upstream-checkpoints",
        "nodeSelector": {"node.kubernetes.io/instance-type": "ct5lp-hightpu-4t"},
        "inMemoryVolumeSize": "32Gi",  # 8e9 params on 8 hosts: 27.6 GB needed
    },
}

ALL = (
    "xla-flags-on-proxy",
    "gcs-scratch-location",
    "num-elastic-instances",
    "image-pins",
    "jax-versions-match",
    "dev-shm",
    "mtc-sidecar-name",
    "mtc-csi-volume",
    "sidecar-shared-dir",
    "worker-priority-class",
    "worker-restarts",
    "ramdisk-size",
)


def expect(**statuses: str) -> dict[str, str]:
    """Every row PASS unless named (``dev_shm="SKIP"``)."""
    want = dict.fromkeys(ALL, "PASS")
    want.update({k.replace("_", "-"): v for k, v in statuses.items()})
    return want


def generated(
    *, user: bool = False, sidecar: str | None = None, mtc: bool = False, **kwargs: Any
) -> gke.PathwaysJobSet:
    """A generator JobSet, as ``jobset_test.py`` builds them: v5e 4x8 (8 hosts), 2 slices."""
    worker_pod = dict(kwargs.pop("worker_pod_spec_kwargs", {}) or {})
    head_pod = dict(kwargs.pop("head_pod_spec_kwargs", {}) or {})
    if user:
        head_pod["volumes"] = [
            client.V1Volume(name="dshm", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory"))
        ]
    if mtc:
        worker_pod["volumes"] = [*worker_pod.get("volumes", []), MTC]
        kwargs["worker_container_kwargs"] = {"volume_mounts": [CKPT_MOUNT]}
        kwargs["proxy_container_kwargs"] = {"args": ["--sidecar_name=external"]}
    js = gke.PathwaysJobSet(
        name="upstream",
        namespace="default",
        pathways_dir="gs://test-bucket/scratch",
        tpu_type="v5e",
        topology="4x8",
        num_slices=2,
        worker_pod_spec_kwargs=worker_pod or None,
        head_pod_spec_kwargs=head_pod or None,
        **kwargs,
    )
    if user:
        js.add_user_workload(
            image=f"{IMAGES}/trainer:jax-0.10.1",
            command=["python3", "train.py"],
            volume_mounts=[client.V1VolumeMount(name="dshm", mount_path="/dev/shm")],
        )
    if sidecar:
        js.add_colocated_python(image=sidecar, volume_mounts=[CKPT_MOUNT] if mtc else None)
    return js


PINNED = {
    "pathways_version": "jax-0.10.1",
    "elastic_slices": 2,
    "worker_pod_spec_kwargs": {"priority_class_name": "high-prior-job"},
}


def rows(tmp_path: Path, *docs: dict[str, Any], params: float | None = 8e9) -> dict[str, str]:
    path = tmp_path / "upstream.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return {r.check: r.status for r in run_manifest_checks(path, params=params)}


def reasons(tmp_path: Path, *docs: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "upstream.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return {r.check: r.reason for r in run_manifest_checks(path, params=8e9)}


def findings(tmp_path: Path, check: str, *docs: dict[str, Any]) -> list[str]:
    path = tmp_path / "upstream.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    row = next(r for r in run_manifest_checks(path, params=8e9) if r.check == check)
    return [str(f) for f in row.findings]


# -- pathwaysutils' generator --------------------------------------------------------------
GENERATED = {
    # The generator's defaults: latest images, no elastic flag, no priority class (optional).
    "defaults": (
        {},
        expect(
            xla_flags_on_proxy="SKIP",
            dev_shm="SKIP",
            num_elastic_instances="FAIL",
            image_pins="FAIL",
            jax_versions_match="NOT JUDGED",
        ),
    ),
    # Headless (the client runs elsewhere), pinned, elastic, hot-swap ready.
    "headless-elastic": (PINNED, expect(xla_flags_on_proxy="SKIP", dev_shm="SKIP")),
    # With the user's workload in the head pod and a colocated-Python sidecar on the workers.
    "workload-and-sidecar": (
        {**PINNED, "user": True, "sidecar": f"{IMAGES}/sidecar:jax-0.10.1"},
        expect(),
    ),
    # Multi-Tier Checkpointing on the generator's sidecar, without its CheckpointConfiguration.
    "mtc-without-checkpoint-configuration": (
        {**PINNED, "user": True, "sidecar": f"{IMAGES}/sidecar:jax-0.10.1", "mtc": True},
        expect(ramdisk_size="FAIL"),
    ),
    # A sidecar tagged without a jax version: the version is not given, the row says so.
    "sidecar-version-unknown": (
        {**PINNED, "user": True, "sidecar": "gcr.io/my-project/colocated-python:custom"},
        expect(jax_versions_match="SKIP"),
    ),
    # The bugs of issue 13 on generated manifests: skew in a Pathways image, not the sidecar...
    "pathways-images-on-another-jax": (
        {**PINNED, "pathways_version": "jax-0.9.0", "user": True},
        expect(jax_versions_match="FAIL"),
    ),
    # ... a sidecar on another jax while the client floats on latest (no hiding the skew) ...
    "sidecar-skew-with-unknown-client": (
        {**PINNED, "sidecar": f"{IMAGES}/sidecar:jax-0.9.0"},
        expect(xla_flags_on_proxy="SKIP", dev_shm="SKIP", jax_versions_match="FAIL"),
    ),
    # ... and the sidecar's shared directory on the node's disk, not in memory.
    "sidecar-shm-on-disk": (
        {
            **PINNED,
            "user": True,
            "sidecar": f"{IMAGES}/sidecar:jax-0.10.1",
            "worker_pod_spec_kwargs": {
                "priority_class_name": "high-prior-job",
                "volumes": [
                    client.V1Volume(name="shared-memory", empty_dir=client.V1EmptyDirVolumeSource())
                ],
            },
        },
        expect(sidecar_shared_dir="FAIL"),
    ),
}


@pytest.mark.parametrize("case", list(GENERATED))
def test_generated_manifest_rows(tmp_path, case):
    kwargs, want = GENERATED[case]
    docs = [generated(**copy.copy(kwargs)).to_dict()]
    assert rows(tmp_path, *docs) == want


def test_generated_elastic_flag_is_found_and_named(tmp_path):
    docs = [generated(**PINNED).to_dict()]
    proxy = docs[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "--num_elastic_slices=2" in proxy["containers"][1]["args"]  # the generator's spelling
    assert docs[0]["spec"]["replicatedJobs"][1]["name"] == "pathways-worker"
    got = reasons(tmp_path, *docs)
    assert got["num-elastic-instances"] == "--num_elastic_slices=2 = 2 worker slices"
    assert got["jax-versions-match"] == (
        "jax 0.10.1 in 3 images (pathways-proxy, pathways-rm, pathways-worker)"
    )


def test_generated_sidecar_directory_is_the_generators_own(tmp_path):
    docs = [generated(**PINNED, user=True, sidecar=f"{IMAGES}/sidecar:jax-0.10.1").to_dict()]
    got = reasons(tmp_path, *docs)
    assert got["sidecar-shared-dir"] == "/tmp/shared-memory shared through memory"
    assert got["dev-shm"] == "/dev/shm is an emptyDir in memory"  # found in the user workload


def test_generated_skews_are_named(tmp_path):
    skew = generated(**{**PINNED, "pathways_version": "jax-0.9.0"}, user=True).to_dict()
    assert findings(tmp_path, "jax-versions-match", skew) == [
        f"upstream.yaml:pathways-head/{role}: jax/jaxlib 0.9.0 differs from the client's 0.10.1"
        for role in ("pathways-rm", "pathways-proxy")
    ] + [
        "upstream.yaml:pathways-worker/pathways-worker: jax/jaxlib 0.9.0 differs from the "
        "client's 0.10.1"
    ]
    # The proxy and resource manager float on latest: unknown, listed, and the skew still fails.
    hidden = generated(
        **{**PINNED, "pathways_version": "latest"}, sidecar=f"{IMAGES}/sidecar:jax-0.9.0"
    ).to_dict()
    hidden["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.1"
    got = findings(tmp_path, "jax-versions-match", hidden)
    assert got[0] == (
        "upstream.yaml:pathways-worker/colocated-python-sidecar: jax/jaxlib 0.9.0 differs from "
        "the Pathways images' 0.10.1"
    )
    assert sum("version unknown" in f for f in got) == 2  # proxy and resource manager
    disk = GENERATED["sidecar-shm-on-disk"][0]
    got = findings(tmp_path, "sidecar-shared-dir", generated(**copy.copy(disk)).to_dict())
    assert got == [
        f"upstream.yaml:pathways-worker/{c}: /tmp/shared-memory is volume shared-memory, an "
        "emptyDir on the node's disk (no medium: Memory)"
        for c in ("pathways-worker", "colocated-python-sidecar")
    ]


def test_generated_mtc_with_its_checkpoint_configuration(tmp_path):
    docs = generated(**PINNED, user=True, sidecar=f"{IMAGES}/sidecar:jax-0.10.1", mtc=True)
    assert rows(tmp_path, docs.to_dict(), CHECKPOINT_CONFIGURATION) == expect()
    assert rows(tmp_path, docs.to_dict(), CHECKPOINT_CONFIGURATION, params=None) == expect(
        ramdisk_size="SKIP"
    )
    assert rows(tmp_path, docs.to_dict(), CHECKPOINT_CONFIGURATION, params=12e9) == expect(
        ramdisk_size="FAIL"  # 41.4 GB needed per pod
    )
    missing = reasons(tmp_path, docs.to_dict())["ramdisk-size"]
    assert "no CheckpointConfiguration was given" in missing


def test_pathwaysutils_own_test_manifest(tmp_path):
    """``model_lite_tpuv5e_4x8.yaml``: proxy and resource manager as native sidecars, the client
    ``jax-tpu`` on ubuntu:latest, a ``pathways-worker`` replicatedJob."""
    docs = [d for d in yaml.safe_load_all(TESTDATA.read_text()) if d]
    assert rows(tmp_path, *docs) == expect(
        image_pins="FAIL",  # server:latest, proxy_server:latest, ubuntu:latest
        jax_versions_match="NOT JUDGED",  # every version unknown because every image floats
        dev_shm="FAIL",  # the client mounts hostPath /tmp only
    )  # no priority class anywhere: hot-swap is optional, said in the row's reason
    got = reasons(tmp_path, *docs)
    assert got["num-elastic-instances"] == "--num_elastic_slices=2 = 2 worker slices"
    assert got["jax-versions-match"].startswith("depends on image-pins, which failed")
    assert got["dev-shm"].endswith(
        "pathways-head/jax-tpu: mounts nothing at /dev/shm (64 MB default)"
    )


# -- the resilient-training guide's YAML ---------------------------------------------------
def fragment(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((DATA / name).read_text()) if d is not None]


def guide_jobset(slices: int = 2, *, mtc: bool = False, sidecar_name: bool = False) -> dict:
    """The guide's fragments where its text puts them: the proxy container in the head pod,
    the hot-swap worker replicatedJob (``worker``), and with ``mtc`` the MTC worker Pod."""
    proxy = copy.deepcopy(fragment("guide_elastic_proxy.yaml")[0][0])
    proxy["args"] = [a.replace("NUM_SLICES", str(slices)) for a in proxy["args"]]
    if sidecar_name:  # "pass --sidecar_name=external to pathways-proxy"
        proxy["args"].append("--sidecar_name=external")
    worker_job = copy.deepcopy(fragment("guide_hot_swap.yaml")[1]["replicatedJobs"][0])
    worker_job["replicas"] = slices
    pod = worker_job["template"]["spec"]["template"]["spec"]
    if mtc:
        pod.update(copy.deepcopy(fragment("guide_mtc_worker_pod.yaml")[0]))
    else:
        pod["containers"] = [{"name": "pathways-worker"}]  # "which runs the pathways-worker"
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "guide"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "pathways-head",
                    "template": {"spec": {"template": {"spec": {"containers": [proxy]}}}},
                },
                worker_job,
            ]
        },
    }


def test_the_guides_fragments_are_the_guides():
    text = Path("/work/shared/reference/pathways-resilient-training.txt")
    if not text.exists():
        pytest.skip("the reference guide is not on this machine")
    body = text.read_text()
    for name in ("guide_elastic_proxy.yaml", "guide_mtc_worker_pod.yaml", "guide_hot_swap.yaml"):
        lines = [
            line
            for line in (DATA / name).read_text().splitlines()
            if not line.startswith("#") and line != "---"
        ]
        assert all(line in body for line in lines), name


GUIDE = {
    # The elastic proxy and the hot-swap worker job: only the floating proxy image fails.
    "elastic": (
        {},
        expect(
            xla_flags_on_proxy="SKIP",
            dev_shm="SKIP",
            image_pins="FAIL",  # proxy_server:latest; the worker fragment names no image
            jax_versions_match="NOT JUDGED",
        ),
    ),
    # The MTC worker Pod as the YAML shows it: the proxy still lacks --sidecar_name=external
    # and no CheckpointConfiguration sizes the ramdisk.
    "mtc-yaml-only": (
        {"mtc": True},
        expect(
            xla_flags_on_proxy="SKIP",
            dev_shm="SKIP",
            image_pins="FAIL",
            jax_versions_match="NOT JUDGED",
            mtc_sidecar_name="FAIL",
            ramdisk_size="FAIL",
        ),
    ),
    # The MTC worker Pod plus what the guide's text asks of the proxy.
    "mtc-as-the-text-says": (
        {"mtc": True, "sidecar_name": True},
        expect(
            xla_flags_on_proxy="SKIP",
            dev_shm="SKIP",
            image_pins="FAIL",
            jax_versions_match="NOT JUDGED",
            ramdisk_size="FAIL",
        ),
    ),
}


@pytest.mark.parametrize("case", list(GUIDE))
def test_guide_manifest_rows(tmp_path, case):
    kwargs, want = GUIDE[case]
    assert rows(tmp_path, guide_jobset(**kwargs)) == want


def test_guide_mtc_with_a_checkpoint_configuration(tmp_path):
    """The fragment sets no parallelism: one host per slice holds the whole checkpoint twice."""
    docs = (guide_jobset(4, mtc=True, sidecar_name=True), CHECKPOINT_CONFIGURATION)
    assert rows(tmp_path, *docs, params=1e9)["ramdisk-size"] == "PASS"  # 27.6 GB <= 34.4 GB
    assert rows(tmp_path, *docs, params=8e9)["ramdisk-size"] == "FAIL"  # 220.8 GB
