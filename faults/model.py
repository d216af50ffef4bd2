"""One fault model for every injector: a fault, when it fires, and its command-line text form.

Text form of one scheduled fault: ``KIND@TRIGGER=VALUE[:PARAM=VALUE...]``, for example
``data_loss@step=12:slice=2``. A schedule joins them with commas. ``parse_schedule`` and
``Schedule.to_text`` round-trip, so a shrunk hypothesis failure can be pasted into a replay.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Self, TypeVar

from pathways_chaos.harness.errors import ChaosError

TargetT = TypeVar("TargetT")

#: Trigger kinds: ``step`` fires after that step ran (before it is committed), ``time`` at that
#: many seconds on the episode clock, ``restore`` on the Nth restore of the run, ``save`` on
#: the Nth snapshot save, ``attempt`` at the start of the Nth attempt, ``batch`` when the Nth
#: batch has been drawn from the data iterator (counted over the episode, from 1; for a user's
#: own loop, which has no step events, ``step=N`` means ``batch=N``), ``callback`` inside the
#: Nth call of the trainer's elastic-event callback (``elastic_event``).
TRIGGER_KINDS = ("step", "time", "restore", "save", "attempt", "batch", "callback")
#: Triggers that count events from 1 (``step`` is a step number, from 0; ``time`` seconds).
COUNTED_FROM_ONE = frozenset({"restore", "save", "attempt", "batch", "callback"})


#: The largest count a fault takes (``times``, ``polls``, ``saves``...): a billion repeats
#: never ends on the fake and is always a typo.
MAX_COUNT = 1_000
#: The longest a fault may hold something on the episode clock (``seconds``): one day.
MAX_SECONDS = 86_400.0
#: The largest index or step a parameter may name: anything beyond int32 is a typo.
MAX_INDEX = 2**31 - 1
#: A run of characters longer than this is cut in a message (a 120k-character value).
_LONGEST_WORD = 120


class FaultSpecError(ChaosError, ValueError):
    """A fault or schedule text that cannot be understood; the message is kept short."""

    def __init__(self, message: str = "") -> None:
        super().__init__(cut_long_words(str(message)))


def cut_long_words(text: str, limit: int = _LONGEST_WORD) -> str:
    """``text`` with every run of more than ``limit`` non-space characters cut, its length said."""
    if len(text) <= limit:
        return text
    out = []
    for word in text.split(" "):
        if len(word) > limit:
            word = f"{word[: limit - 40]}...({len(word)} characters)"
        out.append(word)
    return " ".join(out)


@dataclasses.dataclass(frozen=True, order=True)
class Trigger:
    """When a fault fires."""

    kind: str
    value: float | int

    def __post_init__(self) -> None:
        if self.kind not in TRIGGER_KINDS:
            raise FaultSpecError(
                f"unknown trigger {self.kind!r}: use one of {', '.join(TRIGGER_KINDS)}"
                " (for example data_loss@step=12:slice=2)"
            )
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise FaultSpecError(f"trigger {self.kind}={self.value!r} is not a number")
        if not math.isfinite(self.value):
            raise FaultSpecError(
                f"trigger {self.kind}={self.value} never comes: use a finite value >= 0"
            )
        if self.value < 0:
            raise FaultSpecError(f"trigger {self.kind}={self.value} is negative: use a value >= 0")
        if self.kind != "time" and not float(self.value).is_integer():
            raise FaultSpecError(
                f"trigger {self.kind}={self.value} is not a whole number: {self.kind} counts "
                f"(for example {self.kind}={math.floor(self.value)})"
            )
        if self.kind != "time":
            object.__setattr__(self, "value", int(self.value))
        if self.kind in COUNTED_FROM_ONE and self.value == 0:
            raise FaultSpecError(
                f"trigger {self.kind}=0 never comes: {self.kind} counts from 1 (the first is "
                f"{self.kind}=1)"
            )
        if self.kind != "time" and self.value > MAX_INDEX:
            raise FaultSpecError(
                f"trigger {self.kind}={self.value} is too large: use at most {MAX_INDEX}"
            )

    def to_text(self) -> str:
        return f"{self.kind}={_format_value(self.value)}"


_REGISTRY: dict[str, type[Fault[Any]]] = {}


@dataclasses.dataclass(frozen=True)
class Fault[TargetT](abc.ABC):
    """Something that goes wrong, and (where it means something) how it is undone.

    Subclasses are frozen dataclasses whose fields are the fault's parameters; ``kind`` is the
    name used in the text and JSON forms.
    """

    kind: ClassVar[str] = ""
    #: Numeric parameters that may be negative (each with its own meaning, e.g. -1 = "all");
    #: every other number given in the text form must be finite and >= 0.
    signed_params: ClassVar[frozenset[str]] = frozenset()
    #: The most repeats a count parameter of this kind may ask for.
    max_count: ClassVar[int] = MAX_COUNT
    #: Parameters that count repeats (at most ``max_count``).
    count_params: ClassVar[frozenset[str]] = frozenset(
        {"times", "polls", "after_polls", "up_accesses", "saves", "repair_after_polls"}
    )
    #: True for faults that act on Multi-Tier Checkpointing (they need an MTC trainer).
    needs_mtc: ClassVar[bool] = False
    #: The one trigger kind the fault means something with (None: any).
    only_trigger: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
                raise TypeError(f"fault kind {cls.kind!r} registered twice")
            _REGISTRY[cls.kind] = cls

    @abc.abstractmethod
    def inject(self, target: TargetT) -> list[str]:
        """Makes the fault happen; returns one line per thing it touched."""

    def heal(self, target: TargetT) -> list[str]:
        """Undoes the fault where that means something; returns what it touched."""
        del target
        return []

    @abc.abstractmethod
    def describe(self) -> str:
        """One line a person reads in a report."""

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.params()}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise FaultSpecError(
                f"{cls.kind}: unknown parameter(s) {', '.join(unknown)}; "
                f"it takes {', '.join(names) or 'no parameters'}"
            )
        values = {k: _coerce(cls.kind, k, names[k].type, v) for k, v in params.items()}
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if not math.isfinite(value):
                    raise FaultSpecError(f"{cls.kind}: {key}={value}: use a finite number")
                if value < 0 and key not in cls.signed_params:
                    raise FaultSpecError(f"{cls.kind}: {key}={value} is negative: use >= 0")
        try:
            fault = cls(**values)
        except TypeError as error:
            missing = str(error).partition("argument")[2].strip(": ") or str(error)
            raise FaultSpecError(f"{cls.kind}: missing parameter {missing}") from None
        check_params(fault)
        return fault


def check_params(fault: Fault[Any]) -> None:
    """Every number a fault holds is finite and bounded: counts, seconds, indices.

    Called by the parser and again by ``check_schedule_fits`` (so a fault built in Python is
    checked too, before anything runs).
    """
    for key, value in fault.params().items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        shown = f"{fault.kind}: {key}={value}"
        if not math.isfinite(value):
            raise FaultSpecError(f"{shown}: use a finite number")
        if value < 0 and key not in fault.signed_params:
            raise FaultSpecError(f"{shown} is negative: use >= 0")
        if key in fault.count_params and value > fault.max_count:
            raise FaultSpecError(f"{shown} is too many: use at most {fault.max_count}")
        if key.endswith("seconds") and value > MAX_SECONDS:
            raise FaultSpecError(f"{shown} is longer than a day: use at most {MAX_SECONDS:g}")
        if abs(value) > MAX_INDEX:
            raise FaultSpecError(f"{shown} is too large: use at most {MAX_INDEX}")


def fault_kinds() -> dict[str, type[Fault[Any]]]:
    """Every registered fault kind (importing the ``faults`` package registers the built-ins)."""
    return dict(_REGISTRY)


def fault_from_json(data: Mapping[str, Any]) -> Fault[Any]:
    params = dict(data)
    kind = params.pop("kind", None)
    return _fault_class(str(kind)).from_params(params)


@dataclasses.dataclass(frozen=True)
class ScheduledFault:
    """A fault and the moment it fires."""

    at: Trigger
    fault: Fault[Any]

    def __post_init__(self) -> None:
        only = self.fault.only_trigger
        if only is not None and self.at.kind != only:
            raise FaultSpecError(
                f"{self.fault.kind}@{self.at.to_text()}: {self.fault.kind} fires inside a call "
                f"that only the {only}= trigger names: write {self.fault.kind}@{only}=N"
            )

    def to_text(self) -> str:
        parts = [f"{self.fault.kind}@{self.at.to_text()}"]
        defaults = {f.name: f.default for f in dataclasses.fields(self.fault)}
        parts += [
            f"{k}={_format_value(v)}"
            for k, v in self.fault.params().items()
            if v != defaults.get(k, dataclasses.MISSING)
        ]
        return ":".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"at": {"kind": self.at.kind, "value": self.at.value}, "fault": self.fault.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduledFault:
        return cls(Trigger(data["at"]["kind"], data["at"]["value"]), fault_from_json(data["fault"]))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Faults at steps or times; the order of entries is the order they were written."""

    entries: tuple[ScheduledFault, ...] = ()

    def __iter__(self) -> Iterator[ScheduledFault]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def to_text(self) -> str:
        return ",".join(e.to_text() for e in self.entries)

    def to_json(self) -> str:
        return json.dumps([e.to_json() for e in self.entries])

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        return cls(tuple(ScheduledFault.from_json(d) for d in json.loads(text)))

    @classmethod
    def of(cls, entries: Iterable[ScheduledFault]) -> Schedule:
        return cls(tuple(entries))


def parse_fault(text: str) -> ScheduledFault:
    """Parses ``KIND@TRIGGER=VALUE[:PARAM=VALUE...]``."""
    text = text.strip()
    head, _, rest = text.partition(":")
    kind, sep, trigger_text = head.partition("@")
    if not sep:
        raise FaultSpecError(
            f"{text!r} has no trigger: write KIND@step=N or KIND@time=SECONDS, "
            "for example data_loss@step=12:slice=2"
        )
    cls = _fault_class(kind)
    trig_kind, eq, trig_value = trigger_text.partition("=")
    if not eq:
        raise FaultSpecError(f"{text!r}: trigger {trigger_text!r} needs a value, e.g. step=12")
    trigger = Trigger(trig_kind, _parse_number(trig_value, text))
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(":")):
        key, eq, value = item.partition("=")
        if not eq:
            raise FaultSpecError(f"{text!r}: parameter {item!r} needs a value, e.g. slice=2")
        if key in params:
            raise FaultSpecError(f"{text!r}: parameter {key!r} is given twice; give it once")
        params[key] = value
    return ScheduledFault(trigger, cls.from_params(params))


def as_schedule(schedule: str | Schedule) -> Schedule:
    """A schedule given as text or as a ``Schedule``; anything else refused in one line."""
    return schedule if isinstance(schedule, Schedule) else parse_schedule(schedule)


def parse_schedule(text: str) -> Schedule:
    """Parses comma-separated faults; an empty text is the empty schedule (a fault-free run),
    and a text of separators alone is refused: it looks like faults and names none."""
    if not isinstance(text, str):
        raise FaultSpecError(
            f"a schedule is text such as 'data_loss@batch=12:slice=2' (or a Schedule), not "
            f"{type(text).__name__}: pass it as a string"
        )
    schedule = Schedule(tuple(parse_fault(part) for part in text.split(",") if part.strip()))
    if text.strip() and not len(schedule):
        raise FaultSpecError(
            f"the schedule {text.strip()!r} names no fault: give faults such as "
            "data_loss@batch=12:slice=2 (an empty schedule is written '')"
        )
    return schedule


def check_schedule_fits(
    schedule: Schedule, num_slices: int, *, kubernetes: bool, mtc_hosts: int | None = None
) -> None:
    """Refuses, before anything runs, faults the cluster cannot act out.

    A slice index outside the topology, a Kubernetes fault where there is no Kubernetes API
    (the in-process fake), a Multi-Tier Checkpointing fault on a trainer without MTC
    (``mtc_hosts`` None) or a host outside its hosts would otherwise fail mid-episode, retry
    forever, or never happen at all.
    """
    for entry in schedule:
        fault = entry.fault
        check_params(fault)
        if fault.needs_mtc:
            if mtc_hosts is None:
                raise FaultSpecError(
                    f"{entry.to_text()}: {fault.kind} acts on Multi-Tier Checkpointing, and this "
                    "trainer has none: run it with the chaos_mtc fixture (an MTC trainer)"
                )
            host = getattr(fault, "host", None)
            if isinstance(host, int) and not 0 <= host < mtc_hosts:
                raise FaultSpecError(
                    f"{entry.to_text()}: host {host} is outside the cluster's {mtc_hosts} hosts "
                    f"(use 0..{mtc_hosts - 1}, one per slice)"
                )
        index = getattr(fault, "slice", None)
        if isinstance(index, int) and not 0 <= index < num_slices:
            raise FaultSpecError(
                f"{entry.to_text()}: slice {index} is outside the cluster's {num_slices} slices "
                f"(use 0..{num_slices - 1})"
            )
        if getattr(fault, "needs_kubernetes", False) and not kubernetes:
            raise FaultSpecError(
                f"{entry.to_text()}: {fault.kind} acts on Kubernetes objects and needs --cluster "
                "(with --namespace and --jobset) or the local control plane; the in-process fake "
                "cluster has no Pods, Nodes or Jobs"
            )


def _fault_class(kind: str) -> type[Fault[Any]]:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise FaultSpecError(
            f"unknown fault kind {kind!r}: known kinds are {', '.join(sorted(_REGISTRY))}"
        ) from None


def _parse_number(value: str, context: str) -> int | float:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            raise FaultSpecError(f"{context!r}: {value!r} is not a number") from None


def _coerce(kind: str, key: str, annotation: Any, value: Any) -> Any:
    """A text parameter as its field's type, or one line saying what was expected."""
    if not isinstance(value, str):
        return value
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if name.startswith("int"):
        try:
            return int(value)
        except ValueError:
            raise FaultSpecError(
                f"{kind}: {key}={value!r} is not a whole number (for example {key}=2)"
            ) from None
    if name.startswith("float"):
        try:
            return float(value)
        except ValueError:
            raise FaultSpecError(
                f"{kind}: {key}={value!r} is not a number (for example {key}=1.5)"
            ) from None
    if name.startswith("bool"):
        if value.lower() not in ("true", "false", "1", "0"):
            raise FaultSpecError(f"{kind}: {key}={value!r} is not a boolean: use true or false")
        return value.lower() in ("true", "1")
    return value


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)
