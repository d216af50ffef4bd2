"""How an episode's runs went, before what they trained: every scheduled fault fired, the last
run completed (or the one line on why not: a crash with its frame, an ending the supervisor
named, a loop that could not be loaded), and a completed run did some training."""

from __future__ import annotations

from collections.abc import Sequence

from pathways_chaos.faults.slice import PERSISTENT_ATTEMPTS, SLICE_DOWN_CODES
from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.wording import leaf_name
from pathways_chaos.harness.judging.wording import one_line as _line
from pathways_chaos.harness.judging.wording import plural as _plural


def must_propagate(events: Sequence[Event]) -> tuple[str, str] | None:
    """The first injected error that is not a slice-down error (``raise_error`` with
    ``INVALID_ARGUMENT``, say), as (its code, the fault's text): pathwaysutils' ``elastic_retry``
    does not retry it, so the run must end with it."""
    for e in events:
        fault = e.get("fault") if e["kind"] == "fault" else None
        if isinstance(fault, dict) and fault.get("kind") in ("raise_error", "callback_error"):
            code = str(fault.get("code", ""))
            if code not in SLICE_DOWN_CODES:
                return code, str(e.get("text", "raise_error"))
    return None


def repeated_error(events: Sequence[Event]) -> tuple[str, str, int] | None:
    """The first injected slice-down error raised again at the start of the attempts after it
    (``raise_error`` with ``attempts`` > 1), as (its code, the fault's text, its attempts); None
    when there is none, or when the loop runs no ``elastic_retry`` attempts to raise it in."""
    if not any(e["kind"] == "attempt_start" for e in events):
        return None
    for e in events:
        fault = e.get("fault") if e["kind"] == "fault" and "repeat" not in e else None
        if isinstance(fault, dict) and fault.get("kind") == "raise_error":
            code, attempts = str(fault.get("code", "")), int(fault.get("attempts", 1))
            if code in SLICE_DOWN_CODES and attempts > 1:
                return code, str(e.get("text", "raise_error")), attempts
    return None


def must_end_in_error(events: Sequence[Event]) -> bool:
    """Whether the run is judged by how it ended: given an error not to retry, one that
    persists past every retry (``attempts`` >= ``PERSISTENT_ATTEMPTS``), or one its retry
    policy gave up on while it went on."""
    if must_propagate(events) is not None:
        return True
    repeated = repeated_error(events)
    if repeated is None:
        return False
    return repeated[2] >= PERSISTENT_ATTEMPTS or _gave_up_while_repeated(events, repeated)


def _gave_up_while_repeated(events: Sequence[Event], repeated: tuple[str, str, int]) -> bool:
    """The retry policy ended the run (``ElasticRuntimeError``) while the repeated error was
    still raised: its last attempt met it."""
    ends = [e for e in events if e["kind"] == "run_end"]
    if not ends or ends[-1]["status"] != "failed":
        return False
    if not str(ends[-1].get("error") or "").startswith("ElasticRuntimeError"):
        return False
    last = ends[-1]["run"]
    starts = [e["seq"] for e in events if e["kind"] == "attempt_start" and e["run"] == last]
    met = [e["seq"] for e in events if e["kind"] == "fault" and e.get("text") == repeated[1]]
    return bool(starts and met) and max(met) > max(starts)


def own_retry(events: Sequence[Event]) -> str:
    """Why attempts cannot be told apart when the loop retried by itself: it caught a
    slice-down error and went on with no ``elastic_retry`` around it (attempts are counted by
    ``elastic_retry``), or "" when it did not."""
    if any(e["kind"] == "attempt_start" for e in events):
        return ""
    if not any(e["kind"] == "slice_error_caught" for e in events):
        return ""
    return (
        "the loop retried by itself (it caught the slice-down error, with no elastic_retry "
        "around it), and attempts are counted by elastic_retry, so its attempts and the "
        "restore each began with cannot be told apart"
    )


def completed(events: Sequence[Event], ends: list[Event], failed: Event | None) -> list[str] | str:
    propagate = must_propagate(events)
    if propagate is not None and ends:
        return _propagated(propagate, ends[-1], failed)
    repeated = repeated_error(events)
    if repeated is not None and ends:
        found = _repeated(repeated, ends[-1], failed, events)
        if found is not None:
            return found
    if not ends:
        unloadable = next((e for e in events if e["kind"] == "loop_unloadable"), None)
        if unloadable is not None:
            return [f"the loop could not be loaded in its process: {_line(unloadable['message'])}"]
        return ["the loop never finished a run: no run_end in the log"]
    if ends[-1]["status"] == "completed":
        return _unreadable_result(ends[-1])
    if failed is None:
        return [f"the loop's last run ended {ends[-1]['status']}, not completed"]
    where = failed.get("where")
    cause = failed.get("cause")
    text = str(failed.get("error") or "")
    if failed.get("process_end"):  # the supervisor's account of how the process ended
        return [_line(text.partition(": ")[2], 500)]
    if text.startswith(("EpisodeDeadlineExceeded", "UnsatisfiableWait")):
        return [f"the run did not finish: {_line(text.partition(': ')[2], 500)}"]
    return [
        f"the loop crashed: {_line(failed.get('error'))}"
        + (f" (caused by {_line(cause)})" if cause else "")
        + (f", raised at {where}" if where else "")
        + _in_callback(events, text)
    ]


def _in_callback(events: Sequence[Event], error: str) -> str:
    """The hint for a slice-down error the loop's elastic-event callback let out."""
    for e in events:
        if e["kind"] != "elastic_event_raised" or not str(e.get("message")):
            continue
        message = str(e["message"])
        if message in error and message.startswith(SLICE_DOWN_CODES):
            return (
                ": the loop's on_elastic_event_callback let it out, and elastic_retry runs "
                "the callback inside its handler, so anything it raises ends the retries "
                "(catch the slice-down errors it meets there)"
            )
    return ""


def _unreadable_result(end: Event) -> list[str]:
    """A state the loop returned that cannot be read: the run's result is lost (the last save
    read for a loop that returned nothing may lie on a lost slice and is not the result)."""
    if end.get("final_from"):
        return []
    for path, leaf in (end.get("final_state") or {}).items():
        if isinstance(leaf, dict) and "unreadable" in leaf:
            return [
                f"the loop returned a final state it cannot read: reading {leaf_name(path)} raised "
                f"{_line(str(leaf['unreadable']))}. It lives on devices that are gone, so the "
                "run's result is lost: was a slice-down error caught and training gone on "
                "without a restore?"
            ]
    return []


def _propagated(propagate: tuple[str, str], last: Event, failed: Event | None) -> list[str] | str:
    """A run given an error it must not retry ends with that error, and only then."""
    code, text = propagate
    if last["status"] == "completed":
        return [
            f"the run completed although {text} raised {code}, which is not a slice-down "
            "error: the loop retried or swallowed it (elastic_retry lets it propagate; "
            "retrying a program's own error hides it: re-raise what "
            "is_error_due_to_slice_down does not count)"
        ]
    said = (failed or {}).get("error"), (failed or {}).get("cause")
    error = " ".join(str(x) for x in said if x)
    if code in error and failed is last:
        return []  # it propagated, as it must
    return completed([], [last], failed) if error else [f"the run ended {last['status']}"]


def _repeated(
    repeated: tuple[str, str, int], last: Event, failed: Event | None, events: Sequence[Event]
) -> list[str] | str | None:
    """How a run given an error in attempt after attempt ended: its retry policy gave up while
    the error went on (right), it went on past an error that never went away, or it never
    stopped; None: judged as any run."""
    code, text, attempts = repeated
    if last["status"] == "completed":
        if attempts < PERSISTENT_ATTEMPTS:
            return None  # it outlasted the error
        return [
            f"the run completed although {text} raised {code} in every attempt: the loop "
            "went on past an error that never went away (caught it, or retried it by itself)"
        ]
    if str((failed or {}).get("error") or "").startswith("AttemptGuardError"):
        return _never_stopped(text, code, last, events)
    if _gave_up_while_repeated(events, repeated):
        return []  # its retry policy gave up, as it must
    return None


def _never_stopped(text: str, code: str, last: Event, events: Sequence[Event]) -> list[str] | str:
    """The observer stopped a loop after ``PERSISTENT_ATTEMPTS`` attempts: why it went on, from
    what its ``elastic_retry`` was given."""
    met = sum(1 for e in events if e["kind"] == "fault" and e.get("text") == text)
    policies = [e for e in events if e["kind"] == "elastic_retry" and e["run"] == last["run"]]
    policy = policies[-1] if policies else {"unlimited": True}
    said = f"the loop met {text}'s {code} in {_plural(met, 'attempt')} and would never have stopped"
    limit = policy.get("max_attempts")
    if policy.get("unlimited"):
        return [
            f"{said} (pathways-chaos stopped it after {PERSISTENT_ATTEMPTS}): elastic_retry "
            "retries forever unless given a retry policy, so an error that persists (a host "
            "callback that fails every time) holds the job's slices for good. Pass "
            "retry_policy=manager.ElasticRetryLimit(max_attempts=N) to elastic_retry"
        ]
    if limit is None or limit >= PERSISTENT_ATTEMPTS:
        return (
            f"its retry policy ({policy['retry_policy']}) had not given up after the "
            f"{PERSISTENT_ATTEMPTS} attempts pathways-chaos lets one run make, so whether it "
            "gives up on an error that persists was not judged"
            + (" (allow fewer attempts to judge it)" if limit is not None else "")
        )
    return [
        f"{said}: its retry policy ({policy['retry_policy']}) gave up, and the loop called its "
        "elastic_retry function again, attempt after attempt (pathways-chaos stopped it after "
        f"{PERSISTENT_ATTEMPTS}): let the policy's ElasticRuntimeError end the run"
    ]


def faults_fired(events: Sequence[Event]) -> list[str] | str:
    """Every scheduled fault happened; one that did not leaves the episode unjudged for it
    (the loop survived nothing), said with what the loop can do about it."""
    unfired = [e["text"] for e in events if e["kind"] == "fault_unfired"]
    # A fault the loop gave no way in (a preemption notice to a loop with no SIGTERM handler,
    # whose default action would end the process at once) happened to nothing.
    unfired += [
        f"{e['text']} ({e['raised']})"
        for e in events
        if e["kind"] == "fault" and str(e.get("raised", "")).startswith("not injected")
    ]
    # An error to raise again at each attempt's start, in a loop that runs no elastic_retry
    # attempts (it retries by itself): raised once, so its repeats happened to nothing.
    if not any(e["kind"] == "attempt_start" for e in events):
        unfired += [
            f"{e['text']} (raised once: the loop runs no elastic_retry attempts to raise it "
            "again in)"
            for e in events
            if e["kind"] == "fault"
            and isinstance(e.get("fault"), dict)
            and int(e["fault"].get("attempts", 1)) > 1
        ]
    if unfired:
        return (
            f"{_plural(len(unfired), 'scheduled fault')} never fired, so surviving "
            f"{'it' if len(unfired) == 1 else 'them'} was not judged: " + "; ".join(unfired)
        )
    return []


def did_something(events: Sequence[Event], end: Event) -> list[str]:
    """A function that returns at once, or returns something that is not a state, is not
    a training loop that survived: say so instead of passing it."""
    drawn = any(e["kind"] == "batch" for e in events)
    ran = any(e["kind"] in ("exec", "compile", "attempt_start") for e in events)
    if not drawn and not ran:
        return [
            "the loop returned at once without training (no batch drawn, no computation "
            "run): name the function that runs the training loop"
        ]
    returned = end.get("returned")
    if returned is not None and not end.get("final_state"):
        return [
            f"the loop returned {'an' if str(returned)[:1].lower() in 'aeiou' else 'a'} "
            f"{returned} holding no arrays, not its final training state "
            "(return the state, e.g. jax.device_get(state), or None)"
        ]
    return []
