"""The resume-step judge: after restoring step S a loop goes on from S + 1, by the step numbers
its saves carry and the batches trained between (its data position at the first batch, and the
step the next save names).

Steps are counted in the loop's own unit, learned from its saves where nothing was restored
(``loop_lineage.batches_per_step``): two micro-batches a step, or step labels that count the
samples of a batch. An attempt none of whose batches the observer saw cannot be counted, and a
save that names no step cannot be compared: both are said as "not judged", never a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging import lineage as chain_checks
from pathways_chaos.harness.judging.wording import plural as _plural

Key = tuple[int, int]


def resume_step(
    events: Sequence[Event],
    chain: chain_checks.Chain | None = None,
    per_step: Fraction = Fraction(1),
    mixture: bool = False,
    samples_per_step: Fraction | None = None,
) -> list[str] | str:
    """After restoring step S, the first batch is the one saved with S, and the first save
    after k more trained batches carries step S + k (the loop resumed at S + 1). With the
    chain, k counts the batches the saved model was trained on, not those merely drawn.
    ``mixture``: batches from several iterators, whose positions one restore cannot name.
    ``samples_per_step``: the counter's unit in samples, when the fault-free run shows a fixed
    one (a fixed global batch cut into more micro-batches on fewer slices): a save that the
    samples trained since explain is not a step counter left behind."""
    problems: list[str] = []
    applied, unnumbered, uncounted = False, 0, 0
    pending: dict[Key, Event] = {}
    first_batch_checked: set[Key] = set()
    drew: set[Key] = set()  # attempts with a batch the observer saw
    samples: dict[Key, int] = {}  # drawn since the attempt's restore
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        unnumbered += e["kind"] == "restore_end" and e.get("step") is None
        if e["kind"] == "batch":
            drew.add(key)
            samples[key] = samples.get(key, 0) + int(e.get("size") or 0)
        if e["kind"] == "restore_end" and e.get("step") is not None:
            pending[key] = e
            samples[key] = 0
        elif e["kind"] == "batch" and key in pending and key not in first_batch_checked:
            first_batch_checked.add(key)
            restore = pending[key]
            saved = restore.get("position")
            if saved is not None and e["position"] is not None and not mixture:
                applied = True
                if e["position"] != saved:
                    how = "ahead of" if e["position"] > saved else "behind"
                    problems.append(
                        f"run {key[0]} attempt {key[1]} restored step {restore['step']} (data "
                        f"position {saved}) but drew its first batch at data position "
                        f"{e['position']}, {how} it: the data iterator was not restored from "
                        "the snapshot, or was moved after it"
                    )
        elif e["kind"] in ("snapshot_save", "checkpoint_save") and key in pending:
            restore = pending.pop(key)
            if e.get("step") is None:
                unnumbered += 1
                continue
            trained = _trained_between(chain, restore, e)
            if trained is None and key not in drew:
                uncounted += 1  # no batch of this attempt seen: its steps cannot be counted
                continue
            if samples_per_step is not None:
                steps = Fraction(samples.get(key, 0)) / samples_per_step
                if steps.denominator == 1 and e["step"] == restore["step"] + int(steps):
                    applied = True
                    continue  # the samples trained since explain the step: a fixed global batch
            found = _next_save(key, restore, e, trained, per_step)
            if found is None:  # a save between a step's micro-batches: judged at the next one
                pending[key] = restore
                continue
            applied = True
            problems += found
    if not applied:
        return _why_not_judged(unnumbered, uncounted)
    return problems


def _next_save(
    key: Key, restore: Event, save: Event, trained: int | None, per_step: Fraction
) -> list[str] | None:
    """The first save after a restore names the restored step plus the steps trained since
    (``None``: a save between a step's micro-batches, with no whole step to count)."""
    batches = k = save["batches_in_attempt"] - restore["batches_in_attempt"]
    if per_step != 1:  # k batches are k / per_step steps: micro-batches, or labels that
        steps = Fraction(k) / per_step  # count samples (per_step < 1)
        done = None if trained is None else Fraction(trained) / per_step
        if steps.denominator != 1 or (done is not None and done.denominator != 1):
            return None
        k, trained = int(steps), None if done is None else int(done)
    if (
        trained is not None
        and trained != k
        and save["step"]
        in (
            restore["step"] + trained,
            restore["step"] + k,
        )
    ):
        # Batches drawn and not trained (the counter followed the draws or the training):
        # the counter was restored; exactly-once names the batches.
        return []
    k = k if trained is None else trained
    if trained == 0 and save["step"] != restore["step"]:
        return [
            f"run {key[0]} attempt {key[1]} saved step {save['step']} with the model it "
            f"restored from step {restore['step']}, untrained: the save pairs an older "
            "model with a newer step and data position, so the batches between them "
            "are never trained"
        ]
    if save["step"] == restore["step"] + k:
        return []
    unit = 1 if per_step >= 1 else int(1 / per_step)  # step labels per batch
    trained_text = (
        _plural(k, "batch", "batches")
        if per_step == 1
        else f"{_plural(k, 'step', 'steps')} of {per_step} batches"
        if per_step > 1
        else f"{_plural(batches, 'batch', 'batches')} of {unit} step labels each"
    )
    return [
        f"run {key[0]} attempt {key[1]} restored step {restore['step']}, trained "
        f"{trained_text} and saved step {save['step']}: it resumed at step "
        f"{save['step'] - k + unit}, not step {restore['step'] + unit} (the step counter was "
        "not restored from the snapshot)"
    ]


def _why_not_judged(unnumbered: int, uncounted: int = 0) -> str:
    if uncounted:
        return (
            "the attempts that restored drew no batch the observer can see (from a grain "
            "iterator or DataLoader, or a generator of the loop's own whose batches carry "
            "sample ids), so the steps trained between a restore and the next save could not "
            "be counted"
        )
    if unnumbered:  # restores and saves of a save that named no step
        return (
            "the loop's restores and saves carry no step number the observer can read (a "
            "path-only save such as StandardCheckpointer.save(path) names none; "
            "CheckpointManager.save(step, ...) and a Snapshotter do), so the step a "
            "resume continues from could not be compared"
        )
    return "no restore was followed by a batch and a save"


def _trained_between(chain: chain_checks.Chain | None, restore: Event, save: Event) -> int | None:
    """Batches of the attempt drawn between a restore and a save that the saved model was
    trained on (``None`` when the chain cannot say)."""
    if chain is None or not chain.followed or not save.get("nodes"):
        return None
    walk = chain_checks.walk_back(chain.graph, [n for n in save["nodes"].values() if n is not None])
    key = (save["run"], save["attempt"])
    return sum(
        1
        for d in walk.trained(chain.graph)
        if (d.run, d.attempt) == key and restore["seq"] < d.seq < save["seq"]
    )
