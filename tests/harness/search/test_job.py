"""``search --emit-job N``: valid YAML, every field one the Kubernetes Job schema (the
``kubernetes`` client's models) knows, with the values the search needs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

MUTANT = "pathways_chaos.harness.reference.mutants:MeshBuiltOnce"


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _cli(*args: str) -> Result:
    """``pathways-chaos search ARGS`` in this process (--emit-job imports no JAX)."""
    import contextlib
    import io

    from pathways_chaos.harness.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["search", *args])
    return Result(code, out.getvalue(), err.getvalue())


def check_against_schema(value: Any, model: str, where: str = "") -> list[str]:
    """Every key of ``value`` is a field of the Kubernetes model ``model`` (recursively), with
    a value of that field's type: what an API server would reject or silently drop."""
    from kubernetes import client

    problems: list[str] = []
    if model.startswith(("list[", "List[")):
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        for i, item in enumerate(value):
            problems += check_against_schema(item, model[5:-1], f"{where}[{i}]")
        return problems
    if model.startswith(("dict(", "Dict[")):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping"]
        inner = model[5:-1].split(", ", 1)[1]
        for k, v in value.items():
            problems += check_against_schema(v, inner, f"{where}.{k}")
        return problems
    primitives = {"str": str, "int": int, "bool": bool, "object": object, "datetime": str}
    if model in primitives:
        ok = isinstance(value, primitives[model]) and not (
            model == "int" and isinstance(value, bool)
        )
        return [] if ok else [f"{where}: {value!r} is not {model}"]
    cls = getattr(client, model)
    if not isinstance(value, dict):
        return [f"{where}: expected a {model} mapping"]
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            problems.append(f"{where}.{key}: not a field of {model}")
            continue
        problems += check_against_schema(item, cls.openapi_types[by_json[key]], f"{where}.{key}")
    return problems


def test_the_schema_check_catches_a_wrong_field() -> None:
    # The check itself: a misspelt field and a wrong type are both caught.
    assert check_against_schema({"spec": {"completionmode": "Indexed"}}, "V1Job")
    assert check_against_schema({"spec": {"completions": "4"}}, "V1Job")
    assert not check_against_schema({"spec": {"completions": 4}}, "V1Job")


@pytest.fixture(scope="module")
def job() -> dict[str, Any]:
    out = _cli(
        "--emit-job",
        "4",
        "--image",
        "us-docker.pkg.dev/p/r/pathways-chaos-suite:0.1.0",
        "--trainer",
        MUTANT,
        "--profile",
        "nightly",
        "--budget",
        "1800",
        "--redis",
        "redis://redis.search.svc:6379/0",
        "--namespace",
        "chaos",
    )
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def _shards(jobset: dict[str, Any]) -> dict[str, Any]:
    return jobset["spec"]["replicatedJobs"][0]["template"]


def _merge(jobset: dict[str, Any]) -> dict[str, Any]:
    return jobset["spec"]["replicatedJobs"][1]["template"]


def test_the_nightly_is_one_jobset_that_ends_as_its_merge_ends(job: dict[str, Any]) -> None:
    from pathways_chaos.fixtures.twin.jobset_supported import check_supported

    assert job["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and job["kind"] == "JobSet"
    assert job["metadata"] == {
        "name": "pathways-chaos-search",
        "labels": {"app.kubernetes.io/name": "pathways-chaos-search"},
        "namespace": "chaos",
    }
    spec = job["spec"]
    assert [rj["name"] for rj in spec["replicatedJobs"]] == ["shards", "merge"]
    assert [rj.get("replicas") for rj in spec["replicatedJobs"]] == [1, 1]
    # the merge starts once every shard completed, and the run is red when the merge is
    assert spec["replicatedJobs"][1]["dependsOn"] == [{"name": "shards", "status": "Complete"}]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["merge"]}
    assert spec["failurePolicy"] == {"maxRestarts": 0}
    for template in (_shards(job), _merge(job)):
        assert check_against_schema(template, "V1JobTemplateSpec") == []
    check_supported(job)  # every JobSet field one the twin's stand-in knows (and the API has)
    shards = _shards(job)["spec"]
    assert shards["completionMode"] == "Indexed"
    assert shards["completions"] == shards["parallelism"] == 4
    assert shards["backoffLimit"] == 4
    assert shards["activeDeadlineSeconds"] > 1800  # the budget, plus start-up and shrinking
    pod = shards["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "us-docker.pkg.dev/p/r/pathways-chaos-suite:0.1.0"


def test_every_shard_runs_the_same_options_and_learns_its_index(job: dict[str, Any]) -> None:
    pod = _shards(job)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["pathways-chaos"]
    args = container["args"]
    assert args[:3] == ["search", "--shards", "4"]
    pairs = dict(zip(args[3::2], args[4::2], strict=False))
    assert pairs["--trainer"] == MUTANT and pairs["--budget"] == "1800"
    assert pairs["--profile"] == "nightly"
    assert pairs["--redis"] == "redis://redis.search.svc:6379/0"
    assert pairs["--out"] == "/search/results/$(PATHWAYS_CHAOS_SEARCH_RUN)"
    assert "--shard" not in args and "--database" not in args
    env = {e["name"]: e for e in container["env"]}
    index = env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    run = env["PATHWAYS_CHAOS_SEARCH_RUN"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert run == "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"  # shared with the merge
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == "pathways-chaos-search"
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/search"}]


def test_the_merge_writes_three_reports_into_the_runs_folder_once(job: dict[str, Any]) -> None:
    spec = _merge(job)["spec"]
    assert spec["backoffLimit"] == 0 and spec["completions"] == 1  # red is the verdict
    (container,) = spec["template"]["spec"]["containers"]
    run = "/search/results/$(PATHWAYS_CHAOS_SEARCH_RUN)"
    assert container["args"] == [
        "search", "merge", run, "--html", f"{run}/report.html", "--json", f"{run}/report.json",
        "--junit", f"{run}/report.xml",
    ]  # fmt: skip
    env = {e["name"]: e for e in container["env"]}
    fields = env["PATHWAYS_CHAOS_SEARCH_RUN"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert fields == "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"
    assert (
        spec["template"]["spec"]["volumes"] == _shards(job)["spec"]["template"]["spec"]["volumes"]
    )


def test_shards_only_prints_the_indexed_job_named_by_its_own_uid() -> None:
    out = _cli("--emit-job", "3", "--image", "img:1", "--shards-only")
    assert out.returncode == 0, out.stderr
    job = yaml.safe_load(out.stdout)
    assert check_against_schema(job, "V1Job") == []
    assert job["kind"] == "Job" and job["spec"]["completions"] == 3
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    run = env["PATHWAYS_CHAOS_SEARCH_RUN"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert run == "metadata.labels['controller-uid']"


def test_without_redis_the_database_is_a_folder_on_the_shared_volume() -> None:
    out = _cli("--emit-job", "2", "--image", "img:1", "--claim", "nightly-pvc")
    assert out.returncode == 0, out.stderr
    job = _shards(yaml.safe_load(out.stdout))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--database") + 1] == "/search/example-db"
    assert "--redis" not in args
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "nightly-pvc"
    }
    assert check_against_schema(job, "V1JobTemplateSpec") == []


def test_a_one_node_cluster_shares_a_folder_on_the_node() -> None:
    out = _cli("--emit-job", "4", "--image", "img:1", "--host-path", "/var/lib/search")
    assert out.returncode == 0, out.stderr
    jobset = yaml.safe_load(out.stdout)
    for job in (_shards(jobset), _merge(jobset)):
        (volume,) = job["spec"]["template"]["spec"]["volumes"]
        assert volume == {
            "name": "search",
            "hostPath": {"path": "/var/lib/search", "type": "DirectoryOrCreate"},
        }
        assert check_against_schema(job, "V1JobTemplateSpec") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--emit-job", "4"], "needs --image"),
        (
            ["--emit-job", "0", "--image", "i"],
            "--emit-job '0': use a whole number of shards from 1",
        ),
        (["--emit-job", "4", "--image", "i", "--shard", "1/4"], "set by the Job"),
        (["--emit-job", "4", "--image", "i", "--job-name", "Nightly_Search"], "lower-case"),
        (["--emit-job", "4", "--image", "i", "--properties", "dataset,meshes"], "use some of"),
        (["--emit-job", "4", "--image", "i", "--budget", "0"], "seconds > 0"),
        (["--emit-job", "4", "--image", "i", "--host-path", "var/x"], "absolute folder"),
        (["--emit-job", "100", "--image", "i", "--job-name", "a" * 50], "at most 63"),
        (["--shards-only", "--out", "x"], "--shards-only is for --emit-job"),
    ],
)
def test_bad_job_options_are_one_line(args: list[str], message: str) -> None:
    out = _cli(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert message in out.stderr and out.stderr.strip().count("\n") == 0, out.stderr
