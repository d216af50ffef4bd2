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


def test_the_job_is_an_indexed_job_of_the_kubernetes_schema(job: dict[str, Any]) -> None:
    assert check_against_schema(job, "V1Job") == []
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"] == {
        "name": "pathways-chaos-search",
        "labels": {"app.kubernetes.io/name": "pathways-chaos-search"},
        "namespace": "chaos",
    }
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimit"] == 4
    assert spec["activeDeadlineSeconds"] > 1800  # the budget, plus start-up and shrinking
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "us-docker.pkg.dev/p/r/pathways-chaos-suite:0.1.0"


def test_every_pod_runs_the_same_options_and_learns_its_index(job: dict[str, Any]) -> None:
    pod = job["spec"]["template"]["spec"]
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
    assert run == "metadata.labels['controller-uid']"
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == "pathways-chaos-search"
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/search"}]


def test_without_redis_the_database_is_a_folder_on_the_shared_volume() -> None:
    out = _cli("--emit-job", "2", "--image", "img:1", "--claim", "nightly-pvc")
    assert out.returncode == 0, out.stderr
    job = yaml.safe_load(out.stdout)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--database") + 1] == "/search/example-db"
    assert "--redis" not in args
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "nightly-pvc"
    }
    assert check_against_schema(job, "V1Job") == []


def test_a_one_node_cluster_shares_a_folder_on_the_node() -> None:
    out = _cli("--emit-job", "4", "--image", "img:1", "--host-path", "/var/lib/search")
    assert out.returncode == 0, out.stderr
    job = yaml.safe_load(out.stdout)
    (volume,) = job["spec"]["template"]["spec"]["volumes"]
    assert volume == {
        "name": "search",
        "hostPath": {"path": "/var/lib/search", "type": "DirectoryOrCreate"},
    }
    assert check_against_schema(job, "V1Job") == []


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
    ],
)
def test_bad_job_options_are_one_line(args: list[str], message: str) -> None:
    out = _cli(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert message in out.stderr and out.stderr.strip().count("\n") == 0, out.stderr
