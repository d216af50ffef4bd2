"""The judges that read a loop's chain (``lineage.follow``): was each sample trained exactly
once and in the fault-free order, did each snapshot pair the model with the data position after
the last batch that model saw, did the state trained after a restore come from it, did a
rejoined slice come back into the mesh, was a slice error swallowed. A judge that cannot follow
the chain says "not judged: ...", never a silent pass."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.lineage import (
    SAVE_KINDS,
    Chain,
    Draw,
    Graph,
    batch_root,
    saved_for,
    walk_back,
)


def more_than_fault_free(
    counted: collections.Counter[int], allowed: collections.Counter[int] | None
) -> list[int] | str:
    """The samples trained more often than the fault-free run trained them (once, for one it
    did not train): data that repeats ids by itself (epochs, sampling with replacement, records
    sharing a document id) repeats them there too. Without a fault-free run, a repeat cannot
    be told from such data: not judged."""
    if allowed is None:
        if any(n > 1 for n in counted.values()):
            return (
                "sample ids repeat, and with no fault-free run of the same loop to compare with "
                "a repeat the data itself holds (epochs, sampling with replacement) cannot be "
                "told from one the recovery made"
            )
        return []
    return sorted(s for s, n in counted.items() if n > max(1, allowed.get(s, 0)))


def trained_once_in_order(
    chain: Chain, base: Chain | None, mixture: bool = False
) -> list[str] | str:
    """Every sample in the chain exactly once, in the fault-free run's order; ``mixture``: the
    batches came from several iterators in turn, whose data positions the explanation of a
    repeat cannot compare."""
    trained = chain.trained
    samples = [s for d in trained for s in d.samples]
    what = "sample ids" if all(d.ids is not None for d in trained) else "data positions"
    problems: list[str] = []
    counted = collections.Counter(samples)
    want = (
        [s for d in base.trained for s in d.samples] if base is not None and base.followed else None
    )
    twice = more_than_fault_free(counted, None if want is None else collections.Counter(want))
    if isinstance(twice, str):
        return twice
    differs = None if want is None else _first_difference(samples, want)
    if want is not None and differs is not None and not mixture:
        unsteady = _order_differs_before_a_restore(chain, trained, samples, want, differs, what)
        if unsteady:
            return [unsteady]
    if twice:
        running: collections.Counter[int] = collections.Counter()
        limit = collections.Counter(want or ())
        repeats: list[Draw] = []
        for d in trained:
            running.update(d.samples)
            if any(running[s] > max(1, limit[s]) for s in set(d.samples)):
                repeats.append(d)
        again = [d.label() for d in repeats]
        more = f" and {len(again) - 3} more" if len(again) > 3 else ""
        problems.append(
            f"{what} {ranges(twice)} were trained twice or more: the state was trained on "
            f"them again by {', '.join(again[:3])}{more}"
            + (
                " (the loop trains from several grain iterators, or made a new one that did not "
                "go on where the last stopped: was each put back where the snapshot left it?)"
                if mixture
                else _iterator_after_restore(chain, repeats[0], base)
            )
        )
    if want is None or mixture:
        # A mixture's order and share of each source change with the batch: only repeats count.
        return problems
    missing = list((collections.Counter(want[: len(samples)]) - counted).elements())
    if missing and not twice:
        problems.append(_missing(chain, trained, sorted(missing), what))
    elif not problems and differs is not None:
        draw = _draw_at(trained, differs)
        got, then = samples[differs : differs + 4], want[differs : differs + 4]
        problems.append(
            f"the order of {what} differs from the fault-free run from {draw.label()} on: "
            f"got {got}, the fault-free run {then}"
        )
    return problems


def _first_difference(samples: list[int], want: list[int]) -> int | None:
    """The first index where the trained samples and the fault-free run's differ, if any."""
    return next((i for i, (a, b) in enumerate(zip(samples, want, strict=False)) if a != b), None)


def _drawn_and_dropped(chain: Chain, trained: list[Draw], draw: Draw, sample: int) -> bool:
    """Whether ``sample`` was drawn earlier in ``draw``'s attempt by a batch that was not
    trained: the data came in order, and a batch was dropped."""
    numbers = {d.number for d in trained}
    return any(
        d.number not in numbers and sample in d.samples
        for d in chain.graph.draws.values()
        if (d.run, d.attempt) == (draw.run, draw.attempt) and d.number < draw.number
    )


def _order_differs_before_a_restore(
    chain: Chain, trained: list[Draw], samples: list[int], want: list[int], i: int, what: str
) -> str:
    """The run's first attempt restored nothing, so its data came in the fault-free run's
    order; when it did not (``i``: where they first differ), the data itself differs from run
    to run and no recovery can resume it: that, not a repeat or a skip it causes later, is the
    finding."""
    draw = _draw_at(trained, i)
    first = trained[0]
    if (draw.run, draw.attempt) != (first.run, first.attempt) or first.attempt != 1:
        return ""
    if _drawn_and_dropped(chain, trained, draw, want[i]):
        return ""  # the order held: a batch drawn before it was not trained (a skip)
    return (
        f"the order of {what} differs from the fault-free run already at {draw.label()}, "
        f"before any restore: got {samples[i : i + 4]}, the fault-free run {want[i : i + 4]}: "
        "the loop's data order is not the same from run to run (shuffled or sampled with a "
        "seed from the time, the process or the host?), so no recovery can resume it"
    )


def _iterator_after_restore(chain: Chain, first: Draw, base: Chain | None = None) -> str:
    """Why samples came again (``first``: the first draw that repeats one): the snapshot held no
    data position, the loop did not put the iterator back where the snapshot said, it set the
    iterator back later, or the data order itself changed."""
    key = (first.run, first.attempt)
    restore = next(
        (
            r
            for r in chain.graph.restores
            if (r["run"], r["attempt"]) == key and r["seq"] < first.seq
        ),
        None,
    )
    if restore is None:
        set_back = _iterator_set_back(chain, first, None)
        return set_back or " (the attempt that drew them again restored nothing)"
    head = min(
        (
            d
            for d in chain.graph.draws.values()
            if (d.run, d.attempt) == key and d.seq > restore["seq"]
        ),
        key=lambda d: d.seq,
    )
    saved = restore.get("position")
    if saved is None:
        what = "snapshot" if restore.get("source") == "snapshot" else "checkpoint"
        of = "" if restore.get("step") is None else f" of step {restore['step']}"
        began = "" if head.position is None else f", and the next batch began at {head.position}"
        return (
            f" (the {what}{of} it restored holds no data position the observer reads{began}: "
            "the data iterator was not saved with the model, or a position the loop saved as "
            "a value of its own was not used to put the data back)"
        )
    if head.position is not None and head.position != saved:
        return (
            f" (the restore of step {restore.get('step')} saved data position {saved}, but the "
            f"next batch came from position {head.position}: the data iterator was not restored)"
        )
    set_back = _iterator_set_back(chain, first, restore)
    if set_back:
        return set_back
    if base is not None and head.ids is not None and head.position is not None:
        at = {
            d.position + i: sample
            for d in base.trained
            if d.position is not None and d.ids is not None
            for i, sample in enumerate(d.ids)
        }
        mine = {head.position + i: sample for i, sample in enumerate(head.ids)}
        same = next((d for d in base.trained if d.position == head.position), None)
        differs = any(p in at and at[p] != sample for p, sample in mine.items())
        if same is not None and same.ids is not None and differs:
            return (
                f" (after the restore of step {restore.get('step')} the batch at data position "
                f"{head.position} held sample ids {list(head.ids[:4])}..., the fault-free run's "
                f"{list(same.ids[:4])}...: the order of samples changed after the recovery; is "
                "the shuffle seeded by the attempt?)"
            )
    return ""


def _iterator_set_back(chain: Chain, first: Draw, restore: Event | None) -> str:
    """An iterator put back, inside the attempt and after its restore, behind what had been
    trained (a rebuilt iterator given a stale state, on a scale-up for one)."""
    events = chain.graph.events
    key = (first.run, first.attempt)
    moves = [
        e
        for e in events
        if e["kind"] == "iterator_set_state"
        and (e["run"], e["attempt"]) == key
        and (restore["seq"] if restore is not None else -1) < e["seq"] < first.seq
        and e.get("position") is not None
    ]
    if not moves:
        return ""
    move = moves[-1]
    before = [
        d
        for d in chain.graph.draws.values()
        if (d.run, d.attempt) == key and d.seq < move["seq"] and d.position is not None
    ]
    if not before:
        return ""
    last = max(before, key=lambda d: d.seq)
    reached = (last.position or 0) + (last.size or 0)
    if move["position"] >= reached:
        return ""
    return (
        f" (after {last.label()} the loop set its data iterator back to position "
        f"{move['position']}, behind the {reached} already trained: a rebuilt iterator was "
        "given a stale state)"
    )


def _missing(chain: Chain, trained: list[Draw], missing: list[int], what: str) -> str:
    """Why samples are missing from the chain: drawn and never trained, or never drawn again."""
    graph, walk = chain.graph, chain.walk
    assert walk is not None
    last_exec: dict[tuple[int, int], int] = {}
    for n in walk.execs:
        e = graph.execs[n]
        key = (e["run"], e["attempt"])
        last_exec[key] = max(last_exec.get(key, -1), e["seq"])
    gone = set(missing)
    numbers = {d.number for d in trained}  # a sample drawn twice: not the trained draw
    for draw in sorted(graph.draws.values(), key=lambda d: d.seq):
        if draw.number in numbers or not gone & set(draw.samples):
            continue
        key = (draw.run, draw.attempt)
        if key in last_exec and draw.seq < last_exec[key]:
            return (
                f"{what} {ranges(sorted(gone & set(draw.samples)))} were drawn in "
                f"{draw.label()} and never trained: the state that went on was not trained on "
                "that batch"
            )
    drawn = {s for d in graph.draws.values() for s in d.samples}
    lost = sorted(gone & drawn)
    if lost:
        return (
            f"{what} {ranges(lost)} were skipped: trained only by work a failure threw away, "
            "never drawn again after the restore: the data iterator did not go back to the "
            "restored snapshot's position"
        )
    return f"{what} {ranges(sorted(gone))} were skipped: never drawn by the data iterator"


def snapshots_consistent(chain: Chain) -> list[str] | str:
    """Each save pairs the model with the data position right after its last trained batch."""
    graph = chain.graph
    problems: list[str] = []
    applied = False
    unplaced = 0  # saves of the model with no data position the observer could read
    for save in graph.saves:
        position = save.get("position")
        nodes = [n for n in (save.get("nodes") or {}).values() if n is not None]
        unplaced += position is None and bool(nodes)
        if position is None or not nodes:
            continue
        trained = walk_back(graph, nodes).trained(graph)
        if not trained:
            continue
        last = trained[-1]
        if last.position is None or last.size is None:
            continue
        if last.run != save["run"] or last.attempt != save["attempt"]:
            continue  # no batch of this attempt in it yet: nothing to pair
        applied = True
        want = last.position + last.size
        if position != want:
            problems.append(
                f"the {_save_name(save)} pairs the model trained through {last.label()} (data "
                f"positions {last.position}..{want - 1}) with data position {position}, "
                f"{'ahead of' if position > want else 'behind'} the {want} that model had "
                "reached: a restore of it would "
                + (
                    f"skip positions {want}..{position - 1}"
                    if position > want
                    else f"train positions {position}..{want - 1} again"
                )
            )
    if not applied:
        if unplaced and unplaced == len(graph.saves):
            return (
                f"none of the loop's {unplaced} saves held a data position the observer can "
                "read (a grain iterator's state counted in samples, saved with the model); "
                "a position kept as an array of the loop's own, or grain's state counted in "
                "batches (.batch() before to_iter_dataset()), is not read as one"
            )
        return "no save held both the model and a data position after a batch"
    return problems[:1] + ([f"(and {len(problems) - 1} more saves)"] if len(problems) > 1 else [])


def restores_used(chain: Chain) -> list[str] | str:
    """After a restore the loop trains on what it restored, not a fresh value."""
    graph, walk = chain.graph, chain.walk
    assert walk is not None
    problems: list[str] = []
    applied = False
    for index, restore in enumerate(graph.restores):
        shapes = restore.get("shapes") or {}
        arrays = {
            path
            for path in (restore.get("nodes") or {})
            if shapes.get(path) and shapes[path][0]  # 0-d leaves (a step, a count) are not state
        }
        if not arrays:
            continue
        used = walk.restores.get(index, set())
        if not used:
            continue  # a restore the final state does not come from (a later one replaced it)
        applied = True
        for path in sorted(arrays - used):
            problems.append(
                f"after the restore of step {restore.get('step')} (run {restore['run']} attempt "
                f"{restore['attempt']}), leaf {path} was re-initialised or replaced, not "
                "restored: the state trained on afterwards does not come from the snapshot's "
                "copy of it"
            )
    if not applied:
        return "the final state comes from no restore"
    return problems


def restored_shapes(events: Sequence[Event]) -> list[str] | str:
    """A restore gives back each leaf with the shape and dtype it was saved with."""
    problems: list[str] = []
    applied = False
    saves = [e for e in events if e["kind"] in SAVE_KINDS and e.get("shapes")]
    for restore in (e for e in events if e["kind"] == "restore_end" and e.get("shapes")):
        save = saved_for(saves, restore)
        if save is None:
            continue
        applied = True
        saved = save["shapes"]
        for path, (shape, dtype) in sorted(restore["shapes"].items()):
            if path in saved and saved[path] != [shape, dtype]:
                problems.append(
                    f"the restore of step {restore.get('step')} gave leaf {path} shape "
                    f"{tuple(shape)} {dtype}, saved as {tuple(saved[path][0])} {saved[path][1]}: "
                    "the model changed silently"
                )
    if not applied:
        return "no restore of a save whose shapes were seen"
    return problems


def errors_handled(
    events: Sequence[Event], put_back: frozenset[tuple[int, int]] = frozenset()
) -> list[str] | str:
    """A slice-down error raised to the loop ends its attempt; a loop whose own ``except``
    catches it and goes on trains on a state that lost a step (or on a dead slice). Errors a
    library handles itself (Orbax skipping a lost replica) are not the loop's."""
    errors = {e["number"]: e for e in events if e["kind"] == "slice_error" and "number" in e}
    if not errors:
        return "no slice-down error reached the loop"
    failed = {(e["run"], e["attempt"]) for e in events if e["kind"] == "error"}
    for caught in (e for e in events if e["kind"] == "slice_error_caught"):
        err = errors.get(caught["number"])
        if err is None:
            continue
        key = (err["run"], err["attempt"])
        if key in failed:
            continue  # caught, but the attempt still ended in an error: elastic_retry saw one
        if key in put_back:
            continue  # the final state's chain was put back from host values after it
        later = [
            e
            for e in events
            if e["kind"] in ("batch", "restore_begin")
            and (e["run"], e["attempt"]) == key
            and e["seq"] > err["seq"]
        ]
        if later and later[0]["kind"] == "batch":
            # A restore before the next batch is a recovery of the loop's own (the guide's
            # hand-written retry: catch, wait for slices, rebuild the mesh, restore).
            return [
                f"a slice-down error ({err['message'].split(':')[0]}) raised to the loop at "
                f"{err.get('where') or '?'} was caught at {caught['where']} and ignored in run "
                f"{key[0]} attempt {key[1]}: the loop went on to draw batch "
                f"#{later[0]['batch']} in the same attempt with no restore in between (neither "
                "a new attempt of elastic_retry nor a restore of its own)"
            ]
    return []


def rejoined_slices_used(chain: Chain, events: Sequence[Event]) -> list[str] | str:
    """Once the loop makes a repaired slice active again, its steps run on a mesh holding it."""
    graph, walk = chain.graph, chain.walk
    assert walk is not None
    slices: dict[int, int] = {}
    for e in events:
        if e["kind"] == "run_start":
            slices = {d: int(s) for s, ids in e["slices"].items() for d in ids}
            break
    active_since: list[tuple[int, tuple[int, int], set[int]]] = []
    # A scale-up through a new attempt: the loop raised ScaleUpSignalError and elastic_retry
    # started the next attempt on more slices than the run's previous attempt started with.
    # (After any other error the manager's wait decides the slices, not the loop.)
    regained: dict[tuple[int, int], set[int]] = {}
    last_start: dict[int, set[int]] = {}
    scale_up_asked: set[tuple[int, int]] = set()
    for e in events:
        if e["kind"] in ("active_slices", "attempt_start"):
            active = set(e["slices"] if "slices" in e else e.get("active_slices", []))
            active_since.append((e["seq"], (e["run"], e["attempt"]), active))
        if e["kind"] == "error" and e.get("type") == "ScaleUpSignalError":
            scale_up_asked.add((e.get("run", 0), e.get("attempt", 0)))
        if e["kind"] == "attempt_start":
            if (e["run"], e["attempt"] - 1) in scale_up_asked and e["run"] in last_start:
                regained[(e["run"], e["attempt"])] = active - last_start[e["run"]]
            last_start[e["run"]] = active
    steps = [graph.execs[n] for n in sorted(walk.execs) if _consumes_batch(graph, n)]
    applied = False
    for e in steps:
        key = (e["run"], e["attempt"])
        current = [a for seq, k, a in active_since if k == key and seq < e["seq"]]
        grew = set(regained.get(key, set()))
        if len(current) >= 2:  # and inside the attempt, past its own start: a slice active
            grew |= current[-1] - current[0].intersection(*current[1:-1])  # now, not always
        grew &= current[-1] if current else set()  # still active when the step ran
        if not grew:
            continue
        applied = True
        on = {slices.get(d, -1) for d in e["devices"]}
        missing = sorted(grew - on)
        if missing:
            return [
                f"slice {', '.join(map(str, missing))} rejoined and was made active in run "
                f"{key[0]} attempt {key[1]}, but the step trained on "
                f"{_draw_label(graph, e)} still ran on slices {sorted(on)}: the loop kept the "
                "old mesh (rebuild the mesh, step and shardings after a scale-up)"
            ]
    return _why_no_slice_joined(events) if not applied else []


def _why_no_slice_joined(events: Sequence[Event]) -> str:
    """Why the scale-up judge had nothing to judge, as true as the schedule lets it say."""
    faults = [e["fault"] for e in events if e["kind"] == "fault" and "touched" in e]
    lost = {f.get("slice") for f in faults if f.get("kind") != "repair"}
    repaired = sorted({f.get("slice") for f in faults if f.get("kind") == "repair"} - {None})
    never_lost = [s for s in repaired if s not in lost]
    if never_lost and never_lost == repaired:
        return (
            f"the schedule repaired slice {', '.join(map(str, never_lost))}, which no fault "
            "had taken down, so no slice could come back"
        )
    repaired_at: dict[int, int] = {}
    for e in events:  # the first repair of each slice, by seq
        if e["kind"] == "fault" and "touched" in e and e["fault"].get("kind") == "repair":
            repaired_at.setdefault(e["fault"].get("slice"), e["seq"])
    back_at_start = [
        s
        for s in repaired
        if any(
            e["kind"] == "attempt_start"
            and e["seq"] > repaired_at[s]
            and s in e.get("active_slices", ())
            for e in events
        )
    ]
    if repaired and back_at_start == repaired:
        return (
            f"the repaired slice {', '.join(map(str, repaired))} was back when the next "
            "attempt started (the manager waited for it: pause and resume), so no slice "
            "joined while the loop trained"
        )
    # A loss with repair_after_polls: back once polled, at an attempt's start if it was then.
    came_back = sorted(
        {
            loss["fault"]["slice"]
            for loss in events
            if loss["kind"] == "fault" and "touched" in loss
            and loss["fault"].get("repair_after_polls")
            for e in events
            if e["kind"] == "attempt_start" and e["seq"] > loss["seq"]
            and loss["fault"].get("slice") in e.get("active_slices", ())
        }
    )  # fmt: skip
    if came_back and not repaired:
        return (
            f"{_slices_were(came_back)} back when a later attempt "
            "started (the manager waited for it, or it was back by then), so no slice joined "
            "while the loop trained"
        )
    if repaired:
        return (
            f"the loop never took the repaired {_slices_named(repaired)} back "
            "while training (it trains on without it: capacity is lost, not data)"
        )
    return "the loop took no slice back while training"


def _consumes_batch(graph: Graph, n: int) -> bool:
    return any(batch_root(graph, i) is not None for i in graph.execs[n]["inputs"])


def _draw_label(graph: Graph, e: Event) -> str:
    for i in e["inputs"]:
        d = batch_root(graph, i)
        if d is not None and d in graph.draws:
            return graph.draws[d].label()
    return f"execution {e['n']}"


def _save_name(save: Event) -> str:
    what = "snapshot" if save["kind"] == "snapshot_save" else "checkpoint"
    step = save.get("step")
    return f"{what} of step {step}" if step is not None else f"{what} (no step recorded)"


def _draw_at(trained: list[Draw], index: int) -> Draw:
    for d in trained:
        n = len(d.samples)
        if index < n:
            return d
        index -= n
    return trained[-1]


def ranges(values: Iterable[int]) -> str:
    """[1, 2, 3, 7] -> '1..3, 7' (at most six runs shown)."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    shown = [f"{a}..{b}" if b > a else str(a) for a, b in runs[:6]]
    return ", ".join(shown) + (" ..." if len(runs) > 6 else "")


def _slices_named(slices: Sequence[int]) -> str:
    """ "slice 2", or "slices 1 and 2"."""
    names = [str(s) for s in slices]
    if len(names) == 1:
        return f"slice {names[0]}"
    return f"slices {', '.join(names[:-1])} and {names[-1]}"


def _slices_were(slices: Sequence[int]) -> str:
    return f"the lost {_slices_named(slices)} {'was' if len(slices) == 1 else 'were'}"
