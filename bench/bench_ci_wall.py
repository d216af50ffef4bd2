"""The whole `.ci/run` on a fresh clone of HEAD (warm machine: pip, venv and kube caches
filled), then the same clone's suite serially, side by side, as JSON.

    python bench/bench_ci_wall.py --out bench/results/issue-14-ci-wall.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _timed(command: list[str], cwd: Path) -> dict[str, Any]:
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    out = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, env={**os.environ, "CI": "true"}
    )
    wall = time.perf_counter() - t0
    summary = [line for line in out.stdout.splitlines() if re.search(r"\d+ passed|failed", line)]
    pytest_s = re.search(r" in ([\d.]+)s", summary[-1]) if summary else None
    return {
        "command": " ".join(command),
        "wall_s": round(wall, 1),
        "pytest_s": float(pytest_s.group(1)) if pytest_s else None,
        "summary": summary[-1].strip("= ") if summary else out.stdout[-300:],
        "exit": out.returncode,
        "failures": [line for line in out.stdout.splitlines() if line.startswith("FAILED")],
        "load_avg_start_end": [list(load_start), list(os.getloadavg())],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-serial", action="store_true")
    args = parser.parse_args()
    clone = Path(tempfile.mkdtemp(prefix="pathways-chaos-ci-")) / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
    ).stdout.strip()
    result: dict[str, Any] = {
        "what": ".ci/run on a fresh clone (bootstrap + pytest -n auto), then the same clone's "
        "suite serially (no -n), one after the other on an otherwise idle machine",
        "commit": head,
        "cores": len(os.sched_getaffinity(0)),
        "ci_run": _timed([".ci/run"], clone),
    }
    if not args.no_serial:
        result["serial"] = _timed(
            [".venv/bin/python", "-m", "pytest", "-p", "no:randomly", "-q"], clone
        )
        n_auto = result["ci_run"]["pytest_s"]
        serial = result["serial"]["pytest_s"]
        if n_auto and serial:
            result["speedup_pytest_serial_over_n_auto"] = round(serial / n_auto, 2)
    result["target_ci_run_wall_s"] = 300
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if result["ci_run"]["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
