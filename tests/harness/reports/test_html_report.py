"""The HTML report renders in headless Chromium with its timeline picture and elements."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from pathways_chaos.harness.judging import oracle
from pathways_chaos.harness.reports import goodput
from pathways_chaos.harness.reports.html_report import EpisodeReport, slice_spans, write_report

SCHEDULE = "data_loss@step=6:slice=2,repair@step=9:slice=2"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def episode():
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    with FakeCluster(SliceTopology(4, 2)) as fake:
        result = run_episode(fake, TrainerConfig(final_step=30), parse_schedule(SCHEDULE))
    return result.events


def test_slice_spans_follow_the_faults(episode):
    spans = slice_spans(episode)
    states = [state for _, _, state in spans[2]]
    assert states == ["active", "down", "idle", "active"]  # lost, repaired, rejoined
    assert [state for _, _, state in spans[0]] == ["active"]


def test_goodput_buckets_add_up(episode):
    g = goodput.measure(episode)
    assert g.productive_s + sum(g.badput_s.values()) == pytest.approx(g.total_s, rel=1e-6)
    assert 0 < g.goodput < 1
    assert g.badput_s["restore"] > 0 and g.badput_s["replayed_steps"] > 0
    assert g.badput_s["recompile"] > 0 and g.wasted_steps == 1
    names = dict(g.properties())
    assert names["chaos_fault_0"] == "data_loss@step=6:slice=2"
    assert names["chaos_fault_0_recover_s"] > 0


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, (
        "headless Chromium is missing: run ci/bootstrap.sh --browser (apt-get install chromium)"
    )
    return path


def _red_pixels(png: bytes) -> int:
    """Counts pixels of the report's 'down' red in an 8-bit RGB(A) PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        data = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * channels)
    rows = np.zeros((height, width * channels), np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        prev = rows[y - 1] if y else np.zeros_like(line)
        if f == 0:
            rows[y] = line
        elif f == 2:
            rows[y] = (line + prev) % 256
        else:  # sub, average, paeth need the running left neighbour
            out = np.zeros_like(line)
            for i in range(len(line)):
                a = out[i - channels] if i >= channels else 0
                b, c = prev[i], (prev[i - channels] if i >= channels else 0)
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                out[i] = (line[i] + p) % 256
            rows[y] = out
    pixels = rows.reshape(height, width, channels)[..., :3]
    return int(np.all(np.abs(pixels - [0xC6, 0x28, 0x28]) < 12, axis=-1).sum())


def test_report_renders_in_headless_chromium(episode, tmp_path: Path):
    verdict = oracle.check(episode)
    page = write_report(
        tmp_path / "report.html", [EpisodeReport("t::resize", "passed", episode, verdict)]
    )
    chromium = _chromium()
    common = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert dom.count('class="timeline"') == 1
    assert dom.count('class="slice-down"') == 1 and 'class="fault"' in dom
    assert dom.count('class="step step-wasted"') == 1
    assert 'class="snapshot"' in dom and "WASTED_PROGRESS_FROM_DISRUPTION" in dom
    shot = tmp_path / "report.png"
    subprocess.run(
        [*common, "--window-size=1000,700", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert _red_pixels(shot.read_bytes()) > 500  # the down span and the fault line are drawn
