"""Kubernetes fault figures on the local control plane, printed as one JSON object.

- injection_latency_ms: from calling the fault's inject() (target lookup, journal fsync, the
  API call) to the change seen by a watch (kill_pods: the Pod marked for deletion;
  cordon_nodes / taint_node: the Node update), median and p95.
- sustained_pod_kills_per_minute: kill one worker Pod, wait until its Job's replacement is
  Running, repeat; a bounded loop (--kill-seconds, --max-kills) that stops by itself.
- control_plane_start_seconds: etcd + apiserver + controller-manager + scheduler to ready, with
  the binaries already built (warm cache); also the build script's warm reuse time.
- hot_swap_rebind_ms: slice Nodes tainted, its Pods killed, until the replacements run on the
  spare slice that PriorityClass preemption took from a low-priority job.

Usage: python bench/bench_kube_faults.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import CordonNodes, KillPods, KubeTarget, TaintNode
from pathways_chaos.fixtures.control_plane import LocalControlPlane, wait_for
from pathways_chaos.fixtures.workload import SPARE_LABEL, PathwaysWorkload, pathways_workload_in

REPO = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "median": round(statistics.median(ms), 2),
        "p95": round(percentile(ms, 0.95), 2),
        "n": len(ms),
    }


class EventLog:
    """A watch in a thread that timestamps every event (perf_counter) as it arrives."""

    def __init__(self, list_fn: Callable[..., Any], *args: Any) -> None:
        from kubernetes import watch

        self.events: list[tuple[float, str, Any]] = []
        self._watch = watch.Watch()
        self._cond = threading.Condition()
        listed = list_fn(*args)
        self._thread = threading.Thread(
            target=self._run,
            args=(list_fn, args, listed.metadata.resource_version),
            daemon=True,
        )
        self._thread.start()

    def _run(self, list_fn: Callable[..., Any], args: tuple[Any, ...], rv: str) -> None:
        try:
            for event in self._watch.stream(
                list_fn, *args, resource_version=rv, timeout_seconds=600
            ):
                with self._cond:
                    self.events.append((time.perf_counter(), event["type"], event["object"]))
                    self._cond.notify_all()
        except Exception:
            return

    def first_after(
        self, since: float, match: Callable[[str, Any], bool], timeout: float = 10.0
    ) -> float:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for stamp, kind, obj in self.events:
                    if stamp >= since and match(kind, obj):
                        return stamp
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no matching watch event")
                self._cond.wait(remaining)

    def stop(self) -> None:
        self._watch.stop()


@contextmanager
def armed_target(workload: PathwaysWorkload) -> Iterator[KubeTarget]:
    with tempfile.TemporaryDirectory() as folder:
        journal = RollbackJournal(Path(folder) / "rollback.jsonl")
        target = KubeTarget(
            api_client=workload.api_client,
            namespace=workload.namespace,
            jobset=workload.jobset,
            armed=True,
            allowed_namespaces=frozenset({workload.namespace}),
            journal=journal,
            echo=lambda line: None,
        )
        with journal.guard(workload.api_client):
            yield target


def node_is(name: str, test: Callable[[Any], bool]) -> Callable[[str, Any], bool]:
    def match(kind: str, obj: Any) -> bool:
        return bool(obj.metadata.name == name and test(obj))

    return match


def pod_deleting(name: str) -> Callable[[str, Any], bool]:
    def match(kind: str, obj: Any) -> bool:
        deleting = kind == "DELETED" or obj.metadata.deletion_timestamp is not None
        return bool(obj.metadata.name == name and deleting)

    return match


def injection_latency(plane: LocalControlPlane, rounds: int) -> dict[str, Any]:
    from kubernetes import client

    out: dict[str, Any] = {}
    with (
        pathways_workload_in(plane, slices=2, hosts_per_slice=1) as workload,
        armed_target(workload) as target,
    ):
        core: Any = client.CoreV1Api(workload.api_client)
        pods = EventLog(core.list_namespaced_pod, workload.namespace)
        nodes = EventLog(core.list_node)
        kill, cordon, taint = [], [], []
        for i in range(rounds):
            slice_index = i % workload.slices
            victim = workload.worker_pods(slice_index)[0].metadata.name
            t0 = time.perf_counter()
            KillPods(slice=slice_index, grace=0).inject(target)
            seen = pods.first_after(t0, pod_deleting(victim))
            kill.append(seen - t0)
            workload.wait_running()

            node = workload.worker_pods(slice_index)[0].spec.node_name
            fault = CordonNodes(slice=slice_index)
            t0 = time.perf_counter()
            fault.inject(target)
            seen = nodes.first_after(t0, node_is(node, lambda obj: bool(obj.spec.unschedulable)))
            cordon.append(seen - t0)
            fault.heal(target)

            taint_fault = TaintNode(slice=slice_index, reason="maintenance")
            t0 = time.perf_counter()
            taint_fault.inject(target)
            seen = nodes.first_after(t0, node_is(node, lambda obj: bool(obj.spec.taints)))
            taint.append(seen - t0)
            taint_fault.heal(target)
        pods.stop()
        nodes.stop()
    out["kill_pods"] = summary_ms(kill)
    out["cordon_nodes"] = summary_ms(cordon)
    out["taint_node"] = summary_ms(taint)
    return out


def sustained_kills(plane: LocalControlPlane, seconds: float, max_kills: int) -> dict[str, Any]:
    """Kill, wait for the replacement to run, repeat: what the cluster sustains, not a burst."""
    with (
        pathways_workload_in(plane, slices=2, hosts_per_slice=1) as workload,
        armed_target(workload) as target,
    ):
        kills = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds and kills < max_kills:
            slice_index = kills % workload.slices
            old = {p.metadata.name for p in workload.worker_pods(slice_index)}
            kills += len(KillPods(slice=slice_index, grace=0).inject(target))

            def replaced(s: int = slice_index, gone: set[str] = old) -> bool:
                pods = workload.running_pods(workload.worker_selector(s))
                return len(pods) == 1 and pods[0].metadata.name not in gone

            wait_for(replaced, timeout=30, interval=0.005)
        elapsed = time.monotonic() - started
    return {
        "kills": kills,
        "seconds": round(elapsed, 2),
        "per_minute": round(kills / elapsed * 60, 1),
        "mode": "kill one Pod, wait until its replacement is Running, repeat",
    }


def hot_swap(plane: LocalControlPlane, rounds: int) -> dict[str, Any]:
    times = []
    for _ in range(rounds):
        with (
            pathways_workload_in(
                plane, slices=2, hosts_per_slice=2, spare_slices=1, priority=True
            ) as workload,
            armed_target(workload) as target,
        ):
            spare = set(workload.node_names[workload.spare_pool(0)])
            old = {p.metadata.name for p in workload.worker_pods(1)}
            assert {p.spec.node_name for p in workload.pods(f"{SPARE_LABEL}=0")} == spare
            TaintNode(slice=1, reason="maintenance", host=-1).inject(target)
            t0 = time.perf_counter()
            KillPods(slice=1, grace=0).inject(target)

            def rebound(old: set[str] = old, spare: set[str] = spare) -> bool:
                pods = [p for p in workload.worker_pods(1) if p.metadata.name not in old]
                return len(pods) == workload.hosts_per_slice and all(
                    p.spec.node_name in spare and p.status.phase == "Running" for p in pods
                )

            wait_for(rebound, timeout=30, interval=0.002)
            times.append(time.perf_counter() - t0)
    return summary_ms(times)


def control_plane_start(rounds: int) -> dict[str, Any]:
    script = REPO / "ci" / "build-kube-binaries.sh"
    t0 = time.perf_counter()
    bin_dir = subprocess.run(
        [str(script)], check=True, capture_output=True, text=True
    ).stdout.splitlines()[-1]
    reuse = time.perf_counter() - t0
    starts = []
    for _ in range(rounds):
        with LocalControlPlane(Path(bin_dir)) as plane:
            starts.append(plane.start_seconds)
    return {
        "median_seconds": round(statistics.median(starts), 2),
        "runs": [round(s, 2) for s in starts],
        "build_script_warm_reuse_seconds": round(reuse, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--kill-seconds", type=float, default=None)
    parser.add_argument("--max-kills", type=int, default=500)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    rounds = 5 if args.quick else 30
    kill_seconds = args.kill_seconds or (5.0 if args.quick else 20.0)

    result: dict[str, Any] = {
        "control_plane_start_warm": control_plane_start(1 if args.quick else 3)
    }
    with LocalControlPlane() as plane:
        result["injection_latency_ms"] = injection_latency(plane, rounds)
        result["sustained_pod_kills"] = sustained_kills(plane, kill_seconds, args.max_kills)
        result["hot_swap_rebind_ms"] = hot_swap(plane, 2 if args.quick else 5)
    result["machine"] = {"cores": _cores(), "kube_version": "1.20.2"}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
