"""Property 3, mesh rebuild: after any losses and rejoins the mesh is exactly the active slices."""

from __future__ import annotations

from hypothesis import strategies as st

from pathways_chaos.harness.properties.churn import slice_churn
from pathways_chaos.harness.properties.episode_spec import REFERENCE_TRAINER, EpisodeSpec, run_spec
from pathways_chaos.harness.properties.settings import ExampleCounter, fail


@st.composite
def mesh_specs(draw: st.DrawFn, max_devices: int, trainer: str = REFERENCE_TRAINER) -> EpisodeSpec:
    """Losses (some rejoining after 1-3 polls, inside the run) and repairs on 2-16 slices."""
    slices = draw(st.integers(2, min(16, max_devices)))
    per_slice = draw(st.sampled_from([m for m in (1, 2) if slices * m <= max_devices]))
    steps = draw(st.integers(5, 9))
    return EpisodeSpec(
        schedule=draw(slice_churn(slices, steps, max_events=4, rejoins=True)),
        slices=slices,
        devices_per_slice=per_slice,
        # signal: every rejoin restarts the attempt, so what the last one kept is counted
        scale_up=draw(st.sampled_from(["in_loop", "signal", "signal"])),
        steps=steps,
        snapshot_interval=draw(st.integers(1, 3)),
        global_batch=slices * draw(st.integers(1, 2)),
        poll_interval=draw(st.integers(1, 2)),  # a rejoin is seen within a step or two
        trainer=trainer,
    )


def check_mesh_episode(spec: EpisodeSpec, counter: ExampleCounter | None = None) -> None:
    """Meshes hold exactly the active slices in slice order; nothing on the dead; no growth."""
    from pathways_chaos.harness.judging import oracle

    events = run_spec(spec, replay=False).events
    if counter is not None:
        counter.saw(events)
    problems = (
        oracle.check_meshes(events)
        + oracle.check_scale_up_joins(events)
        + oracle.check_no_leaks(events)
    )
    ends = [e for e in events if e["kind"] == "run_end"]
    if not ends or ends[-1]["status"] != "completed":
        problems.append(f"run did not complete: {ends[-1].get('error') if ends else 'no run_end'}")
    fail("mesh rebuild", problems, spec)
