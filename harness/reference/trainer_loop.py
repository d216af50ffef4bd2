"""The reference trainer as a loop: a function with the keyword arguments any user's loop
takes, so the loop observer watches it and the loop judges judge it, like any team's loop.

``pathways_chaos.harness.reference.trainer_loop:main`` runs ``ReferenceTrainer`` (or
``trainer=MODULE:CLASS``, a mutant or a variant) for ``steps`` steps and returns its final
state, or ``None`` after a preemption notice once it has written its checkpoint.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.engine.subject_events import reporter
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig

_HERE = "pathways_chaos.harness.reference"


def trainer_class(spec: str) -> type[ReferenceTrainer]:
    """``MODULE:CLASS`` or ``FILE.py:CLASS`` (or a bare name in ``harness.reference.trainer``,
    ``mutants`` or ``variants``): the one loader of what a user names reads it."""
    from pathways_chaos.harness.engine.user_modules import load_name

    if ":" in spec:  # the user's module: an error importing it is the run's own, shown as is
        found = load_name(spec)
        if isinstance(found, type) and issubclass(found, ReferenceTrainer):
            return found
    else:
        for module in ("trainer", "mutants", "variants"):
            found = getattr(importlib.import_module(f"{_HERE}.{module}"), spec, None)
            if isinstance(found, type) and issubclass(found, ReferenceTrainer):
                return found
    raise ChaosConfigError(
        f"trainer={spec!r} names no ReferenceTrainer subclass: write MODULE:CLASS or "
        "FILE.py:CLASS, or the name of a class in pathways_chaos.harness.reference.mutants or "
        ".variants"
    )


def main(
    devices: Sequence[Any] | None = None,
    checkpoint_dir: str | None = None,
    trainer: str = "ReferenceTrainer",
    steps: int = 30,
    mode: str = "resize",
    snapshot_interval: int = 5,
    global_batch: int = 16,
    batch: str = "scaled",
    seed: int = 0,
) -> Any:
    """One run of the reference trainer (or ``trainer``), seen from outside as a loop."""
    config = TrainerConfig(
        mode=mode,
        final_step=steps,
        snapshot_interval=snapshot_interval,
        global_batch=global_batch,
        batch=batch,
        seed=seed,
        checkpoint_dir=checkpoint_dir,
    )
    # The trainer's own events go into the episode's log as what the subject says of itself
    # (judged beside the observer's, never instead); outside an episode they stay in memory.
    recorder = Recorder()
    report = reporter()
    if report is not None:
        recorder.add_listener(report)
    subject = trainer_class(trainer)(config, recorder, devices=devices)
    subject.callback_uses_devices = True  # a fault meets its callback where a loop's would
    result = subject.run()
    return None if result.status == "suspended" else result.state
