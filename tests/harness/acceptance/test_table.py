"""The rows: four statuses, a table that wraps instead of cutting, and the report files."""

from __future__ import annotations

import json

import pytest

from pathways_chaos.harness.acceptance.table import (
    CheckResult,
    Finding,
    failed,
    render,
    summary,
    write_report,
)

LONG_FIX = (
    "mount a csi volume (driver multitier-checkpoint.csi.storage.gke.io) at the ramdisk path in "
    "pathways-worker and colocated-python-sidecar of the worker pod, and remove it from the head "
    "pod; then check the CheckpointConfiguration's inMemoryVolumeSize against the sizing rule"
)
ROWS = [
    CheckResult("image-pins", "pins", "pin it", note="5 images pinned", group="manifest"),
    CheckResult(
        "mtc-csi-volume",
        "csi",
        LONG_FIX,
        (Finding("jobset.yaml:worker/colocated-python-sidecar", "does not mount the volume"),),
        group="manifest",
    ),
    CheckResult("ramdisk-size", "size", "raise it", skipped="pass --acceptance-params N"),
    CheckResult("jax-versions-match", "jax", "pin", depends_on="image-pins", note="unknown"),
]


def test_each_status_and_its_reason():
    assert [r.status for r in ROWS] == ["PASS", "FAIL", "SKIP", "NOT JUDGED"]
    assert ROWS[2].reason == "not given: pass --acceptance-params N"
    assert ROWS[3].reason == "depends on image-pins, which failed: unknown"
    assert [r.ok for r in ROWS] == [True, False, True, True]  # only FAIL fails the run
    assert failed(ROWS) == [ROWS[1]]
    assert summary(ROWS) == "1 passed, 1 failed, 1 skipped, 1 not judged"


def test_blocked_by_drops_the_findings_it_cannot_judge():
    row = ROWS[1].blocked_by("interruption", "no restore happened")
    assert row.status == "NOT JUDGED" and not row.findings
    assert row.reason == "depends on interruption, which failed: no restore happened"


@pytest.mark.parametrize("width", [80, 100, 150])
def test_the_table_wraps_every_word_of_the_fix(width):
    text = render(ROWS, width=width)
    lines = text.splitlines()
    assert " ".join(" ".join(lines).split()).count(" ".join(LONG_FIX.split())) == 1
    assert "..." not in text
    assert max(len(line) for line in lines) <= width
    assert lines[-1] == "1 passed, 1 failed, 1 skipped, 1 not judged"


def test_the_old_table_cut_the_fix():
    """What issue 13 saw: at 150 columns the fix line lost its end."""
    text = render(ROWS, width=60)
    assert "inMemoryVolumeSize against the sizing rule" in " ".join(text.split())


def test_json_report(tmp_path):
    path = write_report(ROWS, tmp_path / "out" / "rows.json", header="manifest jobset.yaml")
    body = json.loads(path.read_text())
    assert body["summary"] == "1 passed, 1 failed, 1 skipped, 1 not judged"
    assert [r["status"] for r in body["rows"]] == ["PASS", "FAIL", "SKIP", "NOT JUDGED"]
    assert body["rows"][1]["fix"] == LONG_FIX
    assert body["rows"][1]["findings"] == [
        {
            "where": "jobset.yaml:worker/colocated-python-sidecar",
            "message": "does not mount the volume",
        }
    ]
    assert body["rows"][0]["fix"] == ""  # a passing row has nothing to fix
    assert body["rows"][3]["depends_on"] == "image-pins"


def test_html_report(tmp_path):
    path = write_report(ROWS, tmp_path / "rows.html", header="<source>")
    page = path.read_text()
    assert page.count("<tr ") == 4
    assert "NOT JUDGED" in page and "&lt;source&gt;" in page
    assert "<b>fix:</b> mount a csi volume" in page
