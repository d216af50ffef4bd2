"""One episode as data: cluster shape, trainer config, schedule and the outcome it must have.

The property suites generate these, the replay command parses them from its command line, and
both judge the episode with the same ``judge``: a failure printed by a property is reproduced
by pasting its ``replay_command`` into a shell.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shlex
import tempfile
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError

REFERENCE_TRAINER = "pathways_chaos.harness.reference.trainer:ReferenceTrainer"

#: What the episode must end in: training completes; a non-slice-down error ends the run
#: (``error:CODE``); or a persistent error exhausts the retry policy.
EXPECTATIONS = ("completed", "error:", "retries_exhausted")


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
    schedule: str = ""
    slices: int = 4
    devices_per_slice: int = 2
    mode: str = "resize"
    scale_up: str = "in_loop"
    steps: int = 10
    snapshot_interval: int = 2
    global_batch: int = 8
    max_attempts: int = 8
    poll_interval: int = 10  # seconds between the monitor's health polls (fake clock)
    data_size: int = 0  # 0: exactly what a fault-free run eats
    shuffle: bool = False
    expect: str = "completed"
    trainer: str = REFERENCE_TRAINER

    def __post_init__(self) -> None:
        if not (self.expect in ("completed", "retries_exhausted") or self.expect[6:].isupper()):
            raise ChaosConfigError(
                f"--expect {self.expect!r}: use completed, retries_exhausted or error:CODE "
                "(for example error:INVALID_ARGUMENT)"
            )

    def config(self, checkpoint_dir: str | None = None) -> Any:
        from pathways_chaos.harness.reference.data import SyntheticData
        from pathways_chaos.harness.reference.trainer import TrainerConfig

        size = self.data_size or self.steps * self.global_batch
        return TrainerConfig(
            mode=self.mode,
            scale_up=self.scale_up,
            final_step=self.steps,
            snapshot_interval=self.snapshot_interval,
            global_batch=self.global_batch,
            max_attempts=self.max_attempts,
            poll_interval=float(self.poll_interval),
            data=SyntheticData(size=size, shuffle=self.shuffle),
            checkpoint_dir=checkpoint_dir,
        )

    def argv(self) -> list[str]:
        """The replay command's arguments, only those that differ from the defaults."""
        out = ["--schedule", self.schedule]
        for field in dataclasses.fields(self):
            if field.name == "schedule":
                continue
            value = getattr(self, field.name)
            if value != field.default:
                flag = "--" + field.name.replace("_", "-")
                if isinstance(value, bool):
                    out.append(flag)
                else:
                    out += [flag, str(value)]
        return out

    def replay_command(self) -> str:
        return shlex.join(["pathways-chaos", "replay", *self.argv()])


def load_trainer(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    try:
        if not sep:
            raise ValueError("no colon")
        return getattr(importlib.import_module(module_name), attr)
    except (ValueError, ImportError, AttributeError) as error:
        raise ChaosConfigError(
            f"trainer {spec!r} cannot be loaded ({error}): write MODULE:CLASS, for example "
            f"{REFERENCE_TRAINER}"
        ) from None


def run_spec(spec: EpisodeSpec) -> Any:
    """Runs the episode on a fresh fake cluster; returns the ``EpisodeResult``."""
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.episode import run_episode
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    trainer = load_trainer(spec.trainer)
    schedule = parse_schedule(spec.schedule)
    topology = SliceTopology(spec.slices, spec.devices_per_slice)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # a preemption writes a checkpoint
    with (
        tempfile.TemporaryDirectory(prefix="chaos-", dir=shm) as tmp,
        FakeCluster(topology) as fake,
    ):
        return run_episode(fake, spec.config(tmp), schedule, trainer_factory=trainer)


def judge(events: list[dict[str, Any]], spec: EpisodeSpec) -> list[str]:
    """The oracle, plus the outcome the spec expects and the retry policy's bound."""
    from pathways_chaos.harness.judging import oracle

    problems: list[str] = []
    attempts: dict[int, int] = {}
    for e in events:
        if e["kind"] == "attempt_start":
            attempts[e["run"]] = attempts.get(e["run"], 0) + 1
    for run, n in sorted(attempts.items()):
        if n > spec.max_attempts:
            problems.append(
                f"run {run} made {n} attempts though the retry policy allows {spec.max_attempts}:"
                " a persistent error must not be retried forever"
            )
    ends = [e for e in events if e["kind"] == "run_end"]
    last = ends[-1] if ends else {"status": "none", "error": "no run_end in the log"}
    status, error = last["status"], last.get("error") or ""
    if spec.expect == "completed":
        return problems + oracle.check(events).violations
    if spec.expect == "retries_exhausted":
        if status != "failed" or "ElasticRuntimeError" not in error:
            cause = last.get("cause")
            problems.append(
                "an INTERNAL error on every attempt must exhaust the retry policy and fail the "
                f"run with ElasticRuntimeError; the run ended {status} {error[:200]}".rstrip()
                + (f" (caused by {cause[:200]})" if cause else "")
            )
        return problems + oracle.check(events, replay=False, expect_completed=False).violations
    code = spec.expect.removeprefix("error:")
    if status != "failed":
        problems.append(
            f"{_a(code)} {code} error is not a lost slice and must end the run; it was retried or "
            f"swallowed and the run ended {status}"
        )
    elif code not in error:
        cause = last.get("cause")
        problems.append(
            f"{_a(code)} {code} error is not a lost slice and must end the run with it; it was "
            "retried "
            f"or swallowed: the run ended failed with {error[:200]}"
            + (f" (caused by {cause[:200]})" if cause else "")
        )
    return problems + oracle.check(events, replay=False, expect_completed=False).violations


def _a(word: str) -> str:
    return "an" if word[:1].upper() in "AEIOU" else "a"
