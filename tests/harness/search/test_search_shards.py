"""A 4-shard search as Kubernetes runs one (four processes, each told its index by
JOB_COMPLETION_INDEX) on a known broken trainer, one real Redis example database: one shard
finds the failure and shrinks it, a later run replays it first, the merged report shows all
four shards and proves their seeds disjoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.reference.mutants import IteratorRestoredFromCurrentPosition, spec_of

MUTANT = spec_of(IteratorRestoredFromCurrentPosition)
#: Three families over four shards: shard 3 searches snapshot round trips again, on its own
#: seeds. Only the dataset family judges which samples were eaten, so exactly one shard can
#: find this mutant (the stateful family would too, at several times the cost).
PROPERTIES = "snapshot,dataset,mesh"
#: One round of four examples per shard: the same examples every run (the seeds are fixed and
#: the database starts empty), the budget never reached.
COMMON = ["--seed", "0", "--rounds", "1", "--examples-per-round", "4", "--budget", "600"]


def _search(*args: str, index: int | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("JOB_COMPLETION_INDEX", None)
    env.pop("PATHWAYS_CHAOS_SEARCH_RUN", None)
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return subprocess.Popen(
        [sys.executable, "-m", "pathways_chaos.harness.cli.main", "search", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"a shard did not end within 600 s: {err[-2000:]}")
    return proc.returncode, out, err


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Tables(HTMLParser):
    """The report's tables by id, as rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.ids: dict[str, str] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._id: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif a.get("id"):
            self._id = str(a["id"])
            self.ids[self._id] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif self._id is not None and tag in ("p", "span"):
            self._id = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._id is not None:
            self.ids[self._id] += data


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> dict[str, Any]:
    """Four shards at once, one Redis database; what each wrote."""
    out = tmp_path_factory.mktemp("search") / "run-1"
    procs = [
        _search(
            "--shards",
            "4",
            "--trainer",
            MUTANT,
            "--properties",
            PROPERTIES,
            "--out",
            str(out),
            "--redis",
            redis_url,
            *COMMON,
            index=i,
        )
        for i in range(4)
    ]
    results = [_wait(p) for p in procs]
    for code, stdout, stderr in results:
        assert code == 0, stderr[-3000:] + stdout[-2000:]
    reports = [json.loads((out / f"shard-{i}-of-4.json").read_text()) for i in range(4)]
    return {"out": out, "reports": reports, "stdout": [r[1] for r in results]}


def test_one_shard_finds_the_mutant_and_shrinks_it(first_run: dict[str, Any]) -> None:
    reports = first_run["reports"]
    assert [r["shard"] for r in reports] == [0, 1, 2, 3]
    assert [r["properties"] for r in reports] == [["snapshot"], ["dataset"], ["mesh"], ["snapshot"]]
    found = {r["shard"]: r["findings"] for r in reports if r["findings"]}
    assert list(found) == [1], found  # the dataset shard, and only it
    (finding,) = found[1]
    assert finding["property"] == "dataset" and "duplicated ids" in finding["message"]
    assert not finding["found_in_database"]
    # Shrunk where it was found: shorter than the first failing schedule, one loss left.
    assert finding["shrink_examples"] > 0
    assert len(finding["schedule"].split(",")) <= len(finding["first_schedule"].split(","))
    assert finding["schedule"].count("@") == 1
    assert finding["replay"].startswith("pathways-chaos replay --schedule ")
    assert f"--trainer {MUTANT}" in finding["replay"]
    assert finding["replay"] in first_run["stdout"][1]
    # Each shard's episodes are on its own seeds.
    for r in reports:
        lo, hi = r["seed_range"]
        lines = _lines(first_run["out"] / r["episodes"])
        assert lines and all(lo <= e["seed"] <= hi and e["shard"] == r["shard"] for e in lines)


def test_the_failure_is_replayed_first_by_a_later_run(
    first_run: dict[str, Any], redis_url: str, tmp_path: Path
) -> None:
    import redis

    (finding,) = first_run["reports"][1]["findings"]
    keys = redis.Redis.from_url(redis_url).keys(b"hypothesis-example:*")
    assert keys, "the first run saved nothing in Redis"
    out = tmp_path / "run-2"
    # Another run, another seed, one process searching only the dataset family.
    code, _, stderr = _wait(
        _search(
            "--shard",
            "0/1",
            "--trainer",
            MUTANT,
            "--properties",
            "dataset",
            "--out",
            str(out),
            "--redis",
            redis_url,
            "--seed",
            "123456789",
            "--rounds",
            "1",
            "--examples-per-round",
            "4",
        )
    )
    assert code == 0, stderr[-3000:]
    first = _lines(out / "shard-0-of-1.jsonl")[0]
    assert first["schedule"] == finding["schedule"] and not first["ok"]
    assert first["from_database"] and first["seed"] == 123456789
    (again,) = json.loads((out / "shard-0-of-1.json").read_text())["findings"]
    assert again["found_in_database"] and again["examples_to_find"] == 1
    assert again["schedule"] == finding["schedule"]


def test_the_merged_report_shows_every_shard(first_run: dict[str, Any], tmp_path: Path) -> None:
    page = tmp_path / "search.html"
    figures = tmp_path / "search.json"
    code, stdout, stderr = _wait(
        _search("merge", str(first_run["out"]), "--html", str(page), "--json", str(figures))
    )
    assert code == 1, stderr  # a failure was found: the nightly job must go red
    assert "4 of 4 shards, 1 failure" in stdout
    tables = Tables()
    tables.feed(page.read_text())
    shards = tables.tables["shards"][1:]
    assert [row[0] for row in shards] == ["0", "1", "2", "3"]
    assert all(row[-1] == "finished" for row in shards)
    assert "No two shards ran the same seed" in tables.ids["coverage"]
    (failure,) = tables.tables["failures"][1:]
    (finding,) = first_run["reports"][1]["findings"]
    assert failure[0] == "dataset" and failure[1] == "1"
    assert failure[3] == finding["schedule"] and failure[4] == finding["replay"]
    assert "duplicated ids" in failure[6]
    kinds = {row[0]: row for row in tables.tables["by-fault-kind"][1:]}
    assert "replica_loss" in kinds  # the snapshot shards' round trips
    assert any(int(row[2]) > 0 for row in kinds.values())  # where the failures were
    data = json.loads(figures.read_text())
    total = sum(len(_lines(first_run["out"] / r["episodes"])) for r in first_run["reports"])
    assert data["schedules"] == total and data["overlaps"] == [] and data["missing"] == []
    assert sum(n for n, _, _ in data["by_property"].values()) == total
    shrinking = sum(
        1 for e in _lines(first_run["out"] / "shard-1-of-4.jsonl") if e["after_failure"]
    )
    assert data["by_property"]["dataset"][2] == shrinking > 0


def test_a_loop_shard_writes_the_loop_search_episodes(tmp_path: Path) -> None:
    """``--loop``: the loop search's schedules, each a line with the loop's replay command and
    what the loop search saw (its own events, not a trainer's)."""
    loop = "pathways_chaos.harness.reference.user_loop:main"
    out = tmp_path / "loop"
    code, stdout, stderr = _wait(
        _search(
            "--shard", "0/1", "--loop", loop, "--properties", "dataset", "--out", str(out),
            "--database", str(tmp_path / "db"), "--seed", "3", "--rounds", "1",
            "--examples-per-round", "2",
        )
    )  # fmt: skip
    assert code == 0, stderr[-3000:]
    lines = _lines(out / "shard-0-of-1.jsonl")
    assert len(lines) == 2 and all(e["ok"] for e in lines), lines
    for e in lines:
        assert e["replay"].startswith(f"pathways-chaos replay --loop {loop} --schedule ")
        assert e["fault_kinds"] and "slice lost" in e["features"]
        # the kinds that fired (the log says so), never more than the schedule drew
        assert set(e["fault_kinds"]) <= set(e["scheduled_kinds"])
    report = json.loads((out / "shard-0-of-1.json").read_text())
    assert report["subject"] == f"loop {loop}" and report["errors"] == []
    assert f"on loop {loop}: 2 schedules" in stdout


def test_a_loop_episode_line_counts_the_kinds_that_fired_not_those_drawn() -> None:
    """A fault the schedule drew that never fired (its trigger never came) is not counted in
    the line's ``fault_kinds``; ``scheduled_kinds`` keeps what was drawn."""
    import types

    from pathways_chaos.harness.search.shard import EpisodeLog

    log = EpisodeLog.__new__(EpisodeLog)
    log.shard = types.SimpleNamespace(loop="pkg.mod:main")  # type: ignore[assignment]
    log._events = [
        {"kind": "fault", "fault": {"kind": "data_loss"}, "touched": ["slice 1"]},
        {"kind": "fault_unfired", "text": "fault never fired: preemption@batch=99"},
    ]
    assert log._fired() == ["data_loss"]
    log.shard = types.SimpleNamespace(loop=None)  # type: ignore[assignment]
    assert log._fired() is None  # a trainer's line keeps the schedule's kinds


def test_a_hanging_loop_is_ended_where_the_budget_ends(tmp_path: Path) -> None:
    """``--budget`` bounds the whole shard, the loop's fault-free run included: a loop that
    blocks forever is ended at the budget (plus a grace), not at the 300 s default deadline;
    what the budget cut short is "not judged", never a finding (a slow correct loop is cut the
    same way), and says where the loop was."""
    loop_file = tmp_path / "hangs.py"
    loop_file.write_text("import threading\n\n\ndef main(**_):\n    threading.Event().wait()\n")
    out = tmp_path / "out"
    started = time.monotonic()
    code, stdout, stderr = _wait(
        _search(
            "--shard", "0/1", "--loop", f"{loop_file}:main", "--properties", "snapshot",
            "--out", str(out), "--database", str(tmp_path / "db"), "--budget", "4",
        )
    )  # fmt: skip
    took = time.monotonic() - started
    assert code == 0, (code, stderr[-2000:])  # a shard that found something is not retried
    assert took < 4 + 5 + 60, took  # the budget, the grace, a child's start on a loaded runner
    report = json.loads((out / "shard-0-of-1.json").read_text())
    assert report["findings"] == [] and report["errors"] == [], report
    [cut] = report["unfinished"]
    assert "wall-time deadline" in cut["message"], cut
    assert f"{loop_file}:5 in main" in cut["message"], cut
    assert "not judged: snapshot, because the budget ended its episode" in stdout, stdout
