"""Report figures, printed as one JSON object.

- report_1000_steps: HTML report generation time and size for a 1,000-step episode with faults.
- first_fault_s: time from starting `pytest -m chaos --cluster=... --chaos-arm` to the first
  fault injected through the API, against the local control plane (needs its binaries:
  ci/build-kube-binaries.sh).

Usage: python bench/bench_report.py [--no-cluster]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
SCHEDULE = "data_loss@step=300:slice=2,repair@step=500:slice=2,data_loss@step=800:slice=1"


def report_figures(rounds: int) -> dict[str, Any]:
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.reference.trainer import TrainerConfig
    from pathways_chaos.harness.reports.html_report import EpisodeReport, write_report

    request_cpu_devices(8)
    with FakeCluster(SliceTopology(4, 2)) as fake:
        result = run_episode(fake, TrainerConfig(final_step=1000), parse_schedule(SCHEDULE))
    verdict = oracle.check(result.events, replay=False)
    report = EpisodeReport("bench::1000_steps", "passed", result.events, verdict)
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            t0 = time.perf_counter()
            path = write_report(Path(tmp) / "report.html", [report])
            times.append(time.perf_counter() - t0)
        size = path.stat().st_size
    return {
        "steps": sum(1 for e in result.events if e["kind"] == "step"),
        "events": len(result.events),
        "generation_s_median": round(statistics.median(times), 4),
        "html_bytes": size,
        "survived": verdict.ok,
    }


def first_fault_seconds() -> dict[str, Any]:
    from pathways_chaos.fixtures.control_plane import LocalControlPlane
    from pathways_chaos.fixtures.workload import pathways_workload_in
    from pathways_chaos.harness.engine.recorder import read_log

    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalControlPlane(workdir=Path(tmp) / "cp") as plane,
        pathways_workload_in(plane, slices=4, hosts_per_slice=2) as workload,
    ):
        logs = Path(tmp) / "logs"
        started = time.time()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(ROOT / "suites/chaos"),
                "-m",
                "chaos",
                "-k",
                "replica_resize",
                "-q",
                "-p",
                "no:cacheprovider",
                "--chaos-arm",
                f"--cluster={plane.kubeconfig}:{plane.context}",
                f"--namespace={workload.namespace}",
                f"--jobset={workload.jobset}",
                f"--chaos-log-dir={logs}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        (log,) = logs.rglob("episode-*.jsonl")
        events = read_log(log)
    epoch = events[0]["epoch"]
    fault = next(e for e in events if e["kind"] == "fault")
    return {
        "pytest_exit": out.returncode,
        "start_to_first_fault_s": round(epoch + fault["wall"] - started, 3),
        "episode_start_to_fault_s": round(fault["wall"], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cluster", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    out: dict[str, Any] = {"report_1000_steps": report_figures(rounds=5)}
    if not args.no_cluster:
        out["first_fault"] = first_fault_seconds()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
