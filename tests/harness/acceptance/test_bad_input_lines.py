"""Bad input to the acceptance suite is one line and exit 4, said once before any test (a
blind tester got 7 to 11 identical setup ERRORs and exit 1); what is valid is read as Python or
Kubernetes reads it (a latin-1 file with its coding line was refused as "not UTF-8"); a Helm
template is refused with the command that renders it (one PASSED image-pins on
``{{ .Values.image.tag }}``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance.manifest import load_manifest
from pathways_chaos.harness.acceptance.options import acceptance_problem
from pathways_chaos.harness.acceptance.ramdisk import parse_buffer
from pathways_chaos.harness.acceptance.sources import parse_source
from pathways_chaos.harness.errors import ChaosConfigError

ROOT = Path(__file__).parents[3]
GOOD = ROOT / "suites" / "acceptance" / "samples" / "good_port" / "jobset.yaml"
LATIN1 = (
    b"# -*- coding: latin-1 -*-\nimport jax\n# r\xe9sum\xe9\n"
    b"ds = list(range(9))[jax.process_index()::4]\n"
)
CHART = "apiVersion: v2\nname: pathways-train\nversion: 0.3.1\n"
#: Valid YAML whose values are template actions: it was checked as if deployed.
VALUES_TEMPLATE = GOOD.read_text().replace(
    "name: good-port", 'name: "{{ .Release.Name }}-train"', 1
)
#: Not YAML at all: it was "not valid YAML ... fix the file".
CONTROL_TEMPLATE = "{{- if .Values.enabled }}\n" + GOOD.read_text() + "{{- end }}\n"


def _chart(root: Path, template: str) -> Path:
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(CHART)
    (root / "values.yaml").write_text("slices: 2\n")
    (root / "templates" / "jobset.yaml").write_text(template)
    return root


def _refused(path: Path, *phrases: str) -> None:
    with pytest.raises(ChaosConfigError) as info:
        load_manifest(path)
    said = str(info.value)
    assert "\n" not in said and all(p in said for p in phrases), said


def test_a_latin1_file_with_its_coding_line_is_read_as_python_reads_it(tmp_path: Path) -> None:
    (tmp_path / "loader.py").write_bytes(LATIN1)
    source = parse_source(tmp_path / "loader.py")
    assert "résumé" in source.lines[2]
    (tmp_path / "bad.py").write_bytes(b"import os\n\xff\xfe\x00binary\n")  # no coding line
    with pytest.raises(ChaosConfigError, match=r"is not UTF-8 text \(byte 0xff on line 2\)"):
        parse_source(tmp_path / "bad.py")


def test_helm_templates_and_charts_are_refused_with_the_command_that_renders_them(
    tmp_path: Path,
) -> None:
    values = _chart(tmp_path / "values_chart", VALUES_TEMPLATE)
    control = _chart(tmp_path / "control_chart", CONTROL_TEMPLATE)
    render = "helm template RELEASE {} > rendered.yaml"
    _refused(values / "templates" / "jobset.yaml", render.format(values), "template")
    _refused(control / "templates" / "jobset.yaml", render.format(control))
    _refused(values, "is a Helm chart", render.format(values))
    loose = tmp_path / "loose.yaml"  # a template copied out of its chart: its actions say so
    loose.write_text(VALUES_TEMPLATE)
    _refused(loose, "loose.yaml:6 is a Helm template ({{ .Release.Name }})", "helm template")


def test_what_helm_rendered_and_other_braces_are_not_templates(tmp_path: Path) -> None:
    """A file rendered into the chart's own folder is what is deployed; Argo's
    ``{{workflow.name}}`` and an alert's ``{{ $labels.pod }}`` are no Helm actions."""
    chart = _chart(tmp_path / "chart", VALUES_TEMPLATE)
    (chart / "rendered.yaml").write_text(GOOD.read_text())
    assert load_manifest(chart / "rendered.yaml").slice_count == load_manifest(GOOD).slice_count
    braces = GOOD.read_text() + (
        "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  argo: "{{workflow.name}}"\n  alert: "{{ $labels.pod }} is down"\n'
    )
    (tmp_path / "braces.yaml").write_text(braces)
    assert load_manifest(tmp_path / "braces.yaml").worker_pods


def test_what_is_no_jobset_says_what_to_pass(tmp_path: Path) -> None:
    (tmp_path / "array.json").write_text(json.dumps([{"apiVersion": "v1", "kind": "List"}]))
    _refused(tmp_path / "array.json", "array, not a Kubernetes manifest", "wrap it as kind: List")
    operator = "apiVersion: pathways-job.pathways.domain/v1\nkind: PathwaysJob\nmetadata:\n"
    (tmp_path / "pw.yaml").write_text(operator + "  name: pw-llama\nspec: {}\n")
    _refused(tmp_path / "pw.yaml", "holds a PathwaysJob", "kubectl get jobset pw-llama -o yaml")
    nested = tmp_path / "deploy" / "prod"
    nested.mkdir(parents=True)
    (nested / "jobset.yaml").write_text(GOOD.read_text())
    _refused(tmp_path / "deploy", "subfolders are not searched", str(nested / "jobset.yaml"))


@pytest.mark.parametrize("text", ["2x", "-0.5", "15", "150%", "nan", ""])
def test_a_buffer_outside_the_accepted_form_names_the_option(text: str) -> None:
    with pytest.raises(
        ChaosConfigError,
        match=r"^--acceptance-ramdisk-buffer .* not a fraction .*: write for example 0\.15 or 15%",
    ):
        parse_buffer(text, "--acceptance-ramdisk-buffer")
    assert parse_buffer("15%") == pytest.approx(0.15) and parse_buffer("0") == 0


@pytest.mark.parametrize(
    ("dest", "value", "phrase"),
    [
        ("acceptance_source", [""], "--acceptance-source is empty"),
        ("acceptance_manifest", [" "], "--acceptance-manifest is empty"),
        ("acceptance_adapter", "", "--acceptance-adapter is empty"),
        ("acceptance_checks", "", "--acceptance-checks is empty"),
        ("acceptance_checks", ",", "--acceptance-checks is empty"),
    ],
)
def test_an_empty_option_is_refused_not_taken_as_everything(
    dest: str, value: object, phrase: str
) -> None:
    """``--acceptance-source=`` scanned the current folder; ``--acceptance-checks=`` ran all."""
    options = {"acceptance_ramdisk_buffer": "0.15", dest: value}
    assert phrase in (acceptance_problem(options.get) or "")
    assert acceptance_problem({"acceptance_ramdisk_buffer": "0.15"}.get) is None


def _suite(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--pyargs", "pathways_chaos.suites.acceptance"),
            *(*args, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _inputs(root: Path) -> None:
    """The blind tester's bad inputs, written where a team would keep them."""
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text("import jax\n")
    (root / "src" / "broken.py").write_text("import jax\ndef f(:\n")
    (root / "k").mkdir()
    (root / "k" / "jobset.yaml").write_text(GOOD.read_text())
    (root / "k" / "kustomization.yaml").write_text("resources:\n- jobset.yaml\n")
    (root / "array.json").write_text(json.dumps([{"apiVersion": "v1", "kind": "ConfigMap"}]))
    _chart(root / "chart", VALUES_TEMPLATE)
    (root / "typo.py").write_text("adaptor = None\n")


#: (options, a phrase of the one line): each was one setup ERROR per row, exit 1, or a PASS.
BAD_INPUTS = {
    "helm values": (
        ["--acceptance-checks=manifest", "--acceptance-manifest=chart/templates/jobset.yaml"],
        "helm template RELEASE chart > rendered.yaml",
    ),
    "helm chart": (["--acceptance-manifest=chart"], "chart is a Helm chart"),
    "kustomization": (["--acceptance-manifest=k"], "kubectl kustomize k > rendered.yaml"),
    "missing": (["--acceptance-manifest=nope.yaml"], "nope.yaml: no such file or folder"),
    "json array": (["--acceptance-manifest=array.json"], "wrap it as kind: List"),
    "syntax": (["--acceptance-source=src"], "broken.py:2: cannot parse"),
    "empty source": (["--acceptance-source="], "--acceptance-source is empty"),
    "empty checks": (["--acceptance-checks="], "--acceptance-checks is empty"),
    "buffer 2x": (["--acceptance-ramdisk-buffer=2x"], "--acceptance-ramdisk-buffer '2x'"),
    "buffer 150%": (
        ["--acceptance-ramdisk-buffer=150%"],
        "'150%' is not a fraction from 0 to below 1",
    ),
    "adapter typo": (
        ["--acceptance-checks=runtime", "--acceptance-adapter=typo.py:adapter"],
        "has no attribute 'adapter'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_bad_input_is_one_usage_line_not_an_error_per_row(tmp_path: Path, case: str) -> None:
    _inputs(tmp_path)
    args, phrase = BAD_INPUTS[case]
    out = _suite(tmp_path, *args, "--acceptance-params=8e9", "--acceptance-report=rows.json")
    said = [line for line in out.stderr.splitlines() if line.strip()]
    why = f"{case}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert out.returncode == 4 and len(said) == 1 and phrase in said[0], why
    assert "ERROR at setup" not in out.stdout and not (tmp_path / "rows.json").exists(), why


def test_a_latin1_source_is_checked_and_its_finding_is_a_row(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "loader.py").write_bytes(LATIN1)
    out = _suite(tmp_path, "--acceptance-checks=process-index", "--acceptance-source=src")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "src/loader.py:4: jax.process_index() picks a data shard" in out.stdout
