"""A trainer the toolkit did not write runs, and is replayed, in child processes: whatever it
does ends as a verdict naming it, nothing of it outlives its child, and a correct one passes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pathways_chaos.harness.engine import process_tree
from pathways_chaos.harness.engine.deadline import Deadline
from pathways_chaos.harness.episodes.supervised_trainer import is_toolkits_own
from pathways_chaos.harness.play import load_object, play
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig
from pathways_chaos.harness.reference.variants import WeightDecayTrainer

HOSTILE = Path(__file__).parents[2] / "trainers" / "hostile.py"
SHORT = TrainerConfig(final_step=12, snapshot_interval=4)


def _trainer(name: str) -> str:
    """As a user names it: ``--chaos-trainer=FILE.py:CLASS``."""
    return f"{HOSTILE}:{name}"


def _error(out: object) -> str:
    ends = [e for e in out.result.events if e["kind"] == "run_end"]  # type: ignore[attr-defined]
    return str(ends[-1].get("error") or "") if ends else ""


def test_only_the_toolkits_own_trainers_stay_in_this_process() -> None:
    assert is_toolkits_own(None) and is_toolkits_own(ReferenceTrainer)
    assert is_toolkits_own(WeightDecayTrainer)
    assert not is_toolkits_own(load_object(_trainer("ExitsInStep"), "trainer"))
    assert not is_toolkits_own(load_object(_trainer("PidRecordingWeightDecay"), "trainer"))


def test_a_correct_trainer_passes_run_and_replayed_in_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("TRAINER_PID_FILE", str(pids))
    out = play(
        "data_loss@step=5:slice=1", config=SHORT, trainer=_trainer("PidRecordingWeightDecay")
    )
    assert out.ok, out.verdict.violations
    assert "replay" in out.verdict.judged  # the replay ran (in its own child) and agreed
    ran_in = {int(p) for p in pids.read_text().split()}
    assert os.getpid() not in ran_in and len(ran_in) == 2  # the episode's child, the replay's


def test_a_broken_trainer_fails_for_its_cause_through_the_replay_child() -> None:
    out = play("data_loss@step=5:slice=1", config=SHORT, trainer=_trainer("IgnoresRestoredState"))
    assert out.verdict.completed and not out.ok
    assert "replay" in out.verdict.failed, out.verdict.violations
    assert "a fault-free run of the same trainer" in out.verdict.violations[0]


def test_what_a_trainer_changes_in_its_process_stays_there() -> None:
    out = play("", config=SHORT, trainer=_trainer("ChangesTheWorkingFolder"))
    assert os.getcwd() != "/" and "HOSTILE_TRAINER_WAS_HERE" not in os.environ
    assert out.ok, out.verdict.violations


def test_an_exit_in_the_trainer_is_a_failed_run_that_names_it() -> None:
    out = play("", config=SHORT, trainer=_trainer("ExitsInStep"))
    assert not out.ok
    error = _error(out)
    assert "trainer's process exited with code 0: os._exit(0)" in error, error
    assert "hostile.py" in error, error


def test_a_blocked_trainer_meets_the_wall_deadline_with_its_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pathways_chaos.harness.engine import deadline

    previous = deadline.set_default_deadline(Deadline(wall_s=5.0))
    try:
        out = play("", config=SHORT, trainer=_trainer("BlocksForever"))
    finally:
        deadline.set_default_deadline(previous)
    error = _error(out)
    assert "wall-time deadline of 5 s: the trainer was blocked at" in error, error
    assert "hostile.py" in error and "before_step" in error, error


def test_a_process_the_trainer_forks_is_ended_and_named() -> None:
    out = play("", config=SHORT, trainer=_trainer("ForksAndLeaves"))
    ends = [e for e in out.result.events if e["kind"] == "child_end"]
    assert ends and ends[-1]["left_behind"], ends
    token_pids = [
        pid for pid in process_tree.descendants(os.getpid()) if Path(f"/proc/{pid}").exists()
    ]
    assert all("sleep" not in Path(f"/proc/{p}/cmdline").read_text() for p in token_pids)


def test_isolate_false_keeps_a_trainer_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("TRAINER_PID_FILE", str(pids))
    out = play("", config=SHORT, trainer=_trainer("PidRecordingWeightDecay"), isolate=False)
    assert out.ok, out.verdict.violations
    assert {int(p) for p in pids.read_text().split()} == {os.getpid()}


def test_check_replays_a_logged_trainer_in_a_child_never_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    (tmp_path / "marker_trainer.py").write_text(
        "import os\n"
        "from pathways_chaos.harness.reference.variants import WeightDecayTrainer\n"
        "open(os.environ['MARK'], 'a').write(f'{os.getpid()}\\n')\n"
        "class MarkerTrainer(WeightDecayTrainer):\n    pass\n"
    )
    marks = tmp_path / "marks.txt"
    monkeypatch.setenv("MARK", str(marks))
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "episode.jsonl"
    out = play(
        "data_loss@step=5:slice=1",
        config=SHORT,
        trainer="marker_trainer:MarkerTrainer",
        log_path=log,
    )
    assert out.ok, out.verdict.violations
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    marks.write_text("")
    command = [sys.executable, "-m", "pathways_chaos.harness.cli.main", "check", str(log)]
    check = subprocess.Popen(
        [*command, "--trainer", "marker_trainer:MarkerTrainer"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = check.communicate(timeout=300)
    assert check.returncode == 0, output
    imported_in = {int(p) for p in marks.read_text().split()}
    assert imported_in and check.pid not in imported_in, (check.pid, imported_in)
    assert "not judged: replay" not in output, output

    # On the log's word alone, its trainer is not run anywhere: the replay is not judged.
    marks.write_text("")
    alone = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert marks.read_text() == "", "a trainer a log named was imported without --trainer"
    assert "pass --trainer marker_trainer:MarkerTrainer" in alone.stdout, alone.stdout
    wrong = subprocess.run(
        [*command, "--trainer", "os:system"], env=env, capture_output=True, text=True, timeout=300
    )
    assert wrong.returncode == 2 and marks.read_text() == "", wrong.stderr
    assert "the log's trainer is marker_trainer:MarkerTrainer" in wrong.stderr


def test_a_chaos_trainer_option_is_never_imported_by_pytest(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).parents[3]
    (tmp_path / "marker_trainer.py").write_text(
        "import os\n"
        "from pathways_chaos.harness.reference.trainer import ReferenceTrainer\n"
        "open(os.environ['MARK'], 'a').write(f'{os.getpid()}\\n')\n"
        "class MarkerTrainer(ReferenceTrainer):\n    pass\n"
        "class NotATrainer:\n    pass\n"
    )
    marks = tmp_path / "marks.txt"
    env = dict(os.environ, MARK=str(marks))
    suite = root / "suites" / "chaos" / "test_elastic_recovery.py"

    def run(trainer: str) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                str(suite),
                "-m",
                "chaos",
                "-k",
                "replica_resize",
                f"--chaos-trainer={trainer}",
                "-p",
                "no:cacheprovider",
                "-q",
            ],
            env=env,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return proc, proc.communicate(timeout=600)[0]

    proc, output = run(f"{tmp_path / 'marker_trainer.py'}:MarkerTrainer")
    assert proc.returncode == 0, output[-2000:]
    imported_in = {int(p) for p in marks.read_text().split()}
    assert imported_in and proc.pid not in imported_in, (proc.pid, imported_in)
    proc, output = run(f"{tmp_path / 'marker_trainer.py'}:NotATrainer")
    assert proc.returncode != 0
    assert "is not a ReferenceTrainer subclass" in output, output[-2000:]


def test_a_dead_override_is_warned_about_from_the_trainers_child() -> None:
    from pathways_chaos.harness.reference.overrides import TrainerOverrideWarning

    with pytest.warns(TrainerOverrideWarning, match=r"_mesh_and_step is not a method.*mesh_and"):
        out = play("", config=SHORT, trainer=_trainer("StaleSeamName"))
    assert out.ok, out.verdict.violations


def test_a_preemptions_next_run_is_a_new_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("TRAINER_PID_FILE", str(pids))
    config = TrainerConfig(final_step=12, snapshot_interval=4, checkpoint_dir=str(tmp_path / "c"))
    out = play("preemption@step=5", config=config, trainer=_trainer("RecordsItsProcessPerRun"))

    assert out.ok, out.verdict.violations
    ends = [e["status"] for e in out.result.events if e["kind"] == "run_end"]
    assert ends == ["suspended", "completed"]
    runs = dict(line.split() for line in pids.read_text().splitlines())
    assert set(runs) == {"1", "2"} and runs["1"] != runs["2"], runs
    assert str(os.getpid()) not in runs.values()


def test_a_trainer_that_resumes_from_module_state_fails_as_on_gke(tmp_path: Path) -> None:
    config = TrainerConfig(final_step=12, snapshot_interval=4, checkpoint_dir=str(tmp_path / "c"))
    out = play("preemption@step=5", config=config, trainer=_trainer("ResumesFromMemory"))

    assert not out.ok
    said = out.verdict.violations[0]
    assert "run 2 started over from step 0 with no restore after the preemption" in said, said
    assert "run 1 saved checkpoint step 5" in said
