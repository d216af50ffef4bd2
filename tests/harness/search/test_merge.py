"""``search merge`` on shard files written here: what it counts, and what makes a search
incomplete (a missing shard, one that died, two shards on the same seeds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.search.merge import merge, merge_main, render_html
from pathways_chaos.harness.search.shard import FORMAT, fault_kinds


def _episode(shard: int, count: int, seed: int, schedule: str, ok: bool = True) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "shard": shard,
        "shards": count,
        "property": "dataset",
        "seed": seed,
        "round": 0,
        "schedule": schedule,
        "fault_kinds": fault_kinds(schedule),
        "replay": f"pathways-chaos replay --schedule {schedule}",
        "ok": ok,
        "violation": None if ok else "dataset continuity property violated",
        "seconds": 0.5,
        "features": ["loss"] if schedule else [],
        "from_database": False,
        "after_failure": False,
    }


def _write_shard(
    folder: Path,
    index: int,
    count: int,
    seeds: list[int],
    *,
    report: bool = True,
    bad: str = "",
    unfinished: Any = (),
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    episodes = [_episode(index, count, s, f"data_loss@step={s % 5}:slice=1") for s in seeds]
    if bad:
        episodes.append(_episode(index, count, seeds[-1], bad, ok=False))
    name = f"shard-{index}-of-{count}"
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    if report:
        findings = (
            [{"property": "dataset", "shard": index, "seed": seeds[-1], "schedule": bad,
              "replay": f"pathways-chaos replay --schedule {bad}", "message": "violated",
              "found_in_database": False}]
            if bad
            else []
        )  # fmt: skip
        (folder / f"{name}.json").write_text(
            json.dumps(
                {
                    "format": FORMAT,
                    "shard": index,
                    "shards": count,
                    "properties": ["dataset"],
                    "seeds": seeds,
                    "seed_range": [seeds[0], seeds[0] + 999],
                    "findings": findings,
                    "flaky": [],
                    "errors": [],
                    **({"unfinished": list(unfinished)} if unfinished != () else {}),
                    "wall_s": 1.0,
                    "pod": f"search-{index}",
                }
            )
        )


def test_a_complete_search_counts_per_fault_kind_and_event(tmp_path: Path) -> None:
    _write_shard(tmp_path / "a", 0, 2, [0, 1, 2])
    _write_shard(tmp_path / "b", 1, 2, [1000, 1001], bad="not_found@step=1:slice=0")
    merged = merge([tmp_path / "a", tmp_path / "b"])
    assert merged.complete and merged.expected == 2 and merged.schedules == 6
    assert merged.by_fault_kind == {"data_loss": [5, 0], "not_found": [1, 1]}
    assert merged.by_event == {"loss": 6}
    assert merged.by_property == {"dataset": [6, 1, 0]}
    assert [f["schedule"] for f in merged.findings] == ["not_found@step=1:slice=0"]
    page = render_html(merged)
    assert "No two shards ran the same seed (5 seeds over 2 shards)" in page
    assert "pathways-chaos replay --schedule not_found@step=1:slice=0" in page


def test_seeds_run_twice_a_missing_and_an_unfinished_shard_are_shown(tmp_path: Path) -> None:
    _write_shard(tmp_path, 0, 4, [0, 1, 2])
    _write_shard(tmp_path, 1, 4, [2, 3])  # seed 2 again
    _write_shard(tmp_path, 3, 4, [3000], report=False, bad="data_loss@step=2:slice=1")
    merged = merge([tmp_path])
    assert not merged.complete
    assert merged.missing == [2] and merged.unfinished == [3]
    assert merged.overlaps == [(0, 1, [2])]
    (finding,) = merged.findings  # from the unfinished shard's episodes
    assert finding["unfinished"] and finding["schedule"] == "data_loss@step=2:slice=1"
    page = render_html(merged)
    assert "shards 0 and 1 both ran seeds [2]" in page
    assert "missing: no files from this shard" in page and "did not finish" in page
    code = merge_main([str(tmp_path), "--html", str(tmp_path / "r.html")])
    assert code == 1


def test_a_clean_complete_search_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_shard(tmp_path, 0, 1, [5, 6])
    assert merge_main([str(tmp_path), "--html", str(tmp_path / "r.html")]) == 0
    assert "2 schedules over 1 of 1 shards, 0 failures" in capsys.readouterr().out


def test_an_episode_the_budget_cut_is_not_judged_in_every_report_never_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = {"property": "loop-survives", "seed": 6, "message": "blocked at train.py:9 in main"}
    _write_shard(tmp_path, 0, 1, [5, 6], unfinished=[cut])
    html, junit, out = tmp_path / "r.html", tmp_path / "r.xml", tmp_path / "r.json"
    argv = [str(tmp_path), "--html", str(html), "--junit", str(junit), "--json", str(out)]

    assert merge_main(argv) == 0
    printed = capsys.readouterr().out
    assert "1 not judged (the budget ended their episodes)" in printed
    assert "not judged: shard 0, loop-survives, because the budget ended its episode" in printed
    assert "blocked at train.py:9" in html.read_text()
    assert "<skipped" in junit.read_text() and "loop-survives" in junit.read_text()
    data = json.loads(out.read_text())
    assert data["findings"] == [] and data["not_judged"][0]["property"] == "loop-survives"


def test_a_malformed_budget_cut_list_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_shard(tmp_path, 0, 1, [5, 6], unfinished=["not a dict"])
    assert merge_main([str(tmp_path), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "malformed 'unfinished'" in err and err.strip().count("\n") == 0


def test_a_log_cut_short_by_a_killed_pod_still_merges(tmp_path: Path) -> None:
    _write_shard(tmp_path, 0, 1, [5, 6], report=False)
    log = tmp_path / "shard-0-of-1.jsonl"
    log.write_text(log.read_text() + '{"format": "pathways-chaos-search/1", "sha')
    assert merge([tmp_path]).schedules == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n{}\n", "is not a JSON line"),
        ('{"kind": "run_start"}\n', "is not a search episode log"),
    ],
)
def test_other_files_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    (tmp_path / "shard-0-of-1.jsonl").write_text(content)
    assert merge_main([str(tmp_path), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChaosConfigError, match="no shard files"):
        merge([tmp_path / "empty"])
    with pytest.raises(ChaosConfigError, match="is not a folder"):
        merge([tmp_path / "nowhere"])


# -- shard files nobody can vouch for: each a one-line error, never a traceback or a mix --------
def _rewrite(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


_DROP = object()


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"findings": _DROP}, "'findings' is not a list of objects"),
        ({"errors": None}, "'errors' is not a list of objects"),
        ({"schedules": -5}, "'schedules' is -5, not a finite number >= 0"),
        ({"wall_s": float("nan")}, "'wall_s' is nan, not a finite number >= 0"),
        ({"schedules": 10**400}, "not a finite number >= 0"),
        ({"seeds": [1, "2"]}, "'seeds' is not a list of whole numbers"),
        ({"shard": 7}, "it says shard 7 of 2, its name shard 0 of 2"),
    ],
)
def test_a_malformed_report_is_one_line_naming_the_field(
    tmp_path: Path, changes: dict[str, Any], says: str
) -> None:
    _write_shard(tmp_path, 0, 2, [1, 2])
    _write_shard(tmp_path, 1, 2, [3, 4])
    _rewrite(tmp_path / "shard-0-of-2.json", **changes)
    with pytest.raises(ChaosConfigError) as error:
        merge([tmp_path])
    assert says in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_a_malformed_episode_line_is_one_line(tmp_path: Path) -> None:
    _write_shard(tmp_path, 0, 1, [1, 2])
    log = tmp_path / "shard-0-of-1.jsonl"
    lines = log.read_text().splitlines()
    first = json.loads(lines[0])
    first["ok"] = "yes"
    log.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(ChaosConfigError, match="line 1: 'ok' is 'yes'"):
        merge([tmp_path])


def test_reports_of_two_searches_are_refused_not_mixed(tmp_path: Path) -> None:
    _write_shard(tmp_path, 0, 2, [1, 2])
    _write_shard(tmp_path, 1, 2, [3, 4])
    _rewrite(tmp_path / "shard-0-of-2.json", base_seed=1, subject="loop a:b")
    _rewrite(tmp_path / "shard-1-of-2.json", base_seed=2, subject="loop a:b")
    with pytest.raises(ChaosConfigError, match="come from different searches \\(base_seed"):
        merge([tmp_path])


def test_a_folder_given_twice_says_so_and_claims_no_coverage(tmp_path: Path) -> None:
    _write_shard(tmp_path / "run", 0, 2, [1, 2])
    _write_shard(tmp_path / "run", 1, 2, [3, 4])
    merged = merge([tmp_path / "run", tmp_path / "run"])
    assert "over 2 of 2 shards" in merged.summary()
    assert "shard indexes found more than once (two runs mixed?): 0, 1" in merged.summary()
    assert "No two shards ran the same seed" not in render_html(merged)
    assert not merged.complete
