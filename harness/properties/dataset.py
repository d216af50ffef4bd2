"""Property 2, dataset position continuity: committed steps eat the fault-free order once."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from hypothesis import strategies as st

from pathways_chaos.harness.properties.churn import slice_churn
from pathways_chaos.harness.properties.episode_spec import REFERENCE_TRAINER, EpisodeSpec, run_spec
from pathways_chaos.harness.properties.settings import ExampleCounter, fail


@dataclasses.dataclass(frozen=True)
class IteratorPhase:
    shards: int
    per_shard_batch: int
    steps: int


@st.composite
def iterator_runs(draw: st.DrawFn) -> tuple[int, bool, list[IteratorPhase]]:
    size = draw(st.integers(1, 200))
    shuffle = draw(st.booleans())
    phases = draw(
        st.lists(
            st.builds(IteratorPhase, st.integers(1, 8), st.integers(1, 4), st.integers(0, 5)),
            min_size=1,
            max_size=4,
        )
    )
    return size, shuffle, phases


def check_iterator_continuity(size: int, shuffle: bool, phases: list[IteratorPhase]) -> None:
    """ElasticIterator restored across shard-count changes eats the fault-free order exactly."""
    import grain

    from pathways_chaos.harness.judging.data_checks import elastic_iterator

    dataset = grain.MapDataset.range(size)
    if shuffle:
        dataset = dataset.shuffle(seed=size)
    eaten: list[int] = []
    state: dict[str, Any] | None = None
    problems: list[str] = []
    for n, phase in enumerate(phases):
        batch = phase.shards * phase.per_shard_batch
        shards = [
            elastic_iterator(dataset, batch, grain.sharding.ShardOptions(i, phase.shards))
            for i in range(phase.shards)
        ]
        for it in shards:
            if state is not None:
                it.set_state(state)
        for _ in range(phase.steps):
            if len(eaten) + batch > size:
                # Not into the last, partial global batch: there grain's per-shard
                # drop_remainder serves some shards and not others (size 13, 4 shards of 4:
                # shard 0 gets ids 0, 4, 8, 12 and advances; shards 1-3 stop).
                break
            parts = [next(it).tolist() for it in shards]
            eaten += [parts[i][j] for j in range(phase.per_shard_batch) for i in range(len(parts))]
        states = [it.get_state() for it in shards]
        if any(s != states[0] for s in states):
            problems.append(f"phase {n}: the shards' states differ: {states}")
        state = states[0]
    expected = [int(dataset[i]) for i in range(len(eaten))]
    problems += compare_ids(eaten, expected, f"size {size}, phases {phases}")
    fail("dataset continuity", problems)


def compare_ids(eaten: list[int], expected: list[int], where: str) -> list[str]:
    """Counter first (duplicates and losses), then the sequence; never a set."""
    got, want = collections.Counter(eaten), collections.Counter(expected)
    if got != want:
        return [
            f"{where}: duplicated ids {sorted((got - want).elements())[:12]}, "
            f"missing ids {sorted((want - got).elements())[:12]}"
        ]
    if eaten != expected:
        at = next(i for i, (a, b) in enumerate(zip(eaten, expected, strict=True)) if a != b)
        return [
            f"{where}: order differs at position {at}: got {eaten[at : at + 6]}, "
            f"expected {expected[at : at + 6]}"
        ]
    return []


@st.composite
def dataset_specs(
    draw: st.DrawFn, max_devices: int, trainer: str = REFERENCE_TRAINER
) -> EpisodeSpec:
    """Episodes whose shard count changes: generated sizes, batches and losses/rejoins."""
    slices = draw(st.integers(2, min(4, max_devices)))
    per_slice = 2 if slices * 2 <= max_devices else 1
    steps = draw(st.integers(4, 10))
    global_batch = slices * draw(st.integers(1, 3))
    return EpisodeSpec(
        schedule=draw(slice_churn(slices, steps, max_events=3)),
        slices=slices,
        devices_per_slice=per_slice,
        scale_up=draw(st.sampled_from(["in_loop", "signal", "off"])),
        steps=steps,
        snapshot_interval=draw(st.integers(1, 4)),
        global_batch=global_batch,
        data_size=steps * global_batch + draw(st.integers(0, 40)),
        poll_interval=draw(st.integers(1, 5)),
        shuffle=draw(st.booleans()),
        trainer=trainer,
    )


def check_dataset_episode(spec: EpisodeSpec, counter: ExampleCounter | None = None) -> None:
    """The ids the committed steps ate are the fault-free order, as a Counter and a sequence."""
    from pathways_chaos.harness.judging.committed import committed_lineage
    from pathways_chaos.harness.judging.oracle import check_batch_sizes
    from pathways_chaos.harness.reference.data import SyntheticData

    events = run_spec(spec, replay=False).events
    if counter is not None:
        counter.saw(events)
    lineage, problems = committed_lineage(events)
    problems += check_batch_sizes(events)
    eaten = [i for record in lineage for i in record.ids]
    data = SyntheticData(size=spec.data_size, shuffle=spec.shuffle)
    problems += compare_ids(eaten, data.order(len(eaten)), "committed steps")
    ends = [e for e in events if e["kind"] == "run_end"]
    if not ends or ends[-1]["status"] != "completed":
        problems.append(f"run did not complete: {ends[-1].get('error') if ends else 'no run_end'}")
    elif len(lineage) != spec.steps:
        problems.append(f"{len(lineage)} committed steps, expected {spec.steps}")
    fail("dataset continuity", problems, spec)
