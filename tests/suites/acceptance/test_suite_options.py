"""The acceptance suite as a user runs it: ``--acceptance-*`` options from the plugin, only what
is given is checked, checks chosen by group or name, and the rows written to a report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
SAMPLES = ROOT / "suites" / "acceptance" / "samples"


def pytest_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *args,
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def table_rows(stdout: str) -> dict[str, str]:
    table = stdout.split("pathways-chaos acceptance checks", 1)[1]
    out = {}
    for line in table.splitlines():
        words = line.split()
        if len(words) > 1 and words[1] in ("PASS", "FAIL", "SKIP"):
            out[words[0]] = words[1]
        elif len(words) > 2 and words[1:3] == ["NOT", "JUDGED"]:
            out[words[0]] = "NOT JUDGED"
    return out


def test_static_and_manifest_checks_on_another_repository(tmp_path):
    """The README's command: the installed suite, a repository that is not this one, no
    adapter, only the static and manifest groups; the rows land in a JSON report."""
    (tmp_path / "src").mkdir()
    (tmp_path / "deploy").mkdir()
    shutil.copy(SAMPLES / "pitfall_port" / "train.py", tmp_path / "src" / "train.py")
    shutil.copy(SAMPLES / "pitfall_port" / "jobset.yaml", tmp_path / "deploy" / "jobset.yaml")
    out = pytest_run(
        tmp_path,
        "--pyargs",
        "pathways_chaos.suites.acceptance",
        "--acceptance-checks=static,manifest",
        "--acceptance-source=src",
        "--acceptance-manifest=deploy",
        "--acceptance-params=8e9",
        "--acceptance-report=rows.json",
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    rows = table_rows(out.stdout)
    assert len(rows) == 20 and set(rows.values()) == {"FAIL"}
    assert "data-order" not in rows and "8 deselected" in out.stdout
    assert "adapter not given; source src; manifest deploy" in out.stdout
    report = json.loads((tmp_path / "rows.json").read_text())
    assert {r["group"] for r in report["rows"]} == {"static", "manifest"}
    assert [r["check"] for r in report["rows"]][:2] == ["process-index", "distributed-initialize"]
    assert report["summary"] == "0 passed, 20 failed"


def test_nothing_given_checks_nothing():
    """No fallback to the bundled sample: every row is SKIP and says what to pass."""
    out = pytest_run(ROOT, "suites/acceptance", "--acceptance-checks=static,manifest", "-rs")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "20 skipped" in out.stdout and "passed" not in out.stdout.split("short test")[0]
    assert "not given: pass --acceptance-source PATH" in out.stdout
    assert "nothing given, 20 rows skipped" in out.stdout


def test_checks_chosen_by_name_and_missing_inputs_skipped(tmp_path):
    out = pytest_run(
        ROOT,
        "suites/acceptance",
        "--acceptance-checks=dev-shm,elastic-retry-bound,ramdisk-size",
        f"--acceptance-manifest={SAMPLES / 'good_port' / 'jobset.yaml'}",
        f"--acceptance-report={tmp_path / 'rows.html'}",
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert table_rows(out.stdout) == {
        "elastic-retry-bound": "SKIP",  # no --acceptance-source
        "dev-shm": "PASS",
        "ramdisk-size": "SKIP",  # no --acceptance-params and no adapter to count
    }
    page = (tmp_path / "rows.html").read_text()
    assert "not given: pass --acceptance-source PATH" in page


def test_an_unknown_check_is_a_one_line_usage_error():
    out = pytest_run(ROOT, "suites/acceptance", "--acceptance-checks=static,dev-shmm")
    assert out.returncode == 4
    assert "--acceptance-checks: unknown dev-shmm: use the groups static, manifest, runtime" in (
        out.stderr
    )


def _marked(module: Path, marker: Path, body: str) -> Path:
    """A module that writes the pid of each process importing it to ``marker``, then ``body``."""
    module.write_text(f"import os\nopen({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\n{body}")
    return module


def _suite_and_its_pid(*args: str) -> tuple[int, int, str]:
    """The acceptance suite in a new pytest process: its pid, exit code and output."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "suites/acceptance", "-q", "-p", "no:randomly"),
            *("-p", "no:cacheprovider", *args),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    stdout, _ = process.communicate(timeout=300)
    return process.pid, process.returncode, stdout


def test_the_loop_under_acceptance_is_imported_only_by_its_runs(tmp_path):
    """``--chaos-loop`` in the acceptance suite: its module runs in the runs' child processes,
    never in pytest's (a module that exits at import would otherwise end the session)."""
    marker = tmp_path / "imported.txt"
    body = "from pathways_chaos.harness.reference.user_loop import main\n"
    loop = _marked(tmp_path / "marked_loop.py", marker, body)
    pid, code, stdout = _suite_and_its_pid(
        "--acceptance-checks=data-order", f"--chaos-loop={loop}:main"
    )
    assert code == 0, stdout[-3000:]
    assert table_rows(stdout) == {"data-order": "PASS"}
    pids = marker.read_text().split()
    assert pids and str(pid) not in pids, (pid, pids)


def test_the_adapter_under_acceptance_is_imported_only_by_child_processes(tmp_path):
    """``--acceptance-adapter``: the team's module is loaded by the adapter's child (its fields,
    its plain run) and by each episode's child, never by pytest."""
    marker = tmp_path / "imported.txt"
    port = SAMPLES / "good_port" / "train.py"
    body = f"import sys\nsys.path.insert(0, {str(port.parent)!r})\nfrom train import adapter\n"
    adapter = _marked(tmp_path / "marked_adapter.py", marker, body)
    pid, code, stdout = _suite_and_its_pid(
        "--acceptance-checks=data-order,interruption", f"--acceptance-adapter={adapter}:adapter"
    )
    assert code == 0, stdout[-3000:]
    assert table_rows(stdout) == {"data-order": "PASS", "interruption": "PASS"}
    pids = marker.read_text().split()
    # the adapter's own child, its plain run's, the migrated and the interrupted runs' children
    assert len(set(pids)) >= 3 and str(pid) not in pids, (pid, pids)


def test_an_adapter_whose_module_exits_at_import_is_one_line(tmp_path):
    adapter = tmp_path / "exits_adapter.py"
    adapter.write_text("import os\nos._exit(3)\n")
    out = pytest_run(
        ROOT,
        "suites/acceptance",
        "--acceptance-checks=data-order",
        f"--acceptance-adapter={adapter}:adapter",
    )
    # a bad input: one usage line, exit 4, said once before any row (not an ERROR per row)
    assert out.returncode == 4, out.stdout[-3000:] + out.stderr[-3000:]
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert "exited with code 3: os._exit(3) at" in line and "exits_adapter.py:2" in line, line


BF16_ADAPTER = """
import jax.numpy as jnp
import numpy as np

from pathways_chaos.harness.acceptance.adapter import TrainingAdapter


def init():
    return {"w": jnp.zeros((4,), jnp.bfloat16)}


def step(state, batch):
    return {"w": state["w"] + batch["x"].mean(0).astype(jnp.bfloat16)}, jnp.float32(0)


class Counter:
    def __init__(self, global_batch):
        self.at, self.size = 0, global_batch

    def __next__(self):
        ids = np.arange(self.at, self.at + self.size)
        self.at += self.size
        return {"id": ids, "x": np.ones((self.size, 4), np.float32) * (ids[:, None] % 3)}

    def get_state(self):
        return {"at": self.at}

    def set_state(self, state):
        self.at = int(state["at"])


adapter = TrainingAdapter(
    name="bf16", init_state=init, train_step=step, make_iterator=Counter,
    batch_ids=lambda batch: batch["id"].tolist(),
)
"""


def test_an_adapter_whose_state_is_bfloat16_is_compared_not_unjudged(tmp_path):
    """The plain run's state crosses from the adapter's child as files numpy can read back
    (bfloat16 as float32, exact), so the migrated run is compared with it."""
    adapter = tmp_path / "bf16_adapter.py"
    adapter.write_text(BF16_ADAPTER)
    out = pytest_run(
        ROOT,
        "suites/acceptance",
        "--acceptance-checks=data-order",
        f"--acceptance-adapter={adapter}:adapter",
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert table_rows(out.stdout) == {"data-order": "PASS"}


#: Variants of the bfloat16 adapter a black-box tester wrote: (code before the adapter is made,
#: code after it, the row it must give, a phrase its line must carry). A correct state with a
#: NaN leaf passes (NaN where the baseline has NaN is the same state); the team's own failures
#: FAIL at their line or field, never as "a bug in pathways-chaos".
NAN_LEAF = """
def init():
    return {"w": jnp.zeros((4,), jnp.bfloat16), "best": jnp.float32(jnp.nan)}


def step(state, batch):
    w = state["w"] + batch["x"].mean(0).astype(jnp.bfloat16)
    return {"w": w, "best": state["best"]}, jnp.float32(0)
"""
FORKS_A_SLEEPER = """
import os
import time


class ForksASleeper(Counter):
    def __next__(self):
        if self.at == 0 and os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        return super().__next__()


adapter = dataclasses.replace(adapter, make_iterator=ForksASleeper)
"""
ADAPTER_VARIANTS = {
    "a NaN leaf": (NAN_LEAF, "", "PASS", "final state matches"),
    "ids that are not ints": (
        "",
        "adapter = dataclasses.replace(adapter, batch_ids=lambda b: [f's{i}' for i in b['id']])",
        "FAIL",
        "batch_ids returned ['s0'",
    ),
    "an iterator that forks a sleeper": (
        "",
        FORKS_A_SLEEPER,
        "FAIL",
        "the adapter's code left 1 process running",
    ),
    "sys.exit in the step": (
        "def step(state, batch):\n    raise SystemExit(2)\n",
        "",
        "FAIL",
        "in step: your code raised SystemExit: 2",
    ),
}


@pytest.mark.parametrize("variant", sorted(ADAPTER_VARIANTS))
def test_an_adapters_own_failure_is_its_row_and_a_nan_leaf_is_no_difference(tmp_path, variant):
    before, after, row, says = ADAPTER_VARIANTS[variant]
    made = "\nadapter = TrainingAdapter("
    text = BF16_ADAPTER.replace(made, "\n" + before + made)
    adapter = tmp_path / "variant_adapter.py"
    adapter.write_text("import dataclasses\n" + text + after + "\n")
    out = pytest_run(
        ROOT,
        "suites/acceptance",
        "--acceptance-checks=data-order",
        f"--acceptance-adapter={adapter}:adapter",
    )
    assert table_rows(out.stdout) == {"data-order": row}, out.stdout[-3000:]
    assert says in out.stdout and "bug in pathways-chaos" not in out.stdout, out.stdout[-3000:]


def test_a_row_whose_input_cannot_be_read_stays_in_the_report(tmp_path):
    """It vanished: an invalid ``inMemoryVolumeSize`` failed the test with its one line, but
    the table said "0 passed" and the JSON report held no row, so a gate reading the report
    saw green."""
    (tmp_path / "deploy").mkdir()
    jobset = (SAMPLES / "good_port" / "jobset.yaml").read_text()
    config = """
apiVersion: checkpointing.gke.io/v1
kind: CheckpointConfiguration
metadata:
  name: mtc
spec:
  cloudStorageBucketName: bucket
  inMemoryVolumeSize: 60GB
"""
    (tmp_path / "deploy" / "jobset.yaml").write_text(jobset + "\n---\n" + config)
    report = tmp_path / "report.json"
    out = pytest_run(
        tmp_path,
        "--pyargs",
        "pathways_chaos.suites.acceptance",
        "--acceptance-checks=ramdisk-size",
        "--acceptance-manifest=deploy",
        "--acceptance-params=8e9",
        f"--acceptance-report={report}",
    )
    assert out.returncode == 1, out.stdout[-3000:]
    assert table_rows(out.stdout) == {"ramdisk-size": "FAIL"}
    (row,) = json.loads(report.read_text())["rows"]
    assert row["status"] == "FAIL" and "'60GB' is not a Kubernetes quantity" in row["reason"]


def test_a_check_is_chosen_by_the_name_its_row_shows():
    """``--acceptance-checks=minimum-slice-count`` (the row's name, the docs' spelling) was
    refused as unknown; only the test function's name was accepted."""
    out = pytest_run(ROOT, "suites/acceptance", "--acceptance-checks=minimum-slice-count", "-rs")
    assert "unknown" not in out.stdout + out.stderr, out.stdout[-2000:]
    assert out.returncode == 0 and "1 skipped, " in out.stdout, out.stdout[-2000:]
