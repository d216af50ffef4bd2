"""A fuzz of the loop judge: hypothesis assembles correct loops from building blocks (iteration
style, state container, mesh axis names, snapshot keys, save interval, recovery mode, batch
schedule, ids or not) and runs each through chaos schedules. Every one must get a PASS, or a
NOT JUDGED with its reason: never a failed verdict, never a toolkit exception.

Examples per run: 8 (``PATHWAYS_CHAOS_FUZZ_EXAMPLES`` for more); the number generated and the
time are attached to the test's JUnit properties.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ASSEMBLED = Path(__file__).parents[2] / "loops" / "assembled.py"


def _assembled():
    from pathways_chaos.harness.engine.user_modules import import_file

    # Under the name the toolkit gives a loop file: the episode's child loads it the same way.
    return import_file(ASSEMBLED, "pathways_chaos_loop_")


SCHEDULES = (
    "data_loss@batch=5:slice=1:repair_after_polls=3",
    "data_loss@save=2:slice=2:repair_after_polls=3",
    "internal@batch=7:slice=3:repair_after_polls=2,data_loss@batch=9:slice=1:repair_after_polls=2",
)
EXAMPLES = int(os.environ.get("PATHWAYS_CHAOS_FUZZ_EXAMPLES", 8))

blocks = st.builds(
    _assembled().Blocks,
    iteration=st.sampled_from(["next", "for", "zip", "generator"]),
    container=st.sampled_from(["dict", "tuple", "namedtuple", "dataclass"]),
    hidden=st.sampled_from([4, 8]),
    momentum=st.booleans(),
    axes=st.sampled_from([("replica", "model"), ("data", "tp"), ("slices", "chips")]),
    snapshot_key=st.sampled_from(["state", "train_state", "model"]),
    every=st.integers(2, 5),
    mode=st.sampled_from(["resize", "pause_resume"]),
    batch=st.sampled_from(["fixed", "scaled"]),
    ids=st.booleans(),
)
STATS = {"generated": 0, "seconds": 0.0, "not_judged": 0}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(b=blocks, schedule=st.sampled_from(SCHEDULES))
def test_a_correct_assembled_loop_passes_or_is_not_judged(chaos, record_property, b, schedule):
    t0 = time.perf_counter()
    out = chaos.run_loop(functools.partial(_assembled().run, b), schedule)
    STATS["generated"] += 1
    STATS["seconds"] += time.perf_counter() - t0
    STATS["not_judged"] += len(out.verdict.not_judged)
    record_property("fuzz_examples", STATS["generated"])
    record_property("fuzz_seconds", round(STATS["seconds"], 1))

    assert out.result.error is None, f"{b}: {out.result.error!r}"
    assert out.verdict.ok, f"{b} under {schedule}:\n{out.verdict.summary()}"
    assert all(reason for reason in out.verdict.not_judged.values())
