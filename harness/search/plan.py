"""Which shard this process is, and what it searches: its seeds and its properties.

Kubernetes places and retries the shards (an Indexed Job); this module only turns an index into
work, the same way on every Pod, so two shards never search the same seeds.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import re

from pathways_chaos.harness.errors import ChaosConfigError

#: The property suites a shard may search, in the order they are dealt to shards.
PROPERTIES = ("snapshot", "dataset", "mesh", "stateful")
#: Seeds each shard owns: shard i runs rounds with seeds base + i * SEED_SPAN + round.
SEED_SPAN = 1_000_000
#: Far above any Indexed Job the search has run as (Kubernetes allows 100000 completions).
MAX_SHARDS = 10_000
#: What Kubernetes sets in each Pod of an Indexed Job.
INDEX_ENV = "JOB_COMPLETION_INDEX"
#: A run's identity, shared by every shard of one run (the Job's uid on Kubernetes): the seeds
#: are derived from it, so each nightly Job searches new seeds and its shards agree on them.
RUN_ENV = "PATHWAYS_CHAOS_SEARCH_RUN"


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Shard ``index`` of ``count``: its seed range and the properties it searches."""

    index: int
    count: int
    base_seed: int
    #: The property families this shard searches: its mix of fault kinds (replica losses,
    #: loss-and-rejoin churn, losses with repairs and rejoins, or every scenario end to end).
    #: Each family draws its schedules the same way on every shard: a saved example is a
    #: sequence of choices, and a shard that weighted the fault kinds differently would replay
    #: another shard's failure as a different schedule.
    properties: tuple[str, ...]

    @property
    def first_seed(self) -> int:
        return self.base_seed + self.index * SEED_SPAN

    def seed(self, round_index: int) -> int:
        if round_index >= SEED_SPAN:
            raise ChaosConfigError(f"shard {self.index} ran out of its {SEED_SPAN} seeds")
        return self.first_seed + round_index

    @property
    def name(self) -> str:
        return f"shard-{self.index}-of-{self.count}"


def parse_shard(
    text: str | None, shards: int | None, env: dict[str, str] | None = None
) -> tuple[int, int]:
    """``--shard i/N``, or ``--shards N`` with the index from ``JOB_COMPLETION_INDEX``."""
    env = dict(os.environ) if env is None else env
    if text:
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not match:
            raise ChaosConfigError(f"--shard {text!r}: write INDEX/COUNT, for example --shard 0/4")
        index, count = int(match[1]), int(match[2])
        if not 1 <= count <= MAX_SHARDS:
            raise ChaosConfigError(
                f"--shard {text!r}: use a COUNT from 1 to {MAX_SHARDS}, for example --shard 0/4"
            )
        if shards is not None and shards != count:
            raise ChaosConfigError(
                f"--shard {text} and --shards {shards} disagree: give one of them"
            )
    else:
        count = 1 if shards is None else shards
        raw = env.get(INDEX_ENV)
        if raw is None:
            if count > 1:
                raise ChaosConfigError(
                    f"--shards {count} but no shard index: pass --shard INDEX/{count}, or run "
                    f"as an Indexed Job (Kubernetes sets {INDEX_ENV})"
                )
            index = 0
        elif not raw.strip().isdigit():
            raise ChaosConfigError(f"{INDEX_ENV}={raw!r} is not a shard index (0, 1, 2...)")
        else:
            index = int(raw)
    if count < 1:
        raise ChaosConfigError(f"{count} shards: use at least 1")
    if not 0 <= index < count:
        raise ChaosConfigError(f"shard index {index} is outside 0..{count - 1} ({count} shards)")
    return index, count


def base_seed(seed: int | None, run_id: str | None) -> int:
    """The run's base seed: ``--seed``; else one derived from the run's id (every shard of
    a Job has the same); else today's UTC date, so shards started the same day agree."""
    if seed is not None:
        if seed < 0:
            raise ChaosConfigError(f"--seed {seed}: use a whole number >= 0")
        return seed
    if run_id:
        digest = hashlib.sha256(run_id.encode()).digest()
        return int.from_bytes(digest[:4], "big") * 1000 * SEED_SPAN
    today = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    return int(today) * 1000 * SEED_SPAN


def deal_properties(index: int, count: int, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The properties shard ``index`` searches: dealt round-robin, so with as many shards as
    properties each shard searches one family of fault kinds, and with more shards several
    shards share one (on disjoint seeds)."""
    if count >= len(wanted):
        return (wanted[index % len(wanted)],)
    return tuple(p for j, p in enumerate(wanted) if j % count == index)


def make_plan(
    index: int,
    count: int,
    seed: int | None = None,
    run_id: str | None = None,
    properties: tuple[str, ...] = PROPERTIES,
) -> ShardPlan:
    if count < 1 or not 0 <= index < count:
        raise ChaosConfigError(f"shard {index} of {count}: use at least 1 shard, index 0..N-1")
    unknown = [p for p in properties if p not in PROPERTIES]
    if unknown or not properties:
        raise ChaosConfigError(
            f"--properties {','.join(properties) or '(none)'}: use some of {','.join(PROPERTIES)}"
        )
    return ShardPlan(
        index=index,
        count=count,
        base_seed=base_seed(seed, run_id),
        properties=deal_properties(index, count, properties),
    )
