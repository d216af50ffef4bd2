"""``pathways-chaos search`` / ``--emit-job`` / ``search merge`` given hostile values: exit 2,
one line on stderr naming the flag and the fix, nothing written, nothing started (no JAX)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pathways_chaos.harness.cli.main import main
from pathways_chaos.harness.engine.untrusted_files import shown
from tests.folder_state import tree

EMIT = ["--emit-job", "2", "--image", "r/suite:1"]
EXITS = Path(__file__).parents[2] / "loops" / "exits_at_import.py"


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["search", *args])
    return code, out.getvalue(), err.getvalue()


def _search(*extra: str) -> list[str]:
    return ["--shard", "0/1", "--out", "{tmp}/out", *extra]


#: (name, argv, text the one-line error carries)
ROWS: list[tuple[str, list[str], str]] = [
    ("--emit-job --budget nan", [*EMIT, "--budget", "nan"], "--budget"),
    ("--emit-job --budget inf", [*EMIT, "--budget", "inf"], "--budget"),
    ("--emit-job --budget 1e308", [*EMIT, "--budget", "1e308"], "--budget"),
    ("--emit-job --budget -5", [*EMIT, "--budget", "-5"], "--budget"),
    ("--emit-job --memory abc", [*EMIT, "--memory", "abc"], "--memory"),
    ("--emit-job --memory 0", [*EMIT, "--memory", "0Gi"], "--memory"),
    ("--emit-job --cpu -1", [*EMIT, "--cpu", "-1"], "--cpu"),
    ("--emit-job --cpu x", [*EMIT, "--cpu", "two"], "--cpu"),
    ("--emit-job --backoff-limit -5", [*EMIT, "--backoff-limit", "-5"], "--backoff-limit"),
    ("--emit-job --backoff-limit abc", [*EMIT, "--backoff-limit", "abc"], "--backoff-limit"),
    ("--emit-job 1e9 shards", ["--emit-job", "1000000000", "--image", "r/s:1"], "--emit-job"),
    ("--emit-job abc", ["--emit-job", "abc", "--image", "r/s:1"], "--emit-job"),
    ("--emit-job --seed -1", [*EMIT, "--seed", "-1"], "--seed"),
    ("--emit-job --rounds nan", [*EMIT, "--rounds", "nan"], "--rounds"),
    ("--shard 0/1 --budget nan", _search("--budget", "nan"), "--budget"),
    ("--shard 0/1 --budget inf", _search("--budget", "inf"), "--budget"),
    ("--shard huge", ["--shard", "0/" + "9" * 30, "--out", "{tmp}/out"], "--shard"),
    ("--shards -1", ["--shards", "-1", "--out", "{tmp}/out"], "--shards"),
    ("--shards nan", ["--shards", "nan", "--out", "{tmp}/out"], "--shards"),
    ("--examples-per-round 1e9", _search("--examples-per-round", "1e9"), "--examples-per-round"),
    ("--loop ''", _search("--loop", ""), "--loop"),
    ("--trainer ''", _search("--trainer", ""), "--trainer"),
    ("--out is a symlink", _search(), "symlink"),
    # code that ends its process at import: loaded in a child, one line, no folder made
    ("--loop exits at import", _search("--loop", f"{EXITS}:main"), "exited with code 0"),
    ("--trainer exits at import", _search("--trainer", f"{EXITS}:T"), "exited with code 0"),
]


@pytest.mark.parametrize(("name", "argv", "says"), ROWS, ids=[r[0] for r in ROWS])
def test_hostile_value_is_one_line_and_nothing_is_written(
    tmp_path: Path, name: str, argv: list[str], says: str
) -> None:
    (tmp_path / "decoy").mkdir()
    (tmp_path / "decoy" / "keep.txt").write_text("keep")
    if name == "--out is a symlink":
        (tmp_path / "out").symlink_to(tmp_path / "decoy")
    before = tree(tmp_path)
    code, out, err = _run(*(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert code == 2 and out == "", (name, code, out, err)
    assert err.strip().count("\n") == 0 and says in err, err
    assert tree(tmp_path) == before


# -- search --out: a symlink planted in the folder is replaced, never written through -------


def test_a_symlink_planted_in_out_is_not_followed(tmp_path: Path) -> None:
    """The shard's files are made anew: a symlink named like them (planted on a shared
    volume) is replaced, and the file it points to is untouched."""
    from pathways_chaos.harness.search.plan import make_plan
    from pathways_chaos.harness.search.shard import ShardSearch

    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    plan = make_plan(0, 1, seed=1, properties=("dataset",))
    for name in (f"{plan.name}.jsonl", f"{plan.name}.json"):
        (out / name).symlink_to(victim)
    shard = ShardSearch(plan, out, database=None, budget_s=1e-9, max_rounds=0)
    shard.run()
    assert victim.read_text() == "precious"
    assert not shard.episodes_path.is_symlink() and not shard.report_path.is_symlink()
    assert json.loads(shard.report_path.read_text())["shards"] == 1


def test_a_shard_leaves_nothing_in_the_folder_it_runs_in(tmp_path: Path) -> None:
    """hypothesis keeps a ``.hypothesis`` folder where the command runs (a tester saw one
    appear): a shard gives it a temporary home of its own instead."""
    import subprocess
    import sys

    here = tmp_path / "here"
    here.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOTHESIS")}
    command = [sys.executable, "-m", "pathways_chaos.harness.cli.main", "search"]
    command += ["--shard", "0/1", "--out", str(tmp_path / "out"), "--budget", "20"]
    command += ["--rounds", "1", "--examples-per-round", "1", "--properties", "snapshot"]
    done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert " 1 schedules" in done.stdout, done.stdout  # hypothesis ran an example
    assert list(here.iterdir()) == []


# -- search merge: never over one of its own inputs -------------------------------------------


def _shard_folder(tmp: Path) -> Path:
    from pathways_chaos.harness.search.shard import FORMAT

    folder = tmp / "results"
    folder.mkdir()
    episode = {
        "format": FORMAT,
        "shard": 0,
        "shards": 1,
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
    (folder / "shard-0-of-1.jsonl").write_text(json.dumps(episode) + "\n")
    report = {
        "format": FORMAT,
        "shard": 0,
        "shards": 1,
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
    (folder / "shard-0-of-1.json").write_text(json.dumps(report) + "\n")
    return folder


MERGE_ROWS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    (
        "--html names the shard's report",
        lambda f: [str(f), "--html", str(f / "shard-0-of-1.json")],
        "one of this command's inputs",
    ),
    (
        "--html names the episode log",
        lambda f: [str(f), "--html", str(f / "shard-0-of-1.jsonl")],
        "one of this command's inputs",
    ),
    (
        "--json names the episode log",
        lambda f: [
            str(f),
            "--html",
            str(f.parent / "r.html"),
            "--json",
            str(f / "shard-0-of-1.jsonl"),
        ],
        "one of this command's inputs",
    ),
    (
        "--html is a hard link to an input",
        lambda f: [str(f), "--html", str(_hard_link(f))],
        "one of this command's inputs",
    ),
    (
        "--html is a FIFO (a device would be the same: never renamed over)",
        lambda f: [str(f), "--html", str(_fifo(f))],
        "is a FIFO (named pipe): name a file",
    ),
    (
        "--html and --json the same file",
        lambda f: [str(f), "--html", str(f.parent / "r"), "--json", str(f.parent / "r")],
        "--json",
    ),
]


def _fifo(folder: Path) -> Path:
    pipe = folder.parent / "pipe"
    os.mkfifo(pipe)
    return pipe


def _hard_link(folder: Path) -> Path:
    link = folder.parent / "looks-new.html"
    os.link(folder / "shard-0-of-1.json", link)
    return link


@pytest.mark.parametrize(("name", "argv", "says"), MERGE_ROWS, ids=[r[0] for r in MERGE_ROWS])
def test_merge_never_writes_over_its_own_input(
    tmp_path: Path, name: str, argv: Callable[[Path], list[str]], says: str
) -> None:
    folder = _shard_folder(tmp_path)
    args = argv(folder)
    before = tree(tmp_path)
    code, out, err = _run("merge", *args)
    assert code == 2 and out == "", (name, code, out, err)
    assert err.strip().count("\n") == 0 and says in err, err
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", ["shard-0-of-1.json", "shard-0-of-1.jsonl"])
def test_merge_of_a_shard_file_nested_too_deeply_is_exit_2_in_one_line(
    tmp_path: Path, name: str
) -> None:
    """It was a RecursionError's traceback: the shared JSON reader says it in one line."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / name).write_text("[" * 100_000 + "\n")
    code, out, err = _run("merge", str(folder), "--html", str(tmp_path / "r.html"))
    assert code == 2 and out == "", (code, out, err)
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    where = f"{shown(folder / name)}{':1' if name.endswith('l') else ''}"
    assert f"{where} nests JSON deeper than" in err, err
    assert "give the folders `pathways-chaos search --out` wrote" in err
    assert not (tmp_path / "r.html").exists()
