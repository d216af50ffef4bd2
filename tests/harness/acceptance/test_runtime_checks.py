"""Each runtime check passes the reference adapter and flags an adapter with its one pitfall.

The bad adapters are the reference adapter with one piece swapped. Runs are lazy, so a test
that asks one check pays only for the runs that check reads.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.acceptance.adapter import (
    TrainingAdapter,
    load_adapter,
    reference_adapter,
)
from pathways_chaos.harness.acceptance.runtime import RuntimeRuns
from pathways_chaos.harness.acceptance.runtime_checks import RUNTIME_CHECKS
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.reference.data import SyntheticData

ROOT = Path(__file__).parents[3]
SAMPLES = ROOT / "suites" / "acceptance" / "samples"
DATA = SyntheticData()


class Loader:
    """A loader over the reference data with one habit a port can have."""

    def __init__(
        self,
        batch: int,
        *,
        stride: int = 1,
        restores: bool = True,
        delay_s: float = 0.0,
        shrink_every_other: bool = False,
        keep: list[Any] | None = None,
    ) -> None:
        self.batch, self.stride, self.restores = batch, stride, restores
        self.delay_s, self.shrink = delay_s, shrink_every_other
        self.position = 0
        self.count = 0
        if keep is not None:  # a device-resident table kept in a long-lived list
            import jax
            import jax.numpy as jnp

            keep.append(jax.device_put(jnp.ones(4), jax.devices()[0]))

    def __next__(self) -> dict[str, Any]:
        n = self.batch // 2 if self.shrink and self.count % 2 else self.batch
        ids = [(self.position + k) * self.stride for k in range(n)]
        self.position += n
        self.count += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return DATA.batch(ids)

    def get_state(self) -> dict[str, int]:
        return {"position": self.position, "count": self.count}

    def set_state(self, state: dict[str, int]) -> None:
        if self.restores:
            self.position, self.count = int(state["position"]), int(state["count"])


def _loader(batch: int, **habit: Any) -> Loader:
    return Loader(batch, **habit)


def with_loader(name: str, mode: str = "resize", **habit: Any) -> TrainingAdapter:
    # A partial of module-level code, not a lambda: the adapter travels to its episode's
    # process by reference (as one loaded with --acceptance-adapter travels by its spec).
    return dataclasses.replace(
        reference_adapter(mode),
        name=name,
        make_iterator=functools.partial(_loader, **habit),
    )


def all_devices_mesh(manager: Any) -> Any:
    import jax
    import numpy as np

    devices = np.asarray(jax.devices()[: 4 * 2], dtype=object)  # the whole fake cluster
    return jax.sharding.Mesh(devices.reshape(4, 2), ("replica", "data"))


LEAKED: list[Any] = []


@pytest.fixture(autouse=True)
def _free_what_the_bad_samples_keep():
    """The hoarding adapters keep device arrays on purpose; later tests must not see them."""
    yield
    LEAKED.clear()
    import sys

    for module in list(sys.modules.values()):
        loaders = getattr(module, "_LOADERS", None)
        if isinstance(loaders, list) and module.__name__.startswith("pathways_chaos_adapter_"):
            loaders.clear()


# check -> (the bad adapter, a phrase its finding must carry)
BAD: dict[str, tuple[Any, str]] = {
    "data-order": (
        lambda: with_loader("strided", stride=4),
        "baseline run: step 0 consumed ids [0, 4, 8, 12, 16, 20]..., expected [0, 1, 2, 3, 4, 5]",
    ),
    "snapshot-restore": (
        lambda: with_loader("forgetful", restores=False),
        "after restoring step 6, step 7 consumed ids [0, 1, 2, 3, 4, 5] but the baseline's "
        "step 7 consumed [112, 113",
    ),
    "checkpoint-restore": (
        lambda: with_loader("forgetful", restores=False),
        "after restoring step 4, step 5 consumed ids [0, 1, 2, 3, 4, 5]",
    ),
    "compile-time": (
        lambda: with_loader("ragged", shrink_every_other=True),
        "train_step compiled 2 times for 1 mesh: it recompiles in steady state",
    ),
    "input-wait": (
        lambda: with_loader("slow", delay_s=0.03),
        "the device waits on the loader",
    ),
    "interruption": (
        lambda: dataclasses.replace(reference_adapter("resize"), build_mesh=all_devices_mesh),
        "oracle: attempt 2 mesh holds devices [[0, 1], [2, 3], [4, 5], [6, 7]], not the active "
        "slices [0, 2, 3]",
    ),
    "recovery-time": (
        lambda: reference_adapter("pause_resume"),
        "recovery took 20.0 s, over the 5 s budget",
    ),
    "live-arrays": (
        lambda: with_loader("hoarder", mode="pause_resume", keep=LEAKED),
        "live device arrays grew from",
    ),
}


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory):
    runs = RuntimeRuns(reference_adapter(), workdir=tmp_path_factory.mktemp("reference"))
    yield runs
    runs.close()


def test_every_check_has_a_bad_adapter():
    assert set(BAD) == set(RUNTIME_CHECKS)


@pytest.mark.parametrize("check", list(RUNTIME_CHECKS))
def test_passes_the_reference_adapter(reference_runs, check):
    result = RUNTIME_CHECKS[check](reference_runs)
    assert result.ok, result.failure_message()
    assert result.note


@pytest.mark.parametrize("check", list(BAD))
def test_flags_the_known_bad_adapter(tmp_path, check):
    make, phrase = BAD[check]
    budget = 5.0 if check == "recovery-time" else 120.0
    runs = RuntimeRuns(make(), workdir=tmp_path, recovery_budget_s=budget)
    result = RUNTIME_CHECKS[check](runs)
    assert not result.ok
    assert phrase in result.failure_message(), result.failure_message()


def test_pause_and_resume_is_measured_in_fake_seconds(tmp_path):
    runs = RuntimeRuns(reference_adapter("pause_resume"), workdir=tmp_path)
    for check in ("interruption", "recovery-time", "live-arrays", "snapshot-restore"):
        result = RUNTIME_CHECKS[check](runs)
        assert result.ok, result.failure_message()
    # Two health polls of 10 s: the slice is back after 20 s of episode time.
    assert "recovered in 20.0 s of episode time" in RUNTIME_CHECKS["recovery-time"](runs).reason


def test_a_fingerprint_stands_in_for_sample_ids(tmp_path):
    adapter = dataclasses.replace(reference_adapter(), batch_ids=None)
    runs = RuntimeRuns(adapter, workdir=tmp_path)
    assert RUNTIME_CHECKS["data-order"](runs).ok is False  # the declared ids are sample ids
    adapter = dataclasses.replace(adapter, expected_ids=None)
    runs = RuntimeRuns(adapter, workdir=tmp_path / "2")
    result = RUNTIME_CHECKS["data-order"](runs)
    assert result.ok and "match the baseline run" in result.reason
    assert all(len(ids) == 1 for ids in runs.baseline.ids)


def test_the_sample_ports(tmp_path):
    port = load_adapter(f"{SAMPLES}/pitfall_port/train.py:adapter")
    bad = RuntimeRuns(port, workdir=tmp_path / "pitfall")
    failed = [c for c, check in RUNTIME_CHECKS.items() if not check(bad).ok]
    assert failed == [
        "data-order",
        "snapshot-restore",
        "checkpoint-restore",
        "input-wait",
        "interruption",
        "live-arrays",
    ]
    good = RuntimeRuns(load_adapter(f"{SAMPLES}/good_port/train.py:adapter"), workdir=tmp_path)
    (tmp_path / "checkpoints" / "step_00000099").mkdir(parents=True)  # stale: must be ignored
    results = [check(good) for check in RUNTIME_CHECKS.values()]
    assert all(r.ok for r in results), [r.failure_message() for r in results if not r.ok]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "write MODULE:NAME or FILE.py:NAME"),
        ("pathways_chaos.nope:adapter", "cannot be loaded (ModuleNotFoundError"),
        ("pathways_chaos.harness.acceptance.adapter:missing", "cannot be loaded (AttributeError"),
        ("pathways_chaos.harness.acceptance.adapter:RECOVERY_MODES", "not a TrainingAdapter"),
        ("missing/file.py:adapter", "no such file missing/file.py"),
    ],
)
def test_bad_trainer_spec_is_one_line(spec, message):
    with pytest.raises(ChaosConfigError, match="--acceptance-adapter=") as error:
        load_adapter(spec)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bad_adapter_fields_are_refused():
    with pytest.raises(ChaosConfigError, match="recovery_mode='elastic': use one of"):
        dataclasses.replace(reference_adapter(), recovery_mode="elastic")
    with pytest.raises(ChaosConfigError, match="so an interruption lands after a snapshot"):
        dataclasses.replace(reference_adapter(), steps=4)
    with pytest.raises(ChaosConfigError, match="need >= 2 fake slices"):
        from pathways_chaos.harness.engine.topology import SliceTopology

        RuntimeRuns(reference_adapter(), topology=SliceTopology(1, 8))


def _run_suite_on(port: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The acceptance suite on a sample port: its adapter, source and manifest."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "suites" / "acceptance"),
            f"--acceptance-adapter={port / 'train.py'}:adapter",
            f"--acceptance-source={port}",
            f"--acceptance-manifest={port / 'jobset.yaml'}",
            *extra,
            "-q",
            "-p",
            "no:randomly",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_suite_against_the_pitfall_port_prints_one_failing_row_per_pitfall():
    proc = _run_suite_on(SAMPLES / "pitfall_port")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    # The table runs from its banner to its own closing count (with CI set, pytest's summary
    # after it repeats every failure message, fix lines included).
    table = proc.stdout.split("pathways-chaos acceptance checks", 1)[1]
    table = table.split("2 passed, 26 failed", 1)[0] + "2 passed, 26 failed"
    rows = {
        line.split()[0]: line.split()[1]
        for line in table.splitlines()
        if len(line.split()) > 1 and line.split()[1] in ("PASS", "FAIL")
    }
    assert rows == {
        **{c: "FAIL" for c in rows if c not in ("compile-time", "recovery-time")},
        "compile-time": "PASS",
        "recovery-time": "PASS",
    }
    assert len(rows) == 28 and "2 passed, 26 failed" in table
    assert table.count("fix: ") == 26


def test_the_suite_against_the_good_port_passes_every_row():
    """The plain test run leaves suites/acceptance out (with nothing given it checks nothing);
    here it runs on the bundled good port, and every row it was given must pass."""
    proc = _run_suite_on(SAMPLES / "good_port", "--acceptance-params=8e9")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    table = proc.stdout.split("pathways-chaos acceptance checks", 1)[1]
    statuses = [
        line.split()[1]
        for line in table.splitlines()
        if len(line.split()) > 1 and line.split()[1] in ("PASS", "FAIL", "SKIP", "NOT")
    ]
    assert len(statuses) >= 24 and set(statuses) == {"PASS"}, table[-3000:]
