"""The GKE JobSet and PriorityClass in ci/gke/deploy/ are valid, consistent and pass our checks.

Validity is the API server's word, not ours: server-side dry runs (``dryRun=All``) against the
local kube-apiserver, the JobSet through a structural CRD schema (ci/gke/jobset-crd.yaml) and each
Pod template through the core Job schema. Consistency (slice counts, ports, labels, the
ServiceAccount) and the project's manifest checks are read from the YAML.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from pathways_chaos.faults.kubernetes import (
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    WORKER_REPLICATED_JOB,
)
from pathways_chaos.faults.safety import OPT_IN_LABEL, OPT_IN_VALUE
from pathways_chaos.fixtures.control_plane import LocalControlPlane, wait_for
from pathways_chaos.harness.acceptance.manifest_checks import run_manifest_checks

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[3]
GKE = ROOT / "ci" / "gke"
JOBSET = GKE / "deploy" / "jobset.yaml"
PRIORITY_CLASS = GKE / "deploy" / "priorityclass.yaml"
RBAC = GKE / "deploy" / "rbac.yaml"
JOBSET_CRD = GKE / "jobset-crd.yaml"
RUN_SUITE = GKE / "run-suite.sh"
HEAD, RUNNER = "pathways-head", "pathways-chaos"

#: What ci/gke/README.md tells a person to replace, and the test values.
PLACEHOLDERS = {
    "NAMESPACE": "ns-under-test",
    "REGISTRY": "us-docker.pkg.dev/example-project/pathways-chaos",
    "BUCKET": "example-bucket",
}
#: Fields a 1.20 server does not know and drops: native sidecars are Kubernetes 1.28+.
NEWER_THAN_TEST_SERVER = re.compile(r"spec\.template\.spec\.initContainers\[\d+\]\.restartPolicy")


def substitute(text: str, namespace: str) -> str:
    """The guide's sed line."""
    for token, value in {**PLACEHOLDERS, "NAMESPACE": namespace}.items():
        text = text.replace(token, value)
    return text


def load(path: Path, namespace: str | None = None) -> list[dict[str, Any]]:
    text = path.read_text()
    if namespace is not None:
        text = substitute(text, namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def the_jobset(namespace: str = PLACEHOLDERS["NAMESPACE"]) -> dict[str, Any]:
    (jobset,) = load(JOBSET, namespace)
    return jobset


def rjob(jobset: dict[str, Any], name: str) -> dict[str, Any]:
    return next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == name)


def pod_spec(jobset: dict[str, Any], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = rjob(jobset, name)["template"]["spec"]["template"]["spec"]
    return spec


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def container(jobset: dict[str, Any], job: str, name: str) -> dict[str, Any]:
    return next(c for c in containers(pod_spec(jobset, job)) if c["name"] == name)


def flags(c: dict[str, Any]) -> dict[str, str]:
    """``--name=value`` arguments of a container, by name."""
    out = {}
    for arg in [*c.get("command", []), *c.get("args", [])]:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            out[key] = value
    return out


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


# -- the API server's word -----------------------------------------------------------------

PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "PriorityClass": "priorityclasses",
    "Job": "jobs",
    "JobSet": "jobsets",
}


def dry_run_create(api: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """POSTs ``doc`` with ``dryRun=All``: validated, defaulted, admitted, never stored."""
    version = doc["apiVersion"]
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    namespace = doc["metadata"].get("namespace")
    scope = f"/namespaces/{namespace}" if namespace else ""
    method, url, headers, body, _ = api.param_serialize(
        "POST",
        f"{prefix}{scope}/{PLURALS[doc['kind']]}",
        query_params=[("dryRun", "All")],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=doc,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=body)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    created: dict[str, Any] = json.loads(response.data)
    return created


def dropped(sent: Any, got: Any, path: str = "") -> list[str]:
    """Paths of what we sent that the server did not keep (unknown fields are pruned silently)."""
    if isinstance(sent, dict):
        if not isinstance(got, dict):
            return [path]
        out = []
        for key, value in sent.items():
            where = f"{path}.{key}" if path else key
            if key in got:
                out += dropped(value, got[key], where)
            elif value not in (False, 0, "", [], {}):  # a zero value is omitted (omitempty)
                out.append(where)
        return out
    if isinstance(sent, list):
        if not isinstance(got, list) or len(got) != len(sent):
            return [path]
        return [
            p
            for i, (s, g) in enumerate(zip(sent, got, strict=True))
            for p in dropped(s, g, f"{path}[{i}]")
        ]
    return [] if sent == got or str(sent) == str(got) else [path]  # quantities come back as strings


@pytest.fixture(scope="module")
def admin_api(kube_control_plane: LocalControlPlane) -> Iterator[Any]:
    api = kube_control_plane.api_client()
    yield api
    api.close()


@pytest.fixture(scope="module")
def jobset_crd(admin_api: Any) -> Iterator[dict[str, Any]]:
    """Our trimmed JobSet CRD, installed for real and removed afterwards."""
    extensions: Any = client.ApiextensionsV1Api(admin_api)
    (crd,) = load(JOBSET_CRD)
    name = crd["metadata"]["name"]
    extensions.create_custom_resource_definition(crd)
    try:

        def established() -> bool:
            status = extensions.read_custom_resource_definition(name).status
            return any(
                c.type == "Established" and c.status == "True" for c in status.conditions or []
            )

        wait_for(established, timeout=15, what=f"CRD {name} Established")
        yield crd
    finally:
        extensions.delete_custom_resource_definition(name)


def dry_run_jobset(api: Any, jobset: dict[str, Any]) -> dict[str, Any]:
    """Dry-run create, retried while the new CRD's endpoint is still coming up (404)."""

    def attempt() -> dict[str, Any] | None:
        try:
            return dry_run_create(api, jobset)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    created: dict[str, Any] = wait_for(attempt, timeout=15, what="the jobsets endpoint")
    return created


def test_priority_class_passes_a_server_side_dry_run(admin_api: Any) -> None:
    (doc,) = load(PRIORITY_CLASS)
    created = dry_run_create(admin_api, doc)
    assert dropped(doc, created) == []


def test_jobset_passes_the_jobset_crd_schema(
    admin_api: Any, jobset_crd: dict[str, Any], gke_namespace: str
) -> None:
    jobset = the_jobset(gke_namespace)
    created = dry_run_jobset(admin_api, jobset)
    assert dropped(jobset, created) == [], "the schema pruned fields we wrote"
    # The server applied our schema (its defaults), it did not just store the object.
    assert created["spec"]["failurePolicy"]["restartStrategy"] == "Recreate"
    assert all(rj["groupName"] == "default" for rj in created["spec"]["replicatedJobs"])


def _without(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(jobset: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = jobset
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        del node[int(last) if last.isdigit() else last]

    return mutate


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(jobset: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = jobset
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[last] = value

    return mutate


WORKER_POD = "spec.replicatedJobs.1.template.spec.template.spec"
BROKEN = {
    "replicatedJob without template": (
        _without("spec.replicatedJobs.1.template"),
        "spec.replicatedJobs.template: Required value",
    ),
    "replicas is not an integer": (
        _set("spec.replicatedJobs.1.replicas", "four"),
        "spec.replicatedJobs.replicas: Invalid value",
    ),
    "unknown startup order": (
        _set("spec.startupPolicy.startupPolicyOrder", "Sometimes"),
        "spec.startupPolicy.startupPolicyOrder: Unsupported value",
    ),
    "successPolicy without operator": (
        _without("spec.successPolicy.operator"),
        "spec.successPolicy.operator: Required value",
    ),
    "Job template without Pod template": (
        _without("spec.replicatedJobs.1.template.spec.template"),
        "spec.replicatedJobs.template.spec.template: Required value",
    ),
    "container without a name": (
        _without(f"{WORKER_POD}.containers.0.name"),
        "template.spec.containers.name: Required value",
    ),
    "TPU count is not a quantity": (
        _set(f"{WORKER_POD}.containers.0.resources.limits", {"google.com/tpu": "four chips"}),
        "resources.limits.google.com/tpu",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_jobset_is_rejected_by_the_schema(
    admin_api: Any, jobset_crd: dict[str, Any], gke_namespace: str, case: str
) -> None:
    mutate, message = BROKEN[case]
    jobset = the_jobset(gke_namespace)
    dry_run_jobset(admin_api, jobset)  # the unbroken one passes, so the rejection is the break's
    mutate(jobset)
    with pytest.raises(ApiException) as caught:
        dry_run_create(admin_api, jobset)
    assert caught.value.status == 422, caught.value.body
    # Newer servers name the list index ([1]), 1.20 does not: compare without it.
    status = json.loads(caught.value.body or "{}")
    assert message in re.sub(r"\[\d+\]", "", status["message"])


@pytest.mark.parametrize("job", [HEAD, WORKER_REPLICATED_JOB])
def test_each_pod_template_passes_the_core_job_schema(
    admin_api: Any, gke_namespace: str, job: str
) -> None:
    """The CRD schema keeps the Pod template as written; the core Job/Pod validation checks it."""
    template = rjob(the_jobset(gke_namespace), job)["template"]
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"check-{job}",
            "namespace": gke_namespace,
            "labels": template.get("metadata", {}).get("labels", {}),
        },
        "spec": template["spec"],
    }
    created = dry_run_create(admin_api, doc)
    unknown = [p for p in dropped(doc, created) if not NEWER_THAN_TEST_SERVER.fullmatch(p)]
    assert unknown == [], "fields the core schema does not know (typos?)"


# -- the project's own checks -------------------------------------------------------------


def test_the_project_manifest_checks_pass() -> None:
    results = run_manifest_checks(JOBSET)
    failures = [r.failure_message() for r in results if not r.ok]
    assert not failures, "\n".join(failures)
    assert {"num-elastic-instances", "gcs-scratch-location", "image-pins"} <= {
        r.check for r in results
    }


def test_the_manifest_checks_see_our_file(tmp_path: Path) -> None:
    """A wrong slice count in a copy fails: the checks above really read this JobSet."""
    broken = tmp_path / "jobset.yaml"
    broken.write_text(
        JOBSET.read_text().replace("--num_elastic_instances=4", "--num_elastic_instances=5")
    )
    results = {r.check: r for r in run_manifest_checks(broken)}
    assert not results["num-elastic-instances"].ok


# -- consistency: what the faults, the proxy and run-suite.sh rely on -------------------------


def test_placeholders_are_whole_words_and_all_replaced() -> None:
    """sed replaces substrings: a placeholder inside a longer name would be mangled."""
    for path in (JOBSET, PRIORITY_CLASS, RBAC):
        text = path.read_text()
        for token in PLACEHOLDERS:
            every = len(re.findall(token, text))
            whole = len(re.findall(rf"(?<![A-Za-z0-9_]){token}(?![A-Za-z0-9_])", text))
            assert every == whole, f"{path.name}: {token} inside a longer word"
        rendered = substitute(text, "ns-under-test")
        assert not [t for t in PLACEHOLDERS if t in rendered], path.name


def test_the_slice_count_and_shape_agree_everywhere() -> None:
    jobset = the_jobset()
    worker = rjob(jobset, WORKER_REPLICATED_JOB)
    slices = worker["replicas"]
    proxy = flags(container(jobset, HEAD, "pathways-proxy"))
    rm = flags(container(jobset, HEAD, "pathways-rm"))
    assert int(proxy["num_elastic_instances"]) == slices
    assert int(rm["instance_count"]) == slices
    hosts = worker["template"]["spec"]
    assert hosts["parallelism"] == hosts["completions"]
    selector = pod_spec(jobset, WORKER_REPLICATED_JOB)["nodeSelector"]
    assert rm["instance_type"].split(":")[1] == selector["cloud.google.com/gke-tpu-topology"]
    assert selector["cloud.google.com/gke-tpu-accelerator"].startswith("tpu-")
    tpu = container(jobset, WORKER_REPLICATED_JOB, "pathways-worker")["resources"]["limits"]
    assert int(tpu["google.com/tpu"]) > 0


def test_proxy_rm_and_workers_point_at_each_other() -> None:
    jobset = the_jobset()
    proxy = flags(container(jobset, HEAD, "pathways-proxy"))
    rm = flags(container(jobset, HEAD, "pathways-rm"))
    worker = flags(container(jobset, WORKER_REPLICATED_JOB, "pathways-worker"))
    for name in ("num_elastic_instances", "server_port", "resource_manager_address"):
        assert proxy.get(name), f"pathways-proxy has no --{name}"
    assert proxy["gcs_scratch_location"].startswith("gs://")
    assert port(proxy["resource_manager_address"]) == int(rm["server_port"])
    assert port(worker["resource_manager_address"]) == int(rm["server_port"])
    env = {e["name"]: e.get("value", "") for e in container(jobset, HEAD, RUNNER)["env"]}
    assert port(env["JAX_BACKEND_TARGET"]) == int(proxy["server_port"])
    assert env["JAX_PLATFORMS"] == "proxy"
    assert jobset["spec"]["coordinator"]["replicatedJob"] == HEAD


def test_every_variable_reference_is_defined_before_use() -> None:
    """Kubernetes expands $(VAR) only from env entries above it; anything else stays literal."""
    jobset = the_jobset()
    for rj in jobset["spec"]["replicatedJobs"]:
        for c in containers(pod_spec(jobset, rj["name"])):
            defined: list[str] = []
            for entry in c.get("env", []):
                for ref in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
                    assert ref in defined, f"{c['name']}: env {entry['name']} uses $({ref})"
                defined.append(entry["name"])
            for arg in [*c.get("command", []), *c.get("args", [])]:
                for ref in re.findall(r"\$\((\w+)\)", arg):
                    assert ref in defined, f"{c['name']}: {arg} uses undefined $({ref})"


def test_the_faults_find_the_workers_and_may_touch_only_them() -> None:
    jobset = the_jobset()
    assert jobset["metadata"]["labels"][OPT_IN_LABEL] == OPT_IN_VALUE  # preflight
    worker = rjob(jobset, WORKER_REPLICATED_JOB)
    assert worker["template"]["metadata"]["labels"][OPT_IN_LABEL] == OPT_IN_VALUE  # delete_job
    pod_labels = worker["template"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[OPT_IN_LABEL] == OPT_IN_VALUE  # kill/evict/drain
    spec = pod_spec(jobset, WORKER_REPLICATED_JOB)
    assert spec["nodeSelector"][OPT_IN_LABEL] == OPT_IN_VALUE  # cordon/taint: opted-in Nodes only
    head_labels = rjob(jobset, HEAD)["template"]["spec"]["template"].get("metadata", {})
    assert OPT_IN_LABEL not in head_labels.get("labels", {}), "the head Pod runs the tests"
    # The labels the faults select by are the JobSet controller's; the env reads them too.
    env = {e["name"]: e for e in container(jobset, WORKER_REPLICATED_JOB, "pathways-worker")["env"]}
    assert JOB_INDEX_LABEL in env["MEGASCALE_SLICE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    runner_env = {e["name"]: e for e in container(jobset, HEAD, RUNNER)["env"]}
    assert JOBSET_NAME_LABEL in runner_env["JOBSET_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]


def test_the_head_runs_the_chaos_suite_against_its_own_jobset() -> None:
    jobset = the_jobset()
    runner = container(jobset, HEAD, RUNNER)
    args, given = runner["args"], flags(runner)
    assert "-m" in args and args[args.index("-m") + 1] == "chaos"
    script = RUN_SUITE.read_text()
    kubeconfig = re.search(r"KUBECONFIG_OUT=\$\{PATHWAYS_CHAOS_KUBECONFIG:-([^}]+)\}", script)
    context = re.search(r"^CONTEXT=(\S+)$", script, re.MULTILINE)
    assert kubeconfig and context
    assert given["cluster"] == f"{kubeconfig.group(1)}:{context.group(1)}"
    assert given["jobset"] == "$(JOBSET_NAME)" and given["namespace"] == "$(POD_NS)"
    assert given["pathways-proxy"] == "$(JAX_BACKEND_TARGET)"
    assert "chaos-arm" in given
    mounts = {m["mountPath"] for m in runner["volumeMounts"]}
    for report in (given["chaos-report"], given["junitxml"]):
        assert str(Path(report).parent) in mounts, f"{report} is not on a mounted volume"
    assert runner["command"] == ["/opt/pathways-chaos/ci/gke/run-suite.sh"]
    assert "COPY . ." in (GKE / "Dockerfile").read_text()  # the script is in the image there
    assert "WORKDIR /opt/pathways-chaos" in (GKE / "Dockerfile").read_text()


class _OptionRecorder:
    """Stands in for pytest's parser: records the option names the plugin registers."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def getgroup(self, *args: Any, **kwargs: Any) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.names.update(names)


def test_every_suite_option_the_jobset_passes_is_one_the_plugin_has() -> None:
    from pathways_chaos.harness.pytest_plugin import plugin

    recorder = _OptionRecorder()
    plugin.pytest_addoption(cast(Any, recorder))
    pytest_own = {"junitxml"}
    given = set(flags(container(the_jobset(), HEAD, RUNNER))) - pytest_own
    assert {f"--{name}" for name in given} - recorder.names == set()


def test_only_the_runner_gets_the_service_account_token() -> None:
    jobset = the_jobset()
    spec = pod_spec(jobset, HEAD)
    account = next(d for d in load(RBAC) if d["kind"] == "ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    token_volumes = {
        v["name"]
        for v in spec["volumes"]
        if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    }
    assert len(token_volumes) == 1
    mounted_by = {
        c["name"]: m["mountPath"]
        for c in containers(spec)
        for m in c.get("volumeMounts", [])
        if m["name"] in token_volumes
    }
    assert mounted_by == {RUNNER: "/var/run/secrets/kubernetes.io/serviceaccount"}
    assert "SA_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}" in RUN_SUITE.read_text()
    worker = pod_spec(jobset, WORKER_REPLICATED_JOB)
    assert "serviceAccountName" not in worker, "workers need no Kubernetes API rights"


def test_jobset_lifecycle_follows_pytest() -> None:
    jobset = the_jobset()
    spec = jobset["spec"]
    names = [rj["name"] for rj in spec["replicatedJobs"]]
    assert all(re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", n) for n in names)  # DNS-1035
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [HEAD]}
    assert spec["failurePolicy"]["maxRestarts"] == 0  # a restart would kill pytest mid-run
    assert rjob(jobset, HEAD)["template"]["spec"]["backoffLimit"] == 0
    head = pod_spec(jobset, HEAD)
    assert [c["name"] for c in head["containers"]] == [RUNNER]
    assert {c["name"]: c["restartPolicy"] for c in head["initContainers"]} == {
        "pathways-rm": "Always",
        "pathways-proxy": "Always",
    }
    for name in names:
        assert pod_spec(jobset, name)["restartPolicy"] == "Never"
    (priority,) = load(PRIORITY_CLASS)
    assert (
        pod_spec(jobset, WORKER_REPLICATED_JOB)["priorityClassName"] == priority["metadata"]["name"]
    )


def test_images_are_pinned_to_the_project_and_jax_versions() -> None:
    """The suite image's tag is the project version; Pathways' jax tag is the image's jax."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dockerfile = (GKE / "Dockerfile").read_text()
    found = re.search(r"^ARG JAX_VERSION=(\S+)$", dockerfile, re.MULTILINE)
    assert found, "the Dockerfile does not pin jax"
    jax = found.group(1)
    floor = next(d.removeprefix("jax>=") for d in project["dependencies"] if d.startswith("jax>="))
    assert tuple(map(int, jax.split("."))) >= tuple(map(int, floor.split(".")))
    jobset = the_jobset()
    images = {
        c["name"]: c["image"]
        for rj in jobset["spec"]["replicatedJobs"]
        for c in containers(pod_spec(jobset, rj["name"]))
    }
    assert images.pop(RUNNER).endswith(f"/pathways-chaos-suite:{project['version']}")
    for name, image in images.items():
        assert image.startswith("us-docker.pkg.dev/cloud-tpu-v2-images/cloud-pathways/"), name
        assert image.endswith(f":jax-{jax}"), f"{name}: {image} is not for jax {jax}"


def test_the_test_only_crd_is_not_among_the_manifests_to_apply() -> None:
    kinds = {d["kind"] for path in (GKE / "deploy").glob("*.yaml") for d in load(path)}
    assert "CustomResourceDefinition" not in kinds
    assert "TEST ONLY" in JOBSET_CRD.read_text().splitlines()[0]
