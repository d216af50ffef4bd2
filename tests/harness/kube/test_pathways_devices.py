"""Grouping real Pathways devices by slice_index (no proxy is reachable here, so the devices
are stand-ins with the two attributes Pathways devices carry)."""

from __future__ import annotations

import dataclasses

import pytest

from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.kube.kube_cluster import ClusterSpec, group_by_slice_index


@dataclasses.dataclass(frozen=True)
class Device:
    id: int
    slice_index: int | None


def test_devices_group_by_slice_index_in_id_order():
    devices = [Device(5, 1), Device(0, 0), Device(4, 1), Device(1, 0)]
    grouped = group_by_slice_index(devices)
    assert {s: [d.id for d in ds] for s, ds in grouped.items()} == {0: [0, 1], 1: [4, 5]}


def test_a_device_without_slice_index_says_the_backend_is_wrong():
    with pytest.raises(ChaosConfigError, match="has no slice_index: --pathways-proxy"):
        group_by_slice_index([Device(0, None)])


def test_uneven_slices_are_refused():
    with pytest.raises(ChaosConfigError, match="different device counts"):
        group_by_slice_index([Device(0, 0), Device(1, 0), Device(2, 1)])


@pytest.mark.parametrize(
    ("text", "context", "kubeconfig"),
    [("gke_proj_zone_name", "gke_proj_zone_name", None), (":ctx", "ctx", None)],
)
def test_cluster_option_forms(text, context, kubeconfig):
    spec = ClusterSpec.parse(text, "ns", "js")
    assert (spec.context, spec.kubeconfig) == (context, kubeconfig)


def test_cluster_option_with_a_kubeconfig_path(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\n")
    spec = ClusterSpec.parse(f"{path}:local", "ns", "js")
    assert (spec.kubeconfig, spec.context) == (str(path), "local")
    with pytest.raises(ChaosConfigError, match="does not exist"):
        ClusterSpec.parse(f"{tmp_path / 'missing'}:local", "ns", "js")
    with pytest.raises(ChaosConfigError, match="needs --namespace and --jobset"):
        ClusterSpec.parse("ctx", None, "js")
