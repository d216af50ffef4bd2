"""The same ``--chaos-log-dir`` next session (a CI cache, a developer's habit) judges each new
episode on its own: an earlier session's log is set aside, never appended to, and its
checkpoints are never handed to a new episode's first run (which resumed from them and failed
a correct loop: found by a tester's second run of the same command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _session(log_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "suites/chaos",
            "-m",
            "chaos",
            "-k",
            "preemption",
            f"--chaos-log-dir={log_dir}",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_log_folder_used_again_judges_each_session_on_its_own(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    for _ in range(2):
        done = _session(log_dir)
        assert done.returncode == 0, done.stdout[-3000:]
        assert "2 passed" in done.stdout, done.stdout[-3000:]  # the trainer's and the loop's
    episode = log_dir / "test_preemption_suspends_and_resumes" / "episode-2.jsonl"
    starts = [line for line in episode.read_text().splitlines() if '"log_start"' in line]
    assert len(starts) == 1  # the earlier session's episode went beside it, not into it
    assert episode.with_name("episode-2.previous.jsonl").is_file()
