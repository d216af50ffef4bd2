"""The causes a loop verdict names: the vocabulary an acceptance row chooses its fix by, and
which cause each judge's violation text points to."""

from __future__ import annotations

#: What a violation can be caused by, as the verdict names it.
CAUSES = (
    "process-ended",
    "process-left-behind",
    "crash",
    "deadline",
    "not-a-loop",
    "sample-trained-twice",
    "iterator-not-restored",
    "batch-not-trained",
    "sample-skipped",
    "order-changed",
    "started-over",
    "restore-not-latest",
    "preemption-lost",
    "step-not-restored",
    "snapshot-mismatch",
    "leaf-reinitialised",
    "leaf-shape-changed",
    "error-swallowed",
    "dead-slice-in-mesh",
    "stale-mesh",
    "leak",
    "step-count",
    "state-outside-snapshot",
    "wrong-final-state",
)

_CAUSE_BY_TEXT = (
    ("the loop's process", "process-ended"),
    ("the episode passed its wall-time deadline", "deadline"),
    ("the loop used more than", "process-ended"),
    ("the loop wrote more than", "process-ended"),
    ("the loop left", "process-left-behind"),
    ("the loop crashed", "crash"),
    ("the run did not finish", "deadline"),
    ("returned at once", "not-a-loop"),
    ("holding no arrays", "not-a-loop"),
    # An explanation leads over the symptom it explains: a repeat "(... the order of samples
    # changed after the recovery)" is the order's fault.
    ("iterator was not", "iterator-not-restored"),
    ("did not go back to the restored", "iterator-not-restored"),
    ("order of samples changed", "order-changed"),
    ("never trained", "batch-not-trained"),
    ("trained twice", "sample-trained-twice"),
    ("consumed twice", "sample-trained-twice"),
    ("never drawn", "sample-skipped"),
    ("skipped", "sample-skipped"),
    ("order of samples changed", "order-changed"),
    ("order of", "order-changed"),
    ("preemption notice", "preemption-lost"),
    ("wrote on its preemption", "preemption-lost"),
    ("started over", "started-over"),
    ("although the snapshot", "restore-not-latest"),
    ("pairs an older model", "snapshot-mismatch"),
    ("step counter", "step-not-restored"),
    ("re-initialised", "leaf-reinitialised"),
)
_CAUSE_BY_JUDGE = {
    "snapshot-pairs": "snapshot-mismatch",
    "restore-used": "leaf-reinitialised",
    "restore-shapes": "leaf-shape-changed",
    "errors-handled": "error-swallowed",
    "meshes": "dead-slice-in-mesh",
    "scale-up": "stale-mesh",
    "no-leaks": "leak",
    "step-count": "step-count",
    "final-state": "wrong-final-state",
    "restore-keeps-state": "state-outside-snapshot",
}


def cause_of(judge: str, text: str) -> str:
    """The cause a violation names first: by its judge, or by what its text says it saw."""
    return causes_named(judge, text)[0]


def causes_named(judge: str, text: str) -> list[str]:
    """Every cause a violation names (a repeat explained by an iterator left behind names
    both), the first the one it leads with."""
    named = [_CAUSE_BY_JUDGE[judge]] if judge in _CAUSE_BY_JUDGE else []
    if judge in ("final-state", "restore-keeps-state") and "re-initialised" in text:
        named.insert(0, "leaf-reinitialised")  # the difference, explained: a counter reset
    named += [cause for words, cause in _CAUSE_BY_TEXT if words in text and cause not in named]
    return named or [judge]
