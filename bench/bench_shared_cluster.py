"""Safety figures for a shared cluster, printed as one JSON object.

- bad_inputs: the regression table's rows (tests/house/bad_inputs/table.py), each run in a new
  process as a person would type it: tried / one-line errors / tracebacks / silent successes
  (target: tracebacks 0, silent successes 0).
- error_proxy: every Kubernetes fault and its undo with the first write answered badly by the
  error-injecting proxy (a lost answer after the change, 409, 429, 500, 503): operations tried,
  operations that reported the wrong thing, and operations that left the cluster changed after
  the journal's replay (target 0). Needs the local control plane's binaries.

Usage: python bench/bench_shared_cluster.py [--skip-bad-inputs] [--skip-proxy] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tables live beside the tests that assert on them


def bad_input_figures(folder: Path) -> dict[str, Any]:
    from tests.house.bad_inputs.table import figures, run_all

    started = time.monotonic()
    outcomes = run_all(folder)
    out: dict[str, Any] = dict(figures(outcomes))
    out["wrong_rows"] = [o.row.name for o in outcomes if not o.one_line]
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def proxy_figures(folder: Path) -> dict[str, Any]:
    from pathways_chaos.fixtures.control_plane import LocalControlPlane, find_kube_binaries
    from pathways_chaos.fixtures.kubernetes.pathways_jobset import pathways_workload_in
    from tests.faults.kubernetes.error_proxy import error_proxy
    from tests.faults.kubernetes.proxy_matrix import run_matrix

    if find_kube_binaries() is None:
        return {"skipped": "no kube-apiserver/etcd: run ci/build-kube-binaries.sh"}
    started = time.monotonic()
    with (
        LocalControlPlane(workdir=folder / "plane") as plane,
        pathways_workload_in(plane) as workload,
        error_proxy(plane.server, str(plane.ca_file)) as proxy,
    ):
        cases = run_matrix(plane, workload, proxy, folder)
    return {
        "operations": len(cases),
        "errors_injected": len(proxy.injected),
        "misreported": sum(len(c.reported) != c.expected_lines for c in cases),
        "replay_errors": sum(bool(c.replay_errors) for c in cases),
        "left_changed": sum(bool(c.left_changed) for c in cases),
        "bad_cases": [c.describe() for c in cases if not c.ok],
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-bad-inputs", action="store_true")
    parser.add_argument("--skip-proxy", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {"bench": "shared_cluster"}
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        if not args.skip_bad_inputs:
            result["bad_inputs"] = bad_input_figures(Path(tmp) / "bad")
        if not args.skip_proxy:
            result["error_proxy"] = proxy_figures(Path(tmp) / "proxy")
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
