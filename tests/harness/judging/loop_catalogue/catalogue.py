"""Every loop in the catalogue: where it is, what kind it is, and (for broken ones) the bug, its
cause tag and the fault schedule that shows it.

Metadata is read from each loop file's own ``CAUSE``, ``SCENARIO``, ``SINGLE_FAULTS_PASS`` and
docstring with ``ast`` (no import, no JAX), so this table cannot drift from the loops. Specs are
file paths relative to the repo root, which the toolkit's loop loader accepts.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).resolve().parent

CAUSES = (
    "batch-not-trained",
    "snapshot-mismatch",
    "leaf-reinitialised",
    "leaf-shape-changed",
    "step-not-restored",
    "iterator-not-restored",
    "order-changed",
    "sample-trained-twice",
    "sample-skipped",
    "error-swallowed",
    "stale-mesh",
    "dead-slice-in-mesh",
    "restore-not-latest",
    "started-over",
    "leak",
    "preemption-lost",
    "crash",
    "wrong-final-state",
)

# The schedules every correct loop is surveyed under.
CORRECT_SCHEDULES = (
    "data_loss@batch=10:slice=1:repair_after_polls=3",
    "data_loss@batch=6:slice=2,repair@time=15:slice=2",
    "data_loss@save=3:slice=2:repair_after_polls=3",
    "data_loss@batch=10:slice=2:repair_after_polls=3,data_loss@restore=1:slice=1:repair_after_polls=3",
    "flapping@batch=3:slice=1:times=3:up_accesses=4",
    "data_loss@batch=10:slice=1:repair_after_polls=3,data_loss@batch=10:slice=2:repair_after_polls=3,"
    "data_loss@batch=10:slice=3:repair_after_polls=3",
    "preemption@batch=10",
    "internal@batch=10:slice=1:repair_after_polls=3",
)

# (file, batch schedule): "fixed" loops keep the global batch, so a recovered run must end
# bitwise-or-nearly equal to the fault-free one; "scaled" loops change the batch on a resize.
_FILES: tuple[tuple[str, str], ...] = (
    ("correct/for_in_iterator.py", "fixed"),
    ("correct/zip_range.py", "scaled"),
    ("correct/while_next_namedtuple.py", "fixed"),
    ("correct/trainer_class.py", "scaled"),
    ("correct/fresh_iterator_slice.py", "fixed"),
    ("correct/donated_buffers.py", "fixed"),
    ("correct/restored_kept_alive.py", "scaled"),
    ("correct/no_ids.py", "fixed"),
    ("correct/optax_adam.py", "fixed"),
    ("correct/generator_steps.py", "fixed"),
    ("correct/flax_simple_workload.py", "scaled"),
    ("correct/accumulates_micro_batches.py", "fixed"),
    ("broken/peek_batch_for_shapes.py", "fixed"),
    ("broken/prefetch_ahead_of_snapshot.py", "fixed"),
    ("broken/momentum_rebuilt.py", "fixed"),
    ("broken/bias_sharded_on_replicas.py", "fixed"),
    ("broken/step_restarts_at_zero.py", "fixed"),
    ("broken/iterator_from_scratch.py", "fixed"),
    ("broken/shuffle_seeded_by_attempt.py", "fixed"),
    ("broken/step_errors_swallowed.py", "fixed"),
    ("broken/scale_up_keeps_mesh.py", "scaled"),
    ("broken/mesh_from_jax_devices.py", "fixed"),
    ("broken/snapshot_of_previous_state.py", "fixed"),
    ("broken/warm_start_checkpoint_first.py", "fixed"),
    ("broken/attempt_history_kept.py", "fixed"),
    ("broken/position_from_step.py", "scaled"),
    ("broken/resume_one_past.py", "fixed"),
    ("broken/sigterm_without_checkpoint.py", "fixed"),
    ("broken/adam_count_not_saved.py", "fixed"),
    ("broken/snapshotter_per_attempt.py", "fixed"),
    ("broken/restore_template_drifted.py", "fixed"),
    ("broken/restored_values_unpacked.py", "fixed"),
    ("broken/flax_upstream_step.py", "scaled"),
    ("broken/skip_steps_already_done.py", "fixed"),
    ("broken/scale_up_rewinds_data.py", "scaled"),
    ("broken/restores_older_host_copy.py", "scaled"),
    ("two_faults/relative_position_saved.py", "fixed"),
    ("two_faults/restore_target_cached.py", "fixed"),
    ("two_faults/second_failure_restarts.py", "fixed"),
)


@dataclasses.dataclass(frozen=True)
class Loop:
    """One catalogued loop."""

    name: str
    kind: str  # correct | broken | two_faults
    spec: str  # "tests/harness/judging/loop_catalogue/<kind>/<name>.py:main", from the root
    batch: str  # fixed | scaled
    bug: str  # the docstring's first sentence
    cause: str | None = None
    scenario: str | None = None
    single_faults_pass: tuple[str, ...] = ()
    #: The cause the verdict's first line must name: ``HEADLINE`` where the loop's file says
    #: the first line names the mechanism its ``CAUSE`` is the symptom of, else ``CAUSE``.
    headline: str | None = None

    @property
    def path(self) -> Path:
        return ROOT / self.spec.rsplit(":", 1)[0]


def _read(relative: str, batch: str) -> Loop:
    path = HERE / relative
    tree = ast.parse(path.read_text(), filename=str(path))
    values: dict[str, object] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("CAUSE", "HEADLINE", "SCENARIO", "SINGLE_FAULTS_PASS")
        ):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    doc = " ".join((ast.get_docstring(tree) or "").split())
    bug = doc.split(". ")[0].rstrip(".") + "."
    kind = Path(relative).parent.name
    return Loop(
        name=path.stem,
        kind=kind,
        spec=f"{path.relative_to(ROOT).as_posix()}:main",
        batch=batch,
        bug=bug,
        cause=values.get("CAUSE"),  # type: ignore[arg-type]
        scenario=values.get("SCENARIO"),  # type: ignore[arg-type]
        single_faults_pass=tuple(values.get("SINGLE_FAULTS_PASS", ())),  # type: ignore[arg-type]
        headline=values.get("HEADLINE", values.get("CAUSE")),  # type: ignore[arg-type]
    )


LOOPS: tuple[Loop, ...] = tuple(_read(f, b) for f, b in _FILES)


def by_kind(kind: str) -> list[Loop]:
    return [loop for loop in LOOPS if loop.kind == kind]
