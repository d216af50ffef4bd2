"""The yardstick runs of a resize recovery, one after the other against side by side (issue 33,
item 5: the loop search's rate). A schedule that loses a slice from a loop whose batch scales
with the slices is judged with two more runs of the loop (the clean rerun and the restore
probe, ``harness/judging/yardsticks.py``); each is a child of its own, so on two cores they
can run at once. Printed as one JSON object: the median wall time of one judged episode each
way, rounds alternated so both see the same machine, and their ratio.

Usage: python bench/bench_yardsticks.py [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

SAMPLE = "pathways_chaos.harness.reference.user_loop:main"
LOSS = "data_loss@batch=10:slice=1"


def _episode(baseline: Any, side_by_side: bool) -> float:
    from pathways_chaos.harness import play

    cores = (os.cpu_count() or 1) if side_by_side else 1
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(play.os, "cpu_count", lambda: cores),
    ):
        t0 = time.perf_counter()
        out = play.play_loop(SAMPLE, LOSS, baseline=baseline, checkpoint_dir=Path(tmp) / "c")
        took = time.perf_counter() - t0
    assert out.verdict.ok and "final-state" in out.verdict.judged, out.verdict.summary()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from pathways_chaos.harness import play

    with tempfile.TemporaryDirectory() as tmp:
        baseline = play.play_loop(SAMPLE, checkpoint_dir=Path(tmp) / "c").events
    seconds: dict[str, list[float]] = {"one_after_the_other": [], "side_by_side": []}
    for _ in range(args.rounds):
        seconds["one_after_the_other"].append(_episode(baseline, False))
        seconds["side_by_side"].append(_episode(baseline, True))
    medians = {k: statistics.median(v) for k, v in seconds.items()}
    result = {
        "bench": "yardsticks",
        "issue": 33,
        "loop": SAMPLE,
        "schedule": LOSS,
        "cores": os.cpu_count(),
        "load_1min": round(os.getloadavg()[0], 2),
        "seconds": {k: [round(s, 2) for s in v] for k, v in seconds.items()},
        "median_s": {k: round(v, 2) for k, v in medians.items()},
        "ratio_side_by_side": round(medians["side_by_side"] / medians["one_after_the_other"], 3),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
