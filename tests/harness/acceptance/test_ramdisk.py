"""Ramdisk sizing: the MTC guide's own worked example, quantities, and the CLI's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance.ramdisk import (
    RamdiskSizing,
    check_ramdisk,
    parse_buffer,
    parse_count,
    parse_quantity,
    ramdisk_main,
)
from pathways_chaos.harness.errors import ChaosConfigError

SAMPLES = Path(__file__).parents[3] / "suites" / "acceptance" / "samples"


def test_the_guides_worked_example():
    # 70B params, 32 hosts: 840 GB, 26.25 GB a host, 52.5 GB x2, x1.15 ~ 60.3 GB.
    sizing = RamdiskSizing(70e9, 32, 0.15)
    assert sizing.checkpoint_bytes == pytest.approx(840e9)
    assert sizing.shard_bytes == pytest.approx(26.25e9)
    assert sizing.ramdisk_bytes == pytest.approx(52.5e9)
    assert sizing.required_bytes == pytest.approx(60.375e9)
    assert sizing.lines()[-1].startswith("with buffer    52.50 GB x 1.15 = 60.37 GB")


def test_one_billion_params_is_twelve_gigabytes():
    assert RamdiskSizing(1e9, 1, 0.0).checkpoint_bytes == pytest.approx(12e9)


@pytest.mark.parametrize(
    ("text", "bytes_"),
    [("60Gi", 60 * 2**30), ("64G", 64e9), ("500Mi", 500 * 2**20), ("1e9", 1e9), ("1024", 1024)],
)
def test_kubernetes_quantities(text, bytes_):
    assert parse_quantity(text) == pytest.approx(bytes_)


@pytest.mark.parametrize(("text", "count"), [("8e9", 8e9), ("70B", 70e9), ("1.5T", 1.5e12)])
def test_parameter_counts(text, count):
    assert parse_count(text) == pytest.approx(count)


def test_bad_values_are_one_line_errors():
    with pytest.raises(ChaosConfigError, match="not a Kubernetes quantity: write for example"):
        parse_quantity("sixty gigs")
    with pytest.raises(ChaosConfigError, match="not a parameter count"):
        parse_count("8 billion")
    with pytest.raises(ChaosConfigError, match="not a fraction"):
        parse_buffer("lots")
    with pytest.raises(ChaosConfigError, match="hosts per slice=0"):
        RamdiskSizing(8e9, 0)
    assert parse_buffer("15%") == pytest.approx(0.15)


def test_check_flags_a_short_volume_and_passes_a_big_one():
    sizing = RamdiskSizing(8e9, 4)  # 55.2 GB
    short = check_ramdisk(sizing, [("mtc", "20Gi")], "cc.yaml")
    assert not short.ok
    assert "inMemoryVolumeSize 20Gi = 21.47 GB < required 55.20 GB" in short.reason
    big = check_ramdisk(sizing, [("mtc", "64Gi")], "cc.yaml")
    assert big.ok and "68.72 GB >= 55.20 GB required" in big.reason
    unset = check_ramdisk(sizing, [("mtc", "")], "cc.yaml")
    assert not unset.ok and "inMemoryVolumeSize is not set" in unset.reason


def test_cli_prints_the_calculation(capsys):
    assert ramdisk_main(["--params", "8e9", "--hosts-per-slice", "16"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint     8e+09 params x 12 bytes = 96.00 GB" in out
    assert "per-host shard 96.00 GB / 16 hosts per slice = 6.00 GB" in out
    assert "ramdisk        6.00 GB x 2 = 12.00 GB" in out
    assert "with buffer    12.00 GB x 1.15 = 13.80 GB" in out
    assert "at least 13.80 GB" in out


def test_cli_compares_with_a_checkpoint_configuration(capsys):
    good = str(SAMPLES / "good_port" / "jobset.yaml")
    bad = str(SAMPLES / "pitfall_port" / "jobset.yaml")
    args = ["--params", "8e9", "--checkpoint-configuration"]
    assert ramdisk_main([*args, good, "--hosts-per-slice", "16"]) == 0
    assert "PASS: good-port-mtc: 16Gi = 17.18 GB >= 13.80 GB required" in capsys.readouterr().out
    assert ramdisk_main([*args, bad, "--hosts-per-slice", "4", "--buffer", "10%"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_cli_bad_input_exits_2_with_one_line(capsys, tmp_path):
    assert ramdisk_main(["--params", "lots", "--hosts-per-slice", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a parameter count" in err
    (tmp_path / "x.yaml").write_text("kind: ConfigMap\n")
    code = ramdisk_main(
        [
            "--params",
            "8e9",
            "--hosts-per-slice",
            "4",
            "--checkpoint-configuration",
            str(tmp_path / "x.yaml"),
        ]
    )
    assert code == 2
    assert "no CheckpointConfiguration in the file" in capsys.readouterr().err
    # A size in the file that is no quantity: one line before any output (was a traceback).
    (tmp_path / "cc.yaml").write_text(
        "kind: CheckpointConfiguration\nspec:\n  inMemoryVolumeSize: abcGi\n"
    )
    args = ["--params", "70B", "--hosts-per-slice", "16", "--checkpoint-configuration"]
    assert ramdisk_main([*args, str(tmp_path / "cc.yaml")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "'abcGi'" in out.err


@pytest.mark.parametrize(
    ("text", "bytes_"), [("1.5Gi", 1.5 * 2**30), ("2E", 2e18), ("128974848", 128974848)]
)
def test_quantities_are_read_by_the_kubernetes_client(text, bytes_):
    from kubernetes.utils import parse_quantity as kube

    assert parse_quantity(text) == pytest.approx(bytes_) == pytest.approx(float(kube(text)))


def test_nothing_to_size_is_never_a_pass():
    sizing = RamdiskSizing(8e9, 4)
    missing = check_ramdisk(sizing, [], "jobset.yaml")
    assert missing.status == "FAIL" and "no CheckpointConfiguration was given" in missing.reason
    unknown = check_ramdisk(None, [("mtc", "64Gi")], "cc.yaml")
    assert unknown.status == "SKIP" and "pass --acceptance-params" in unknown.reason
    unused = check_ramdisk(None, [], "jobset.yaml", mtc_used=False)
    assert unused.status == "PASS" and unused.reason == "no Multi-Tier Checkpointing"


def test_cli_reads_a_checkpoint_configuration_in_a_kind_list(capsys, tmp_path):
    """The suite read a ``kind: List`` (``kubectl get -o json``) and the command said "no
    CheckpointConfiguration in the file": both read a manifest file the one way now."""
    import json

    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "checkpointing.gke.io/v1",
                "kind": "CheckpointConfiguration",
                "metadata": {"name": "llama-mtc"},
                "spec": {"inMemoryVolumeSize": "100Gi"},
            }
        ],
    }
    path = tmp_path / "mtc.json"
    path.write_text(json.dumps(listed))
    args = ["--params", "70e9", "--hosts-per-slice", "16", "--checkpoint-configuration"]
    assert ramdisk_main([*args, str(path)]) == 1
    assert "llama-mtc: inMemoryVolumeSize 100Gi = 107.37 GB < required 120.75 GB" in (
        capsys.readouterr().out
    )
