"""The in-cluster runner's RBAC gives the faults exactly what they need, and run-suite.sh uses it.

Two halves: the rules compared with ci/rbac/role.yaml (what the faults need, proven sufficient
by tests/fixtures/kubernetes/test_rbac.py), every extra a read; then the manifest applied for
real to the local server, run-suite.sh writing its kubeconfig from a real ServiceAccount token,
and the API server's own authorizer answering each question as that account.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from pathways_chaos.fixtures.control_plane import LocalControlPlane
from pathways_chaos.fixtures.kubernetes.rbac import apply_rbac, delete_cluster_scoped

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[3]
RBAC = ROOT / "ci" / "gke" / "deploy" / "rbac.yaml"
SHIPPED_ROLE = ROOT / "ci" / "rbac" / "role.yaml"
RUN_SUITE = ROOT / "ci" / "gke" / "run-suite.sh"
JOBSET_NAME = "pathways-chaos"

Rule = tuple[str, str, str]  # (apiGroup, resource, verb)

#: What the runner has beyond the faults' rules, and why; each a read, except asking the API
#: server about its own rights.
EXTRAS: dict[Rule, str] = {
    ("", "pods", "watch"): "see a slice's Pods go down and come back",
    ("batch", "jobs", "watch"): "see a deleted slice Job recreated",
    ("", "nodes", "watch"): "see a cordon or taint land",
    ("", "pods/log", "get"): "head and worker logs in the report of a failed test",
    ("jobset.x-k8s.io", "jobsets", "get"): "preflight reads the JobSet (this one only)",
    ("authorization.k8s.io", "selfsubjectaccessreviews", "create"): "preflight permission check",
}
READS = frozenset({"get", "list", "watch"})
CLUSTER_SCOPED = frozenset({"nodes", "selfsubjectaccessreviews", "namespaces"})


def load(path: Path, namespace: str = "NAMESPACE") -> list[dict[str, Any]]:
    text = path.read_text().replace("NAMESPACE", namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def rules(docs: list[dict[str, Any]], *kinds: str) -> set[Rule]:
    return {
        (group, resource, verb)
        for doc in docs
        if doc["kind"] in kinds
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_runner_has_every_right_the_faults_need_and_only_reads_beside() -> None:
    needed = rules(load(SHIPPED_ROLE), "Role", "ClusterRole")
    granted = rules(load(RBAC), "Role", "ClusterRole")
    assert needed, f"no rules read from {SHIPPED_ROLE}"
    assert needed - granted == set(), "a fault would get 403"
    assert granted - needed == set(EXTRAS), "a right no fault or preflight needs"
    for _group, resource, verb in EXTRAS:
        assert verb in READS or resource == "selfsubjectaccessreviews", (resource, verb)


def test_scopes_names_and_bindings() -> None:
    docs = load(RBAC)
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    role_rules = rules(docs, "Role")
    cluster_rules = rules(docs, "ClusterRole")
    # A Role cannot grant cluster-scoped resources; a namespaced one in the ClusterRole would
    # reach every namespace.
    assert {r for _, r, _ in role_rules} & CLUSTER_SCOPED == set()
    assert {r for _, r, _ in cluster_rules} == CLUSTER_SCOPED
    for doc in docs:
        for rule in doc.get("rules", []):
            assert "*" not in [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
    # Secrets: only the journal mirror's key, read by its name; create cannot be named in RBAC.
    secrets = [r for d in docs for r in d.get("rules", []) if "secrets" in r["resources"]]
    assert sorted((r["verbs"], r.get("resourceNames")) for r in secrets) == [
        (["create"], None),
        (["get"], ["pathways-chaos-journal-key"]),
    ]
    (jobsets,) = [
        r for d in docs if d["kind"] == "Role" for r in d["rules"] if "jobsets" in r["resources"]
    ]
    assert jobsets["resourceNames"] == [JOBSET_NAME]
    # The journal's cluster identity: the kube-system namespace, and no other, read only.
    (namespaces,) = [r for d in docs for r in d.get("rules", []) if "namespaces" in r["resources"]]
    assert (namespaces["resourceNames"], namespaces["verbs"]) == (["kube-system"], ["get"])
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
        ]
        role_kind = binding["kind"].removesuffix("Binding")
        role = next(d for d in docs if d["kind"] == role_kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": role["metadata"]["name"],
        }
    # One ClusterRoleBinding per namespace, so a second install does not rebind the first.
    crb = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert crb["metadata"]["name"].endswith("-NAMESPACE")


# -- for real, on the local server ----------------------------------------------------------


@pytest.fixture
def runner_token(kube_control_plane: LocalControlPlane, gke_namespace: str) -> Iterator[str]:
    """Applies rbac.yaml to the namespace (really) and returns a token of its ServiceAccount."""
    api = kube_control_plane.api_client()
    core: Any = client.CoreV1Api(api)
    created: list[tuple[str, str]] = []
    try:
        created = apply_rbac(api, load(RBAC, gke_namespace), gke_namespace)
        account = next(d for d in load(RBAC) if d["kind"] == "ServiceAccount")["metadata"]["name"]
        token: str = core.create_namespaced_service_account_token(
            account, gke_namespace, {"spec": {"expirationSeconds": 3600}}
        ).status.token
        yield token
    finally:
        delete_cluster_scoped(api, created)
        api.close()


def in_cluster_kubeconfig(
    plane: LocalControlPlane, token: str, namespace: str, folder: Path
) -> Path:
    """Runs run-suite.sh up to its kubeconfig, with the files a Pod would have mounted."""
    sa_dir = folder / "serviceaccount"
    sa_dir.mkdir()
    (sa_dir / "token").write_text(token)
    (sa_dir / "ca.crt").write_bytes(plane.ca_file.read_bytes())
    (sa_dir / "namespace").write_text(namespace)
    kubeconfig = folder / "kubeconfig"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(plane.api_port),
        "SA_DIR": str(sa_dir),
        "PATHWAYS_CHAOS_KUBECONFIG": str(kubeconfig),
        "REPORT_DIR": str(folder / "reports"),
        "RUN_SUITE_KUBECONFIG_ONLY": "1",
    }
    done = subprocess.run(
        ["sh", str(RUN_SUITE)], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return kubeconfig


def test_run_suite_kubeconfig_authenticates_as_the_runner_with_exactly_its_rights(
    kube_control_plane: LocalControlPlane, runner_token: str, gke_namespace: str, tmp_path: Path
) -> None:
    ns = gke_namespace
    kubeconfig = in_cluster_kubeconfig(kube_control_plane, runner_token, ns, tmp_path)
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    api = config.new_client_from_config(
        config_file=str(kubeconfig), context="in-cluster", persist_config=False
    )
    try:
        auth: Any = client.AuthorizationV1Api(api)

        def allowed(verb: str, resource: str, group: str = "", **where: str) -> bool:
            resource, _, sub = resource.partition("/")
            attributes = {"verb": verb, "group": group, "resource": resource, "subresource": sub}
            review = {"spec": {"resourceAttributes": {**attributes, **where}}}
            return bool(auth.create_self_subject_access_review(review).status.allowed)

        expected = {
            # what the faults and the preflight do, in the namespace
            **{("pods", v, ns): True for v in ("get", "list", "watch", "delete")},
            ("pods/eviction", "create", ns): True,
            ("pods/log", "get", ns): True,
            **{("jobs", v, ns): True for v in ("get", "list", "watch", "delete", "create")},
            **{("nodes", v, ""): True for v in ("get", "list", "watch", "patch")},
            # what they must not
            ("pods", "delete", "default"): False,
            ("pods", "create", ns): False,
            ("pods", "patch", ns): False,
            ("pods/exec", "create", ns): False,
            ("jobs", "delete", "default"): False,
            ("jobs", "patch", ns): False,
            ("nodes", "delete", ""): False,
            ("secrets", "get", ns): False,  # any Secret; only the journal key, by name
            ("secrets", "list", ns): False,
            ("configmaps", "get", "default"): False,
            # the journal's mirror beside the JobSet, in the namespace only
            **{("configmaps", v, ns): True for v in ("get", "list", "create", "update", "delete")},
        }
        groups = {"jobs": "batch"}
        seen = {
            key: allowed(
                key[1], key[0], groups.get(key[0], ""), **({"namespace": key[2]} if key[2] else {})
            )
            for key in expected
        }
        assert seen == expected
        jobset = {"group": "jobset.x-k8s.io", "namespace": ns}
        assert allowed("get", "jobsets", name=JOBSET_NAME, **jobset)
        assert not allowed("get", "jobsets", name="someone-elses", **jobset)
        assert not allowed("patch", "jobsets", name=JOBSET_NAME, **jobset)
        assert not allowed("list", "jobsets", **jobset)
        key = {"namespace": ns, "name": "pathways-chaos-journal-key"}
        assert allowed("get", "secrets", **key)
        assert not allowed("get", "secrets", namespace=ns, name="someone-elses")
        # And real calls, not just reviews: the namespace's Pods yes, another's no.
        core: Any = client.CoreV1Api(api)
        assert core.list_namespaced_pod(ns).items == []
        with pytest.raises(ApiException) as denied:
            core.list_namespaced_pod("default")
        assert denied.value.status == 403
    finally:
        api.close()


def test_run_suite_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "SA_DIR": str(tmp_path / "missing"),
        "PATHWAYS_CHAOS_KUBECONFIG": str(tmp_path / "kubeconfig"),
    }
    done = subprocess.run(["sh", str(RUN_SUITE)], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "no ServiceAccount token" in done.stderr
    assert not (tmp_path / "kubeconfig").exists()


def test_run_suite_exits_with_pytests_status_even_when_the_upload_fails(tmp_path: Path) -> None:
    """The head Job, and so the JobSet, fails or succeeds with pytest, whatever the upload did."""
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    for name in ("token", "ca.crt", "namespace"):
        (sa_dir / name).write_text("x")
    stub = tmp_path / "bin"
    stub.mkdir()
    calls = tmp_path / "calls"
    # A stand-in python: pytest "fails" with 3, the upload with 1.
    (stub / "python").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = "-m" ] && exit 3\ncat >/dev/null\nexit 1\n'
    )
    (stub / "python").chmod(0o755)
    env = {
        "PATH": f"{stub}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "KUBERNETES_SERVICE_HOST": "fd00::1",
        "SA_DIR": str(sa_dir),
        "PATHWAYS_CHAOS_KUBECONFIG": str(tmp_path / "kubeconfig"),
        "REPORT_DIR": str(tmp_path / "reports"),
        "REPORT_GCS_URI": "gs://example-bucket/reports",
        "JOBSET_NAME": "pathways-chaos",
        "RUN_SUITE_WAIT_S": "0",  # the stub python plays pytest, not the wait for the workers
    }
    done = subprocess.run(
        ["sh", str(RUN_SUITE), "suites/chaos", "-m", "chaos"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 3, done.stderr
    assert "report upload failed" in done.stderr
    first, second = calls.read_text().splitlines()
    assert first == "-m pytest suites/chaos -m chaos"
    assert second.startswith(
        f"- {tmp_path / 'reports'} gs://example-bucket/reports/pathways-chaos-"
    )
    kubeconfig = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://[fd00::1]:443"
