"""What a shard's report and episode lines must hold before ``search merge`` reads them: they
are files a Pod wrote (or anyone did), so every field the merge reads is checked here, once,
and anything else is a one-line error naming the file and the field, never a traceback."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError

FIX = "give the files `pathways-chaos search --out` wrote"
#: Report fields that are lists of objects, and numbers that must be finite and not negative.
_LISTS_OF_OBJECTS = ("findings", "flaky", "errors")
_NUMBERS = ("schedules", "wall_s", "budget_s", "started", "examples_per_round")
#: What each episode line must hold, by type.
_EPISODE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "property": str,
    "ok": bool,
    "seed": int,
    "schedule": (str, type(None)),
    "replay": (str, type(None)),  # None: an episode whose schedule cannot be replayed alone
    "features": list,
}


def _bad(path: Path, what: str) -> ChaosConfigError:
    return ChaosConfigError(f"{path}: {what}: {FIX}")


def _count(value: Any) -> bool:
    """A whole number, not negative (``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checked_report(report: Any, path: Path, index: int, count: int) -> dict[str, Any]:
    """The report of shard ``index`` of ``count`` (its file's name), as the merge reads it."""
    if not isinstance(report, dict):
        raise _bad(path, "not a JSON object")
    seeds = report.get("seeds")
    if not isinstance(seeds, list) or not all(_count(s) for s in seeds):
        raise _bad(path, "'seeds' is not a list of whole numbers")
    for key in _LISTS_OF_OBJECTS:
        value = report.get(key)
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise _bad(path, f"'{key}' is not a list of objects")
    for key in _NUMBERS:
        value = report.get(key)
        if value is None:
            continue
        if not _finite(value) or value < 0:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
            raise _bad(path, f"'{key}' is {shown}, not a finite number >= 0")
    _same_place(report, path, index, count)
    return report


def _finite(value: Any) -> bool:
    """A JSON number a float holds (an integer of 400 digits does not: OverflowError)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def checked_episode(line: Any, path: Path, number: int, index: int, count: int) -> dict[str, Any]:
    """One episode line of shard ``index`` of ``count``, as the merge reads it."""
    where = f"line {number}"
    for key, kind in _EPISODE_FIELDS.items():
        value = line.get(key)
        if not isinstance(value, kind) or (kind is int and not _count(value)):
            raise _bad(path, f"{where}: '{key}' is {value!r}")
    kinds = line.get("fault_kinds")
    if kinds is not None and (
        not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds)
    ):
        raise _bad(path, f"{where}: 'fault_kinds' is not a list of fault kinds")
    if not all(isinstance(f, str) for f in line["features"]):
        raise _bad(path, f"{where}: 'features' is not a list of event kinds")
    _same_place(line, path, index, count, where)
    return line


def _same_place(
    record: dict[str, Any], path: Path, index: int, count: int, where: str = ""
) -> None:
    """A record's own ``shard``/``shards`` agree with its file's name ``shard-I-of-N``."""
    said = (record.get("shard", index), record.get("shards", count))
    if said != (index, count) or not 0 <= index < count:
        prefix = f"{where}: " if where else ""
        raise _bad(
            path,
            f"{prefix}it says shard {said[0]} of {said[1]}, its name shard {index} of {count}",
        )


def check_one_run(reports: list[tuple[Path, dict[str, Any]]]) -> None:
    """Every report comes from one search: the same subject, base seed and shard count."""
    for key in ("subject", "base_seed", "shards"):
        seen = [(path, r[key]) for path, r in reports if key in r]
        for path, value in seen[1:]:
            if value != seen[0][1]:
                raise ChaosConfigError(
                    f"{path} and {seen[0][0]} come from different searches ({key} "
                    f"{value!r} and {seen[0][1]!r}): merge the folders of one run only"
                )
