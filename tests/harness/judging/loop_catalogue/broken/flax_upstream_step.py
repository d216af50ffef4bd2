"""pathwaysutils' Flax ``Workload`` used as upstream does: ``restore_from_snapshot`` brings back
params and data position but not ``Workload.step``, so the new attempt's Workload counts from
step 1 again and trains a full run on top of the restored snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAUSE = "step-not-restored"
SCENARIO = "data_loss@batch=10:slice=1:repair_after_polls=3"


def main(
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 4
) -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "correct" / "flax_simple_workload.py"
    spec = importlib.util.spec_from_file_location("loop_catalogue_flax_workload", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run(
        restore_step=False, devices=devices, checkpoint_dir=checkpoint_dir, steps=steps, every=every
    )
