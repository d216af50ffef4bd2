"""The judge panel: small named judges over one history, composed into one ``Verdict``.

A judge reads the history and returns its violations (none: it passed) or a string, why it
could not judge. Each is heard on its own: one that raises (our bug) is "not judged: the judge
failed" under its own name, and the others' findings stand, so a failure elsewhere in the log
is still reported. The reference trainer's oracle and the loop oracle are two panels of this
one kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from pathways_chaos.harness.judging.verdict import Verdict, judge_error

#: What a judge says: its violations (an empty list: it passed), or why it could not judge.
type Finding = list[str] | str


@dataclasses.dataclass(frozen=True)
class Judge[H]:
    """One named judge of a history of type ``H``."""

    name: str
    judge: Callable[[H], Finding]


def convene[H](
    judges: Iterable[Judge[H]],
    history: H,
    into: Verdict,
    *,
    last_if_others: Sequence[str] = (),
    causes: Callable[[str, str], list[str]] | None = None,
) -> Verdict:
    """Hears every judge on ``history`` and records each finding in ``into``, in the judges'
    order; ``last_if_others`` are listed after the rest when another judge found something (a
    crash, the end of many a cause, after the cause); ``causes`` names what each violation
    points to (the first is its cause)."""
    heard: dict[str, Finding] = {}
    for judge in judges:
        try:
            heard[judge.name] = judge.judge(history)
        except Exception as failure:  # the toolkit's bug, never the subject's failure
            into.judge_errors[judge.name] = judge_error(failure)
    others = any(isinstance(f, list) and f for n, f in heard.items() if n not in last_if_others)
    for name in sorted(heard, key=lambda n: others and n in last_if_others):
        finding = heard[name]
        if isinstance(finding, str):
            into.not_judged[name] = finding
            continue
        into.judged.append(name)
        into.failed += [name] if finding else []
        into.violations += finding
        if causes is not None:
            named = [causes(name, text) for text in finding]
            into.causes += [n[0] for n in named]
            into.named |= {c for n in named for c in n}
    return into
