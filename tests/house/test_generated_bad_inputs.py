"""Bad input by generation, not by a hand list: every option of ``twin up``, ``twin down``,
``search --emit-job``, ``search merge``, ``demo``, ``replay`` (``--loop`` too) and ``rollback``,
found by walking their argument parsers, given
hostile values drawn by hypothesis (NaN, inf, -1, 0, huge, empty, a newline, a folder, a FIFO,
``/proc/...``, a symlink to a decoy, a path under a file).

Each case must end in a few seconds with its documented exit code, at most 3 lines on stderr and
no traceback, and leave a decoy tree (outside the scratch folder the command is pointed at)
exactly as it was. Nothing real starts: the twin's machine check is told there are no
Kubernetes binaries (a valid ``twin up`` ends there, exit 2), ``--emit-job`` only prints a
Job, an episode that ``demo`` or ``replay`` would play ends where it would start (exit 0:
every input was accepted), ``rollback`` never reaches a cluster (exit 4), and every signal is
intercepted. The pytest plugin's options: tests/house/test_generated_plugin_options.py.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pathways_chaos.harness.cli.main import main
from pathways_chaos.harness.engine.deadline import default_deadline, set_default_deadline

#: Values a hostile or careless user gives any option; ``{...}`` names a prepared path.
HOSTILE = (
    "nan", "inf", "-inf", "-1", "0", "1", "1e308", "-5", "abc", "", " ", "\n", "a\nb",
    "9" * 400, "4x", "0/0", "1/0", "-1/4", "\x00", "../..", "/proc/self/mem",
    "{folder}", "{fifo}", "{symlink}", "{file}", "{under_file}", "{decoy}", "{decoy_fifo}", "~",
    "-0", "1e-400", "Infinity", "NaN", "0x10", "1_000", "\u0661\u0662", "+inf", "2e9",
)  # fmt: skip
#: Options that take no user value worth drawing (the subcommand itself, help).
SKIP = {"help"}
#: Per command: the base argv (valid, cheap) and the exit codes its documentation allows.
COMMANDS: dict[str, tuple[list[str], set[int]]] = {
    "twin up": (["twin", "up", "--manifest", "{manifest}", "--state-dir", "{scratch}/state"], {2}),
    "twin down": (["twin", "down", "--state-dir", "{scratch}/state"], {0, 2}),
    "search --emit-job": (["search", "--emit-job", "2", "--image", "r/suite:1"], {0, 2}),
    "search merge": (["search", "merge", "{results}", "--html", "{scratch}/r.html"], {0, 1, 2}),
    "demo": (["demo", "--steps", "6", "--log", "{scratch}/demo.jsonl"], {0, 2}),
    "demo --loop": (["demo", "--loop", "m.py:main"], {0, 2}),
    "replay": (["replay", "--steps", "4"], {0, 2}),
    "replay --loop": (["replay", "--loop", "m.py:main"], {0, 2}),
    # exit codes documented in its --help: 1 unreadable, 3 refused, 4 no cluster
    "rollback": (["rollback", "--journal-dir", "{scratch}/journals", "--pending"], {0, 1, 2, 3, 4}),
    "rollback JOURNAL": (["rollback"], {0, 1, 2, 3, 4}),
    # 1: the configured ramdisk is too small
    "ramdisk": (["ramdisk", "--params", "8e9", "--hosts-per-slice", "2"], {0, 1, 2}),
}
#: What no number option may accept: not a number, not finite, or past any sane maximum.
NEVER_A_NUMBER = {"nan", "inf", "-inf", "1e308", "9" * 400, "abc", "", " ", "4x", "0/0"} | {
    "Infinity", "NaN", "+inf", "0x10", "\u0661\u0662",  # the last: Arabic-Indic "12"
}  # fmt: skip
#: Lines on stderr allowed beyond one: a manifest's problems, one line each.
MAX_LINES = {"twin up": 3}
#: A command's positional argument, drawn like an option (the value goes in alone).
POSITIONAL = {"rollback JOURNAL": "JOURNAL"}
MANIFEST = """kind: JobSet
apiVersion: jobset.x-k8s.io/v1alpha2
metadata: {name: mine}
spec:
  replicatedJobs:
  - name: w
    template: {spec: {template: {spec: {containers: [{name: c, image: python}]}}}}
"""


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if action.option_strings and action.nargs != 0 and action.dest not in SKIP
    ]


def options_of(command: str) -> list[str]:
    """The command's options, read from its own parser (a new option is drawn too)."""
    if command in POSITIONAL:
        return [POSITIONAL[command]]
    return [action.option_strings[-1] for action in actions_of(command)]


def numeric_options(command: str) -> set[str]:
    """The options parsed by option_values' one number parser (it keeps their range)."""
    if command in POSITIONAL:
        return set()
    return {a.option_strings[-1] for a in actions_of(command) if hasattr(a.type, "allowed")}


def actions_of(command: str) -> list[argparse.Action]:
    """The command's parser's option actions."""
    if command == "ramdisk":
        from pathways_chaos.harness.acceptance.ramdisk import build_parser as ramdisk_parser

        return _options(ramdisk_parser())
    if command.startswith("demo"):
        from pathways_chaos.harness.cli.main import build_demo_parser

        return _options(build_demo_parser())
    if command == "replay":
        from pathways_chaos.harness.cli.replay import build_parser as replay_parser

        return _options(replay_parser())
    if command == "replay --loop":
        from pathways_chaos.harness.cli.replay import build_loop_parser

        return _options(build_loop_parser())
    if command == "rollback":
        from pathways_chaos.harness.cli.rollback import build_parser as rollback_parser

        return _options(rollback_parser())
    if command.startswith("twin"):
        from pathways_chaos.harness.cli.twin import build_parser

        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        return _options(sub.choices[command.split()[1]])
    if command == "search merge":
        from pathways_chaos.harness.search.merge import build_parser as merge_parser

        return _options(merge_parser())
    from pathways_chaos.harness.cli.search import build_parser as search_parser

    return _options(search_parser())


def _digest(root: Path) -> dict[str, str]:
    found = {}
    for path in sorted(root.rglob("*")):
        body = os.readlink(path) if path.is_symlink() else ""
        if not body and path.is_file():
            body = hashlib.sha256(path.read_bytes()).hexdigest()
        found[str(path.relative_to(root))] = f"{path.lstat().st_mode:o} {body}"
    return found


@contextlib.contextmanager
def _scratch() -> Iterator[dict[str, str]]:
    """A scratch folder the command may change, and a decoy tree it must not."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        scratch, decoy = root / "scratch", root / "decoy"
        scratch.mkdir()
        decoy.mkdir()
        (decoy / "keep.txt").write_text("keep")
        (decoy / ".ssh").mkdir()
        (decoy / ".ssh" / "id").write_text("secret")
        # A special file outside the scratch folder: never /dev/zero itself (a regression that
        # renames over it as root replaces the machine's /dev/zero; this one caught it).
        os.mkfifo(decoy / "pipe")
        (scratch / "file").write_text("a file")
        (scratch / "folder").mkdir()
        os.mkfifo(scratch / "fifo")
        (scratch / "symlink").symlink_to(decoy)
        (scratch / "m.yaml").write_text(MANIFEST)
        (scratch / "m.py").write_text("def main(**options):\n    return None\n")
        write_shard_folder(scratch / "results")
        home = os.getcwd()
        os.chdir(scratch)  # a relative value ("nan", "~") lands in the scratch folder
        try:
            yield {
                "scratch": str(scratch),
                "decoy": str(decoy),
                "decoy_fifo": str(decoy / "pipe"),
                "folder": str(scratch / "folder"),
                "fifo": str(scratch / "fifo"),
                "symlink": str(scratch / "symlink"),
                "file": str(scratch / "file"),
                "under_file": str(scratch / "file" / "x"),
                "manifest": str(scratch / "m.yaml"),
                "results": str(scratch / "results"),
            }
        finally:
            os.chdir(home)


def write_shard_folder(folder: Path) -> None:
    """One finished shard's files, as ``search --out`` writes them."""
    from pathways_chaos.harness.search.shard import FORMAT

    folder.mkdir()
    head = {"format": FORMAT, "shard": 0, "shards": 1}
    episode = {
        **head,
        "property": "dataset",
        "seed": 1,
        "round": 0,
        "schedule": "",
        "fault_kinds": [],
        "replay": None,
        "ok": True,
        "violation": None,
        "seconds": 0.1,
        "features": [],
        "from_database": False,
        "after_failure": False,
    }
    report = {
        **head,
        "properties": ["dataset"],
        "seeds": [1],
        "findings": [],
        "flaky": [],
        "errors": [],
        "schedules": 1,
        "wall_s": 1.0,
        "budget_s": 1.0,
        "subject": "trainer x",
        "by_property": {},
    }
    (folder / "shard-0-of-1.jsonl").write_text(json.dumps(episode) + "\n")
    (folder / "shard-0-of-1.json").write_text(json.dumps(report) + "\n")


def _fill(text: str, places: dict[str, str]) -> str:
    for name, value in places.items():
        text = text.replace("{" + name + "}", value)
    return text


CASES: list[str] = []


class Hung(Exception):
    """A case still running after its limit (a FIFO opened for writing waits for ever)."""


@contextlib.contextmanager
def _hang_limit(seconds: int) -> Iterator[None]:
    """Ends the case with ``Hung`` after ``seconds`` (SIGALRM: a blocked open is interrupted)."""

    def ring(signum: int, frame: object) -> None:
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class WouldStart(Exception):
    """Every input was accepted: the episode (or the cluster call) would start here."""


def _would_start(*args: object, **kwargs: object) -> NoReturn:
    raise WouldStart


@pytest.fixture(autouse=True)
def _nothing_real_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pathways_chaos.fixtures import control_plane
    from pathways_chaos.harness import play
    from pathways_chaos.harness.cli import rollback
    from pathways_chaos.harness.engine import topology
    from pathways_chaos.harness.episodes import supervisor
    from pathways_chaos.harness.properties import episode_spec, loop

    def refuse_signal(pid: int, signum: int) -> None:
        if signum != 0:
            raise AssertionError(f"a bad input led to signal {signum} sent to pid {pid}")

    def cpu_devices(count: int) -> None:  # its refusal of too many, without starting JAX
        if count > topology.MAX_CPU_DEVICES:
            request_cpu_devices(count)

    request_cpu_devices = topology.request_cpu_devices
    monkeypatch.setattr(os, "kill", refuse_signal)
    monkeypatch.setattr(os, "killpg", refuse_signal)
    monkeypatch.setattr(control_plane, "find_kube_binaries", lambda: None)
    monkeypatch.setattr(topology, "request_cpu_devices", cpu_devices)
    monkeypatch.setattr(play, "play", _would_start)
    monkeypatch.setattr(play, "play_loop", _would_start)
    monkeypatch.setattr(supervisor, "check_loop", lambda spec, flag="": None)
    monkeypatch.setattr(episode_spec, "run_spec", _would_start)
    monkeypatch.setattr(loop, "play_target", _would_start)
    monkeypatch.setattr(rollback, "_connect", _would_start)
    # the journal key and folders of this test, never the user's
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PATHWAYS_CHAOS_JOURNAL_DIR", str(tmp_path / "journals"))


def generated(cases: int) -> settings:
    """The generated tests' hypothesis settings: the same cases every run (CI can compare)."""
    return settings(
        max_examples=cases,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )


@generated(1000)
@given(data=st.data())
def test_generated_bad_values_are_one_line_with_the_documented_exit(data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
    base, codes = COMMANDS[command]
    option = data.draw(st.sampled_from(options_of(command)), label="option")
    value = data.draw(st.sampled_from(HOSTILE), label="value")
    with _scratch() as places:
        argv = [_fill(a, places) for a in base]
        if option in POSITIONAL.values():
            argv.append(_fill(value, places))
        elif option in argv:  # replace the base's own value of this option
            argv[argv.index(option) + 1] = _fill(value, places)
        else:
            argv += [option, _fill(value, places)]
        decoy = _digest(Path(places["decoy"]))
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        # The CLI sets the process-wide default deadline (a command's own process); here it
        # is this worker's, so it is put back, or every later test gets the drawn one.
        previous = default_deadline()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _hang_limit(20):
            try:
                code = main(argv)
            except SystemExit as exit_:  # argparse's own refusal (a missing value)
                code = exit_.code if isinstance(exit_.code, int) else 2
            except WouldStart:
                code = 0 if "rollback" not in command else 4
            finally:
                set_default_deadline(previous)
        seconds = time.monotonic() - started
        CASES.append(f"{command} {option}={value!r}: {code}")
        text = err.getvalue()
        why = f"{command} {option}={value!r} -> {code}\n{text[-2000:]}"
        assert code in codes, why
        assert "Traceback" not in text, why
        assert len(text.strip().splitlines()) <= MAX_LINES.get(command, 1), why
        assert seconds < 5, why
        if option in numeric_options(command) and value in NEVER_A_NUMBER:
            assert code != 0, f"{why}: accepted as a number"
        assert _digest(Path(places["decoy"])) == decoy, why
        if command == "search --emit-job" and code == 0:
            import yaml

            nightly = yaml.safe_load(out.getvalue())
            for rj in nightly["spec"]["replicatedJobs"]:  # the shards and the merge
                assert rj["template"]["spec"]["activeDeadlineSeconds"] < 10**7, why
            json.dumps(nightly)


def test_every_command_has_its_options_found() -> None:
    """The walk finds the options the issue names: a parser refactor cannot hide them."""
    assert {"--manifest", "--spare-slices", "--timeout", "--state-dir", "--image"} <= set(
        options_of("twin up")
    )
    assert {"--budget", "--memory", "--cpu", "--backoff-limit", "--shard"} <= set(
        options_of("search --emit-job")
    )
    assert {"--html", "--json"} <= set(options_of("search merge"))
    assert {"--steps", "--schedule", "--loop", "--log", "--clock", "--deadline"} <= set(
        options_of("demo")
    )
    assert {"--wall-deadline", "--slices", "--data-size", "--poll-interval"} <= set(
        options_of("replay")
    )
    assert {"--topology", "--option", "--schedule"} <= set(options_of("replay --loop"))
    assert {"--journal-dir", "--kubeconfig", "--context"} <= set(options_of("rollback"))
    assert {"--steps", "--slices", "--devices-per-slice"} <= numeric_options("demo")


def test_no_option_is_a_bare_int_or_float() -> None:
    """``type=int`` takes a 400-digit count and ``type=float`` takes nan and inf, and argparse
    refuses with its usage block: every number goes through option_values (one line, a range)."""
    bare = [
        f"{command} {action.option_strings[-1]}"
        for command in COMMANDS
        if command not in POSITIONAL
        for action in actions_of(command)
        if action.type in (int, float)
    ]
    assert not bare, bare
