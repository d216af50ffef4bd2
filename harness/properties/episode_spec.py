"""One episode as data: cluster shape, trainer config, schedule and the outcome it must have.

The property suites generate these, the replay command parses them from its command line, and
both judge the episode with the same ``judge``: a failure printed by a property is reproduced
by pasting its ``replay_command`` into a shell.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import tempfile
from typing import Any

from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.errors import ChaosConfigError

REFERENCE_TRAINER = "pathways_chaos.harness.reference.trainer:ReferenceTrainer"

#: What the episode must end in: training completes; a non-slice-down error ends the run
#: (``error:CODE``); or a persistent error exhausts the retry policy.
EXPECTATIONS = ("completed", "error:", "retries_exhausted")


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
    schedule: str = ""
    slices: int = SliceTopology.DEFAULT.num_slices
    devices_per_slice: int = SliceTopology.DEFAULT.devices_per_slice
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
        for name in ("slices", "devices_per_slice", "steps", "snapshot_interval", "global_batch"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise ChaosConfigError(f"{flag} {getattr(self, name)}: use a whole number >= 1")
        for name in ("max_attempts", "poll_interval", "data_size"):
            if getattr(self, name) < 0:
                flag = "--" + name.replace("_", "-")
                raise ChaosConfigError(f"{flag} {getattr(self, name)} is negative: use >= 0")
        needed = self.steps * self.global_batch
        if self.data_size and self.data_size < needed:
            raise ChaosConfigError(
                f"--data-size {self.data_size} is too small: {self.steps} steps of "
                f"{self.global_batch} samples need at least {needed} (or 0 for exactly that)"
            )
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


def run_spec(spec: EpisodeSpec, *, replay: bool = True) -> Any:
    """Plays the episode on a fresh fake cluster; returns the ``Outcome``.

    The verdict fits what the spec expects: the full oracle for a run that must complete, no
    replay for one that must fail (nor when the caller judges something else: ``replay=False``).
    """
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.play import play

    completed = spec.expect == "completed"
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # a preemption writes a checkpoint
    with tempfile.TemporaryDirectory(prefix="chaos-", dir=shm) as tmp:
        return play(
            spec.schedule,
            config=spec.config(tmp),
            topology=SliceTopology(spec.slices, spec.devices_per_slice),
            trainer=spec.trainer,
            replay=completed and replay,
            expect_completed=completed,
        )


def judge(events: list[dict[str, Any]], spec: EpisodeSpec, verdict: Any = None) -> list[str]:
    """The oracle (``verdict`` when ``run_spec`` already gave it), the expected end, the bound."""
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
    if verdict is None:
        completed = spec.expect == "completed"
        verdict = oracle.check(events, replay=completed, expect_completed=completed)
    if spec.expect == "completed":
        return problems + verdict.violations
    if spec.expect == "retries_exhausted":
        if status != "failed" or "ElasticRuntimeError" not in error:
            cause = last.get("cause")
            problems.append(
                "an INTERNAL error on every attempt must exhaust the retry policy and fail the "
                f"run with ElasticRuntimeError; the run ended {status} {error[:200]}".rstrip()
                + (f" (caused by {cause[:200]})" if cause else "")
            )
        return problems + verdict.violations
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
    return problems + verdict.violations


def _a(word: str) -> str:
    return "an" if word[:1].upper() in "AEIOU" else "a"
